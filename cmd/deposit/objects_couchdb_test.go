package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/internal/peertest"
)

// couchCounter is a reverse proxy to pouchdb-server that counts, per
// document, the PUTs pouchdb answered 2xx: the writes it applied. A PUT
// with ?rev= is an update, one without a create.
type couchCounter struct {
	proxy *httputil.ReverseProxy

	mu               sync.Mutex
	creates, updates map[string]int // by document id
	refused          int            // PUTs answered otherwise (409: exists, or not the latest revision)
}

func newCouchCounter(t *testing.T, server string) *couchCounter {
	u, err := url.Parse(server)
	require.NoError(t, err)
	c := &couchCounter{creates: map[string]int{}, updates: map[string]int{}}
	c.proxy = httputil.NewSingleHostReverseProxy(u)
	c.proxy.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		if r.Method != http.MethodPut {
			return nil
		}
		id := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		c.mu.Lock()
		defer c.mu.Unlock()
		switch {
		case resp.StatusCode/100 != 2:
			c.refused++
		case r.URL.Query().Has("rev"):
			c.updates[id]++
		default:
			c.creates[id]++
		}
		return nil
	}
	return c
}

// ServeHTTP forwards r, to its end even when its sender is gone (another
// request of a process killed): pouchdb goes on with a write whose sender
// hung up, and the count must see it. The context can be canceled, though
// never is, so that the proxy does not cancel on the connection's close
// instead.
func (c *couchCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	c.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// refusedPUTs is how many PUTs pouchdb answered other than 2xx.
func (c *couchCounter) refusedPUTs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// counts are the writes applied so far: creates and updates in all, and
// per document.
func (c *couchCounter) counts() (creates, updates int, perCreate, perUpdate map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	perCreate, perUpdate = map[string]int{}, map[string]int{}
	for id, n := range c.creates {
		creates += n
		perCreate[id] = n
	}
	for id, n := range c.updates {
		updates += n
		perUpdate[id] = n
	}
	return creates, updates, perCreate, perUpdate
}

// couchDocs reads every document of the database at db (_all_docs with
// include_docs), straight from pouchdb-server, by document id.
func couchDocs(db string) (map[string]map[string]any, error) {
	resp, err := http.Get(db + "/_all_docs?include_docs=true")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("_all_docs: %s", resp.Status)
	}
	var all struct {
		Rows []struct {
			ID  string         `json:"id"`
			Doc map[string]any `json:"doc"`
		} `json:"rows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		return nil, err
	}
	docs := map[string]map[string]any{}
	for _, row := range all.Rows {
		docs[row.ID] = row.Doc
	}
	return docs, nil
}

// revNumber is the N of a CouchDB revision "N-digest": how many times the
// document was written.
func revNumber(rev string) (int, error) {
	n, _, ok := strings.Cut(rev, "-")
	if !ok {
		return 0, fmt.Errorf("revision %q is not N-digest", rev)
	}
	return strconv.Atoi(n)
}

// Chaos for objects on CouchDB (issue 41): a real pouchdb-server behind
// drivertest's faults (writes dropped after pouchdb applied them, resets,
// 500s, 503s with Retry-After, on reads too), the deposit command
// SIGKILLed at PUTs that took effect, three inputs of the same 300
// objects on one store (v1; v2 with 90 changed; v3 with 90 changed again,
// 30 of them changed in v2 too), each re-run until exit 0. Each update is
// applied exactly once: pouchdb answered 2xx to 300 creates and one update
// per change, and every document's revision number is 1 plus its changes,
// which CouchDB counts for us. Then the v1 input again sends nothing (its
// changed objects stale), and with the store lost the v3 input applies no
// write and exits 0.
func TestKilledCouchDBRunsApplyEachObjectUpdateOnce(t *testing.T) {
	db := peertest.PouchDB(t)
	server := strings.TrimSuffix(db, "/deposit")
	counter := newCouchCounter(t, server)
	dir := t.TempDir()
	store := filepath.Join(dir, "deposit.db")

	const n = 300
	// changes(i, v) is how many times object i changed up to version v:
	// v2 changes i%10 in {0,1,2}, v3 changes i%10 in {2,3,4}.
	changes := func(i, v int) int {
		c := 0
		if v >= 2 && i%10 <= 2 {
			c++
		}
		if v >= 3 && i%10 >= 2 && i%10 <= 4 {
			c++
		}
		return c
	}
	payload := func(i, v int) []byte {
		edition := 1 + changes(i, v)
		return fmt.Appendf(nil, `{"id":"obj-%03d","title":"Object %d","edition":%d,"notes":["made in v1","edition %d"]}`, i, i, edition, edition)
	}
	batch := func(v int) [][]byte {
		var out [][]byte
		for i := range n {
			out = append(out, payload(i, v))
		}
		return out
	}
	totalChanges := func(v int) int {
		total := 0
		for i := range n {
			total += changes(i, v)
		}
		return total
	}

	// check holds pouchdb's documents against batch v: one per object, each
	// with v's content (less _id and _rev) and revision 1 + its changes; and
	// the writes applied: one create per document, one update per change.
	check := func(v int) error {
		docs, err := couchDocs(db)
		if err != nil {
			return err
		}
		if len(docs) != n {
			return fmt.Errorf("%d documents, want %d", len(docs), n)
		}
		creates, updates, perCreate, perUpdate := counter.counts()
		if creates != n || updates != totalChanges(v) {
			return fmt.Errorf("pouchdb applied %d creates and %d updates, want %d and %d", creates, updates, n, totalChanges(v))
		}
		seen := map[int]bool{}
		for id, doc := range docs {
			rev, _ := doc["_rev"].(string)
			delete(doc, "_id")
			delete(doc, "_rev")
			var i int
			if _, err := fmt.Sscanf(fmt.Sprint(doc["id"]), "obj-%03d", &i); err != nil || i < 0 || i >= n || seen[i] {
				return fmt.Errorf("document %s: no object of the batch, or a second of one: %v", id, doc)
			}
			seen[i] = true
			var want map[string]any
			if err := json.Unmarshal(payload(i, v), &want); err != nil {
				return err
			}
			got, _ := json.Marshal(doc)
			wanted, _ := json.Marshal(want)
			if string(got) != string(wanted) {
				return fmt.Errorf("document %s holds %s, want v%d's %s", id, got, v, wanted)
			}
			nrev, err := revNumber(rev)
			if err != nil {
				return fmt.Errorf("document %s: %w", id, err)
			}
			if nrev != 1+changes(i, v) || perCreate[id] != 1 || perUpdate[id] != changes(i, v) {
				return fmt.Errorf("document %s (object %d): revision %s, %d creates, %d updates; want revision %d-, 1 create, %d updates",
					id, i, rev, perCreate[id], perUpdate[id], 1+changes(i, v), changes(i, v))
			}
		}
		return nil
	}

	const faults = "drop=0.15,reset=0.05,500=0.05,503=0.1:retry-after=1,reads"
	harness := func(v int, kills []int64, addr string) drivertest.Harness {
		return drivertest.Harness{
			Handler:  counter,
			Faults:   drivertest.Faults{Spec: faults, Seed: int64(40 + v)},
			Payloads: batch(v),
			Command: func(c drivertest.Child) *exec.Cmd {
				cmd := exec.Command(binary, "run", "--protocol", "couchdb", "--endpoint", c.Endpoint+"/deposit",
					"--identity", "/id", "--db", c.Store, "--json", c.Input)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
				return cmd
			},
			Store:  store,
			Addr:   addr, // the first batch's: the store's target names the endpoint
			KillAt: kills,
			Runs:   len(kills) + 6,
			Check:  func([][]byte) error { return check(v) },
		}
	}

	var addr string
	// SIGKILLs at writes pouchdb applied: each batch sends at least one
	// write per create (v1) or update (v2, v3).
	kills := [][]int64{nil, drivertest.RandomKills(1, 6, n), drivertest.RandomKills(2, 4, 90), drivertest.RandomKills(3, 4, 90)}
	for v := 1; v <= 3; v++ {
		ok := t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			report := harness(v, kills[v], addr).Run(t)
			require.Equal(t, len(kills[v]), report.Kills)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			creates, updates, _, _ := counter.counts()
			t.Logf("v%d: %d runs, %d killed; faults %v; pouchdb applied %d creates, %d updates so far (%d PUTs refused)",
				v, report.Runs, report.Kills, report.Stats.FaultsByKind, creates, updates, counter.refusedPUTs())
		})
		require.True(t, ok)
	}

	// Later runs without faults, on the batches' address, each request counted.
	serve := func(t *testing.T) *drivertest.Middleware {
		m, err := drivertest.Faults{}.Wrap(counter)
		require.NoError(t, err)
		serveOn(t, addr, m)
		return m
	}
	input := func(v int) string {
		var lines []string
		for _, p := range batch(v) {
			lines = append(lines, string(p))
		}
		return writeFile(t, dir, fmt.Sprintf("v%d.jsonl", v), lines...)
	}
	run := func(db string, v int, results string) result {
		return deposit(t, nil, "run", "--protocol", "couchdb", "--endpoint", "http://"+addr+"/deposit",
			"--identity", "/id", "--db", db, "--results", results, "--json", input(v))
	}
	current := map[string]string{} // object key -> v3's content key

	t.Run("v1 again: its changed objects stale, nothing sent", func(t *testing.T) {
		m := serve(t)
		results := filepath.Join(dir, "v1-again.jsonl")
		r := run(store, 1, results)
		require.Equal(t, exitDone, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		changed := 0
		for i := range n {
			if changes(i, 3) > 0 {
				changed++
			}
		}
		require.Equal(t, changed, s.Stale)
		require.Equal(t, n-changed, s.Replayed, "the objects never changed hold v1")
		require.Zero(t, s.Requests)
		require.Zero(t, m.Stats().Requests)

		status := deposit(t, nil, "status", "--db", store, "--json")
		require.Equal(t, exitDone, status.code, status.stderr)
		var st struct{ Objects objectsJSON }
		require.NoError(t, json.Unmarshal([]byte(status.stdout), &st), status.stdout)
		require.Equal(t, objectsJSON{Objects: n, Versions: n + totalChanges(3), Updates: totalChanges(3), Stale: changed}, st.Objects)

		out, err := os.ReadFile(results)
		require.NoError(t, err)
		for _, row := range jsonLines(t, string(out)) {
			if row["outcome"] == "stale" {
				require.NotEmpty(t, row["current_since"], row)
				current[row["object"].(string)] = row["current"].(string)
			}
		}
		require.Len(t, current, changed)
	})

	t.Run("the store lost, v3 again: no write applied", func(t *testing.T) {
		m := serve(t)
		results := filepath.Join(dir, "v3-lost.jsonl")
		r := run(filepath.Join(dir, "lost.db"), 3, results)
		require.Equal(t, exitDone, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		require.Equal(t, n, s.Existing, "every object found holding v3")
		require.NoError(t, check(3), "no write applied")
		st := m.Stats()
		t.Logf("lost store: %d requests (%d reads, %d PUTs, pouchdb refused %d PUTs in all)", st.Requests, st.Reads, st.Writes, counter.refusedPUTs())

		out, err := os.ReadFile(results)
		require.NoError(t, err)
		for _, row := range jsonLines(t, string(out)) {
			if want, ok := current[row["object"].(string)]; ok {
				require.Equal(t, want, row["key"], "the stale lines named v3 as current")
			}
		}
	})
}
