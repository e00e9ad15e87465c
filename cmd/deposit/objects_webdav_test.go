package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/internal/peertest"
)

// davWrites is a reverse proxy to a WebDAV server that counts the PUTs
// the server applied (answered 2xx): creates (If-None-Match: *) and
// updates (If-Match) apart, and every PUT sent. It stands between the
// faults and the server, so that a PUT whose answer is dropped counts.
type davWrites struct {
	next http.Handler

	mu                    sync.Mutex
	creates, updates, all int64
	inFlight              int
	idle                  *sync.Cond // inFlight fell to 0
}

func newDavWrites(t *testing.T, base string) *davWrites {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	d := &davWrites{next: httputil.NewSingleHostReverseProxy(u)}
	d.idle = sync.NewCond(&d.mu)
	return d
}

func (d *davWrites) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	d.inFlight++
	d.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	// Apache goes on with a request whose asker is gone (killed): so does
	// the proxy, to learn what Apache answered.
	d.next.ServeHTTP(sw, r.WithContext(context.WithoutCancel(r.Context())))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.inFlight--; d.inFlight == 0 {
		d.idle.Broadcast()
	}
	if r.Method != http.MethodPut {
		return
	}
	d.all++
	if sw.status != 0 && sw.status/100 != 2 { // 0: nothing written, an implicit 200
		return
	}
	if r.Header.Get("If-Match") != "" {
		d.updates++
	} else {
		d.creates++
	}
}

// drained waits until Apache has answered every request sent to it.
// Apache does not arbitrate conditional PUTs to one resource sent at
// once: measured on Apache 2.4, two concurrent If-None-Match: * PUTs of a
// new name were both answered 201 for 80 names in 200, two If-Match PUTs
// on one ETag both 2xx for 57 resources in 100. A killed run's PUTs still
// in Apache (the first PUTs to a fresh server wait about a second) would
// race the next run's, and both be applied: so each run starts once the
// one before is wholly answered.
func (d *davWrites) drained() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.inFlight > 0 {
		d.idle.Wait()
	}
}

// counts is (creates, updates, PUTs sent).
func (d *davWrites) counts() (int64, int64, int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.creates, d.updates, d.all
}

// davHolds checks, straight at the server, that its collection holds one
// resource per object and that each holds want's line of its object (by
// its "id"): a PROPFIND of depth 1 lists the resources, a GET reads each.
func davHolds(base string, want map[string][]byte) error {
	req, err := http.NewRequest("PROPFIND", base+"/", strings.NewReader(`<?xml version="1.0"?><propfind xmlns="DAV:"><prop><resourcetype/></prop></propfind>`))
	if err != nil {
		return err
	}
	req.Header.Set("Depth", "1")
	req.Header.Set("Content-Type", "application/xml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusMultiStatus {
		return fmt.Errorf("PROPFIND: %s: %s", resp.Status, body)
	}
	var ms struct {
		Responses []struct {
			Href string `xml:"DAV: href"`
		} `xml:"DAV: response"`
	}
	if err := xml.Unmarshal(body, &ms); err != nil {
		return fmt.Errorf("PROPFIND: %w", err)
	}
	seen := map[string]string{}
	for _, r := range ms.Responses {
		if r.Href == "/" {
			continue // the collection itself
		}
		resp, err := http.Get(base + r.Href)
		if err != nil {
			return err
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var obj struct{ ID string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(got, &obj) != nil {
			return fmt.Errorf("%s: %s, %q: not an object's record", r.Href, resp.Status, got)
		}
		if other, dup := seen[obj.ID]; dup {
			return fmt.Errorf("object %s has two resources: %s and %s", obj.ID, other, r.Href)
		}
		seen[obj.ID] = r.Href
		if !bytes.Equal(got, want[obj.ID]) {
			return fmt.Errorf("%s (object %s) holds %s, not %s", r.Href, obj.ID, got, want[obj.ID])
		}
	}
	if len(seen) != len(want) {
		return fmt.Errorf("%d objects' resources on the server, not %d", len(seen), len(want))
	}
	return nil
}

// Chaos for objects under --protocol webdav, against real Apache mod_dav
// behind faults (answers dropped after Apache wrote, resets, 500s, 503s
// with Retry-After, on reads too) in a reverse proxy that counts the PUTs
// Apache applied, with deposit processes SIGKILLed at writes that took
// effect. Three inputs of the same 300 objects run in turn on one store,
// each until exit 0: v1, then v2 (30% of the objects changed), then v3
// (30% changed again, a third of them changed in v2 too). After each,
// the collection holds one resource per object with that input's bytes;
// Apache applied one create per object and one update per change, no
// more. Then v1 again on that store: every changed object's line stale,
// the others replayed, nothing sent; then v3 on a new, empty store: each
// object found holding its v3 bytes, nothing applied, exit 0.
//
// Apache gives a resource a weak ETag in the second after it is written,
// and If-Match never matches a weak one, so a read before an update just
// after a write (an answer dropped, a kill) waits that second out; with
// 300 objects the test still takes about 15 s on two cores.
func TestKilledWebDAVRunsApplyEachObjectVersionOnce(t *testing.T) {
	base := peertest.Apache(t)
	writes := newDavWrites(t, base)
	dir := t.TempDir()
	db := filepath.Join(dir, "deposit.db") // the three inputs'

	const n, changed = 300, 90
	perm := rand.New(rand.NewPCG(41, 3)).Perm(n)
	// v2 changes perm[:90], v3 perm[60:150]: perm[60:90] change twice.
	version := make([][3]int, n) // object i's version in v1, v2, v3
	for i := range version {
		version[i] = [3]int{1, 1, 1}
	}
	for _, i := range perm[:changed] {
		version[i][1], version[i][2] = 2, 2
	}
	for _, i := range perm[changed-30 : 2*changed-30] {
		version[i][2] = 3
	}
	line := func(i, v int) []byte {
		return fmt.Appendf(nil, `{"id":"obj-%03d","title":"object %d","v":%d}`, i, i, v)
	}
	input := func(b int) ([][]byte, map[string][]byte) {
		var lines [][]byte
		byID := map[string][]byte{}
		for i := range n {
			l := line(i, version[i][b])
			lines = append(lines, l)
			byID[fmt.Sprintf("obj-%03d", i)] = l
		}
		return lines, byID
	}
	changes := 0
	touched := 0
	for i := range n {
		v := version[i]
		changes += btoi(v[1] != v[0]) + btoi(v[2] != v[1])
		touched += btoi(v[2] != v[0])
	}
	require.Equal(t, 2*changed, changes)

	run := func(c drivertest.Child, input string) *exec.Cmd {
		cmd := exec.Command(binary, "run", "--protocol", "webdav", "--endpoint", c.Endpoint, "--identity", "/id",
			"--concurrency", "4", "--db", c.Store, "--json", input)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		return cmd
	}
	addr := ""
	batches := []struct {
		name  string
		kills []int64
	}{
		{"v1", drivertest.RandomKills(1, 3, n)},
		{"v2", drivertest.RandomKills(2, 2, changed)},
		{"v3", drivertest.RandomKills(3, 2, changed)},
	}
	var wantUpdates int64 // and one create per object, all in v1
	for b, batch := range batches {
		lines, byID := input(b)
		for i := range n {
			wantUpdates += int64(btoi(b > 0 && version[i][b] != version[i][b-1]))
		}
		t.Run(batch.name, func(t *testing.T) {
			report := drivertest.Harness{
				Handler:  writes,
				Faults:   drivertest.Faults{Spec: "drop=0.1,reset=0.05,500=0.05,503=0.03:retry-after=1,reads", Seed: int64(41 + b)},
				Payloads: lines,
				Command:  func(c drivertest.Child) *exec.Cmd { writes.drained(); return run(c, c.Input) },
				KillAt:   batch.kills,
				Store:    db,
				Addr:     addr,
				Runs:     12,
				Check: func([][]byte) error {
					if err := davHolds(base, byID); err != nil {
						return err
					}
					creates, updates, _ := writes.counts()
					if creates != n || updates != wantUpdates {
						return fmt.Errorf("Apache applied %d creates and %d updates, not %d and %d", creates, updates, n, wantUpdates)
					}
					return nil
				},
			}.Run(t)
			require.Equal(t, len(batch.kills), report.Kills)
			creates, updates, all := writes.counts()
			t.Logf("%s: %d runs, %d killed; %d requests, %d faults %v; Apache applied %d creates, %d updates of %d PUTs so far",
				batch.name, report.Runs, report.Kills, report.Stats.Requests, report.Stats.Faults, report.Stats.FaultsByKind, creates, updates, all)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
		})
		if t.Failed() {
			return
		}
	}

	// The proxy again on the same address (the store's target names it),
	// now without faults.
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(writes)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	child := drivertest.Child{Endpoint: srv.URL, Store: db}
	redeposit := func(c drivertest.Child, lines [][]byte, name string) summaryJSON {
		t.Helper()
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644))
		var stdout, stderr bytes.Buffer
		cmd := run(c, path)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code, err := exitCode(cmd.Run())
		require.NoError(t, err)
		require.Equal(t, exitDone, code, stderr.String())
		return summaryOf(t, stdout.String())
	}

	t.Run("v1 again is stale", func(t *testing.T) {
		c0, u0, all0 := writes.counts()
		v1, _ := input(0)
		s := redeposit(child, v1, "v1-again.jsonl")
		c, u, all := writes.counts()
		require.Equal(t, [3]int64{c0, u0, all0}, [3]int64{c, u, all}, "no PUT")
		require.Equal(t, touched, s.Stale, "every object changed since v1")
		require.Equal(t, n-touched, s.Replayed, "the objects never changed")
		require.Zero(t, s.Requests)
		_, v3 := input(2)
		require.NoError(t, davHolds(base, v3))

		r := deposit(t, nil, "status", "--db", db, "--json")
		require.Equal(t, exitDone, r.code, r.stderr)
		var st struct{ Objects objectsJSON }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
		require.Equal(t, objectsJSON{Objects: n, Versions: n + changes, Updates: changes, Stale: touched}, st.Objects)
	})

	t.Run("a lost store and v3 again", func(t *testing.T) {
		c0, u0, all0 := writes.counts()
		v3, byID := input(2)
		s := redeposit(drivertest.Child{Endpoint: srv.URL, Store: filepath.Join(dir, "new.db")}, v3, "v3-again.jsonl")
		c, u, all := writes.counts()
		require.Equal(t, [2]int64{c0, u0}, [2]int64{c, u}, "nothing applied")
		require.Equal(t, n, s.Existing, "every object found holding its v3 bytes")
		require.NoError(t, davHolds(base, byID))
		t.Logf("lost store, v3 again: %d requests, %d PUTs sent (none applied)", s.Requests, all-all0)
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
