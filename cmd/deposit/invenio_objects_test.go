package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
)

// The chaos tests of issue 43 for InvenioRDM against its stub: 100 objects
// with two files each (a readme that never changes, a table), named by
// --identity; then 30% of them changed, half in their metadata alone, half
// in their table; by real processes SIGKILLed at writes that took effect,
// behind faults and index lag, each batch run again until it exits 0.

// ivObjectCount is how many objects each input holds.
const ivObjectCount = 100

// ivObjects are the two inputs: meta and files are the objects v2
// changes, in their title or in their table.
type ivObjects struct {
	dir         string
	meta, files map[int]bool
}

func newIVObjects(t *testing.T, seed uint64) ivObjects {
	t.Helper()
	o := ivObjects{dir: filepath.Join(t.TempDir(), "data"), meta: map[int]bool{}, files: map[int]bool{}}
	perm := rand.New(rand.NewPCG(seed, 43)).Perm(ivObjectCount)[:ivObjectCount*3/10]
	for n, i := range perm {
		if n%2 == 0 {
			o.meta[i] = true
		} else {
			o.files[i] = true
		}
	}
	for i := range ivObjectCount {
		require.NoError(t, os.MkdirAll(filepath.Join(o.dir, fmt.Sprintf("o%03d", i)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(o.dir, fmt.Sprintf("o%03d/readme.txt", i)), fmt.Appendf(nil, "object %d\n", i), 0o600))
		for v := 1; v <= 2; v++ {
			require.NoError(t, os.WriteFile(filepath.Join(o.dir, fmt.Sprintf("o%03d/table-v%d.csv", i, v)), fmt.Appendf(nil, "a,b\n%d,%d\n", i, v), 0o600))
		}
	}
	return o
}

// title and table are object i's in input f.
func (o ivObjects) title(i, f int) string {
	if f == 2 && o.meta[i] {
		return fmt.Sprintf("Survey %d, revised", i)
	}
	return fmt.Sprintf("Survey %d", i)
}

func (o ivObjects) table(i, f int) string {
	if f == 2 && o.files[i] {
		return fmt.Sprintf("o%03d/table-v2.csv", i)
	}
	return fmt.Sprintf("o%03d/table-v1.csv", i)
}

func (o ivObjects) payloads(f int) [][]byte {
	out := make([][]byte, ivObjectCount)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"metadata":{"title":%q,"identifiers":[{"identifier":"survey-%03d","scheme":"other"}],"creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}},"files":["o%03d/readme.txt",%q]}`,
			o.title(i, f), i, i, o.table(i, f))
	}
	return out
}

func (o ivObjects) write(t *testing.T, f int) string {
	t.Helper()
	var lines []string
	for _, p := range o.payloads(f) {
		lines = append(lines, string(p))
	}
	return writeFile(t, filepath.Dir(o.dir), fmt.Sprintf("objects-v%d.jsonl", f), lines...)
}

// keys are the content keys of input f's lines, as deposit key prints
// them.
func (o ivObjects) keys(t *testing.T, f int) []string {
	t.Helper()
	r := deposit(t, nil, "key", "--datasets", o.dir, o.write(t, f))
	require.Equal(t, exitDone, r.code, r.stderr)
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		_, key, _ := strings.Cut(line, "\t")
		keys = append(keys, key)
	}
	require.Len(t, keys, ivObjectCount)
	return keys
}

// holds checks the stub after input f: one parent per object, no draft
// left and no edit draft open; the latest version of each carrying its
// object's identifier, the version marker of its line in f, its title and
// its files; and as many versions as expected (an edit makes none).
func (o ivObjects) holds(iv *repotest.Invenio, keys []string, f int, version bool) error {
	byParent := map[string][]repotest.InvenioRecord{}
	for _, rec := range iv.Records() {
		if !rec.Published || rec.EditOpen {
			return fmt.Errorf("record %s: a draft left (published %v, edit open %v)", rec.ID, rec.Published, rec.EditOpen)
		}
		byParent[rec.Parent] = append(byParent[rec.Parent], rec)
	}
	if len(byParent) != ivObjectCount {
		return fmt.Errorf("%d records (parents), want one per object (%d)", len(byParent), ivObjectCount)
	}
	seen := map[int]bool{}
	for _, versions := range byParent {
		latest := versions[0]
		for _, v := range versions {
			if v.Version > latest.Version {
				latest = v
			}
		}
		var i int
		if len(latest.Identifiers) != 3 {
			return fmt.Errorf("record %s has identifiers %v, want its own, the object's marker and its version's", latest.ID, latest.Identifiers)
		}
		if _, err := fmt.Sscanf(latest.Identifiers[0], "survey-%d", &i); err != nil || seen[i] {
			return fmt.Errorf("record %s: %v, a second record of one object, or none", latest.ID, latest.Identifiers)
		}
		seen[i] = true
		if want := "urn:deposit-version:sha256:" + keys[i]; latest.Identifiers[2] != want {
			return fmt.Errorf("record %s of object %d holds %s, not %s", latest.ID, i, latest.Identifiers[2], want)
		}
		if want := o.title(i, f); latest.Title != want {
			return fmt.Errorf("record %s of object %d has title %q, not %q", latest.ID, i, latest.Title, want)
		}
		var keysHeld []string
		for _, file := range latest.Files {
			if file.Status != "completed" {
				return fmt.Errorf("record %s: file %s is %s", latest.ID, file.Key, file.Status)
			}
			keysHeld = append(keysHeld, file.Key)
		}
		if want := []string{fmt.Sprintf("o%03d/readme.txt", i), o.table(i, f)}; !sameSet(keysHeld, want) {
			return fmt.Errorf("record %s of object %d holds files %v, not %v", latest.ID, i, keysHeld, want)
		}
		want := 1
		if f == 2 && (o.files[i] || version && o.meta[i]) {
			want = 2
		}
		if len(versions) != want {
			return fmt.Errorf("object %d has %d versions, want %d", i, len(versions), want)
		}
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range b {
		found := false
		for _, y := range a {
			found = found || x == y
		}
		if !found {
			return false
		}
	}
	return true
}

func TestKilledInvenioRunsEditEachObjectOnce(t *testing.T) { invenioObjectsChaos(t, false, 5) }

func TestKilledInvenioRunsVersionEachChangeOnce(t *testing.T) { invenioObjectsChaos(t, true, 6) }

// invenioObjectsChaos: v1 and v2 of 100 objects in turn on one store;
// then v1 again (stale or replayed, nothing sent); then the store lost and
// v2 on a new one (each record found holding its v2: nothing written).
func invenioObjectsChaos(t *testing.T, version bool, seed uint64) {
	iv, err := repotest.NewInvenio(repotest.InvenioConfig{Token: "tok3n", Seed: int64(seed), IndexLag: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { iv.Close() })
	o := newIVObjects(t, seed)
	dumpIV(t, iv)
	keys := [3][]string{1: o.keys(t, 1), 2: o.keys(t, 2)}
	db := filepath.Join(filepath.Dir(o.dir), "objects.db")
	runArgs := func(endpoint, db, input string) []string {
		args := []string{"run", "--protocol", "invenio", "--endpoint", endpoint + "/api", "--datasets", o.dir,
			"--identity", "/identifiers/0/identifier", "--settle", "30ms", "--rate", "0", "--search-rate", "0",
			"--concurrency", "8", "--db", db, "--json", input}
		if version {
			args = append(args, "--on-change", "version")
		}
		return args
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=tok3n"}
	changes := len(o.meta) + len(o.files)
	kills := map[int][]int64{
		1: drivertest.RandomKills(seed*10+1, 3, ivObjectCount*4),
		2: drivertest.RandomKills(seed*10+2, 2, int64(changes*2)),
	}
	addr := ""
	for f := 1; f <= 2; f++ {
		t.Run(fmt.Sprintf("v%d", f), func(t *testing.T) {
			report := drivertest.Harness{
				Handler:  iv,
				Faults:   drivertest.Faults{Spec: objectFaults, Seed: int64(seed)*10 + int64(f)},
				Payloads: o.payloads(f),
				Command: func(c drivertest.Child) *exec.Cmd {
					cmd := exec.Command(binary, runArgs(c.Endpoint, c.Store, c.Input)...)
					cmd.Env = env
					return cmd
				},
				Store: db, Addr: addr, KillAt: kills[f], Runs: 12,
				Check: func([][]byte) error { return o.holds(iv, keys[f], f, version) },
			}.Run(t)
			require.Equal(t, len(kills[f]), report.Kills)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			st := iv.Stats()
			t.Logf("v%d: %d runs, %d kills, %d faults %v; stub: %d drafts, %d edits, %d versions, %d published, %d uploads, %d mismatches, %d requests",
				f, report.Runs, report.Kills, report.Stats.Faults, report.Stats.FaultsByKind, st.Drafts, st.Edits, st.Versions, st.Published, st.Uploads, st.Mismatches, st.Requests)
		})
		if t.Failed() {
			return
		}
	}
	st := iv.Stats()
	require.Equal(t, int64(ivObjectCount), st.Drafts, "one record per object")
	if version {
		require.Equal(t, int64(changes), st.Versions, "one new version per change")
		require.Zero(t, st.Edits)
	} else {
		require.Equal(t, int64(len(o.files)), st.Versions, "a change of files is a new version")
		require.Equal(t, int64(len(o.meta)), st.EditsPublished, "each metadata change one edit published")
	}
	require.Zero(t, st.LockedRefusals, "no file written to an edit's locked files")
	require.NoError(t, o.holds(iv, keys[2], 2, version))

	m, err := drivertest.Faults{Spec: objectFaults, Seed: int64(seed)*10 + 9}.Wrap(iv)
	require.NoError(t, err)
	srv := serveOn(t, addr, m)
	envMap := map[string]string{"DEPOSIT_AUTHORIZATION": "tok3n"}
	r := deposit(t, envMap, runArgs(srv.URL, db, o.write(t, 1))...)
	require.Equal(t, exitDone, r.code, r.stderr)
	sum := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: ivObjectCount, Stale: changes, Replayed: ivObjectCount - changes, ElapsedMS: sum.ElapsedMS}, sum)
	require.Zero(t, m.Stats().Requests, "a v1 re-run sends nothing")
	require.Equal(t, objectsJSON{Objects: ivObjectCount, Versions: ivObjectCount + changes, Updates: changes, Stale: changes}, objectStatus(t, db))

	lost := filepath.Join(t.TempDir(), "objects.db")
	found := foundOnALostStore(t, envMap, runArgs(srv.URL, lost, o.write(t, 2)))
	require.Equal(t, ivObjectCount, found, "each record found once, holding its v2")
	after := iv.Stats()
	for _, n := range [][2]int64{{st.Drafts, after.Drafts}, {st.Edits, after.Edits}, {st.Versions, after.Versions},
		{st.Published, after.Published}, {st.EditsPublished, after.EditsPublished}, {st.FileInits, after.FileInits}, {st.Uploads, after.Uploads}} {
		require.Equal(t, n[0], n[1], "a lost store writes nothing")
	}
	require.NoError(t, o.holds(iv, keys[2], 2, version))
	t.Logf("%d objects, %d changes (%d metadata, %d files): %d edits, %d versions; lost store, v2: %d found, %d requests",
		ivObjectCount, changes, len(o.meta), len(o.files), after.EditsPublished, after.Versions, found, m.Stats().Requests)
}

// dumpIV logs the drafts and open edit drafts the stub holds when the test
// fails.
func dumpIV(t *testing.T, iv *repotest.Invenio) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, r := range iv.Records() {
			if !r.Published || r.EditOpen {
				t.Logf("DRAFT %+v", r)
			}
		}
	})
}

// An edit draft someone else opened and changed is not adopted: the
// changed line fails saying so, nothing is saved or published, and their
// draft stays; one opened and left as the record was is adopted.
func TestInvenioEditDraftOfSomeoneElseIsNotAdopted(t *testing.T) {
	srv, err := repotest.NewInvenioServer(repotest.InvenioConfig{Token: "tok3n"})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	line := func(i int, title string) string {
		return fmt.Sprintf(`{"title":%q,"identifiers":[{"identifier":"survey-%03d","scheme":"other"}],"creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}}`, title, i)
	}
	env := map[string]string{"DEPOSIT_AUTHORIZATION": "tok3n"}
	args := func(input string) []string {
		return []string{"run", "--protocol", "invenio", "--endpoint", srv.API, "--identity", "/identifiers/0/identifier",
			"--settle", "10ms", "--rate", "0", "--search-rate", "0", "--db", filepath.Join(dir, "a.db"), "--json", input}
	}
	r := deposit(t, env, args(writeFile(t, dir, "v1.jsonl", line(0, "Survey 0"), line(1, "Survey 1")))...)
	require.Equal(t, exitDone, r.code, r.stderr)
	ids := map[string]string{}
	for _, rec := range srv.Records() {
		ids[rec.Identifiers[0]] = rec.ID
	}
	require.NoError(t, srv.OpenEdit(ids["survey-000"], func(md map[string]any) { md["title"] = "Someone's edit" }))
	require.NoError(t, srv.OpenEdit(ids["survey-001"], nil))

	r = deposit(t, env, args(writeFile(t, dir, "v2.jsonl", line(0, "Survey 0, revised"), line(1, "Survey 1, revised")))...)
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "has an edit draft open with changes not made by this deposit")
	sum := summaryOf(t, r.stdout)
	require.Equal(t, 1, sum.Failed)
	require.Equal(t, 1, sum.Updated, "the draft opened and left as the record was is adopted")
	for _, rec := range srv.Records() {
		switch rec.ID {
		case ids["survey-000"]:
			require.True(t, rec.EditOpen, "their draft stays")
			require.Equal(t, "Survey 0", rec.Title)
		case ids["survey-001"]:
			require.False(t, rec.EditOpen)
			require.Equal(t, "Survey 1, revised", rec.Title)
		}
	}
	st := srv.Stats()
	require.Equal(t, int64(1), st.EditsPublished)
	require.Zero(t, st.Versions, "an edit makes no version")
}
