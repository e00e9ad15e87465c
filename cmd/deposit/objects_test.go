package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/internal/pgtest"
	"github.com/depositkit/deposit/repotest"
)

// The chaos tests of issue 41 for the put target against the reference
// server: objects named by --identity /id, in three inputs of the same
// objects (v1; v2 with some of them changed; v3 with some changed again),
// deposited by real processes that are SIGKILLed at writes that took
// effect, behind faults.

// objectCount is how many objects each input holds.
const objectCount = 300

// objectFaults are the faults of the object chaos tests: answers dropped
// after the write took effect, 5xx before it, 503 with Retry-After,
// connections reset, on reads as well as writes.
const objectFaults = "drop=0.12,500=0.05,503=0.03:retry-after=1,reset=0.05,reads"

// objectInputs are the three inputs: changed[f] are the objects input f
// (2 or 3) changes from the one before it.
type objectInputs struct {
	changed [4]map[int]bool
}

// newObjectInputs picks 30% of the objects to change in v2 and another
// 30% in v3, drawn apart, so that some change twice.
func newObjectInputs(t *testing.T, seed uint64) objectInputs {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 41))
	var in objectInputs
	for f := 2; f <= 3; f++ {
		in.changed[f] = map[int]bool{}
		for _, i := range rnd.Perm(objectCount)[:objectCount*3/10] {
			in.changed[f][i] = true
		}
	}
	require.NotZero(t, len(in.twice()), "some objects change twice")
	return in
}

// version is object i's version in input f: the number of its last
// change, which its payload carries as "v".
func (in objectInputs) version(i, f int) int {
	for ; f > 1; f-- {
		if in.changed[f][i] {
			return f
		}
	}
	return 1
}

// twice is the objects changed in both v2 and v3.
func (in objectInputs) twice() []int {
	var out []int
	for i := range in.changed[3] {
		if in.changed[2][i] {
			out = append(out, i)
		}
	}
	return out
}

// changes counts the (object, version) changes of v2 and v3; either
// counts the objects changed in one of them at least.
func (in objectInputs) changes() (changes, either int) {
	return len(in.changed[2]) + len(in.changed[3]), len(in.changed[2]) + len(in.changed[3]) - len(in.twice())
}

// objectPayload is object i's payload at version v.
func objectPayload(i, v int) string {
	return fmt.Sprintf(`{"id":"obj-%03d","v":%d,"title":"object %d, version %d"}`, i, v, i, v)
}

// payloads is input f, one payload per object.
func (in objectInputs) payloads(f int) [][]byte {
	out := make([][]byte, objectCount)
	for i := range out {
		out[i] = []byte(objectPayload(i, in.version(i, f)))
	}
	return out
}

// write writes input f as JSON Lines in dir and returns its path.
func (in objectInputs) write(t *testing.T, dir string, f int) string {
	t.Helper()
	var lines []string
	for _, p := range in.payloads(f) {
		lines = append(lines, string(p))
	}
	return writeFile(t, dir, fmt.Sprintf("v%d.jsonl", f), lines...)
}

// updateLog records, per record, the versions ("v") that PUTs with
// If-Match replaced it with: each update the server applied, in order.
type updateLog struct {
	next    http.Handler
	mu      sync.Mutex
	applied map[string][]int // by request path
}

func newUpdateLog(next http.Handler) *updateLog {
	return &updateLog{next: next, applied: map[string][]int{}}
}

func (l *updateLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPut || r.Header.Get("If-Match") == "" {
		l.next.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	sw := &statusWriter{ResponseWriter: w}
	l.next.ServeHTTP(sw, r)
	if sw.status != http.StatusOK { // the reference server's answer to an update it applied
		return
	}
	var p struct{ V int }
	_ = json.Unmarshal(body, &p)
	l.mu.Lock()
	l.applied[r.URL.Path] = append(l.applied[r.URL.Path], p.V)
	l.mu.Unlock()
}

// byObject is the versions applied to each object's record, by object
// number, read from the records' ids.
func (l *updateLog) byObject(t *testing.T, h *repotest.Handler) map[int][]int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int][]int{}
	for _, rec := range h.Records() {
		if vs := l.applied["/"+rec.Key]; len(vs) > 0 {
			out[objectOf(t, rec.Body)] = slices.Clone(vs)
		}
	}
	return out
}

// serveOn serves h on addr (an address a finished harness run let go), for
// the runs that follow on the same store, whose target names hold it.
func serveOn(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// foundOnALostStore runs args (the last input, on a new store) until it
// exits 0, at most 10 times, and returns how many lines found their
// object's record (existing, or created after a lost answer): none may be
// updated, stale or failed, since the server holds each line's version.
func foundOnALostStore(t *testing.T, env map[string]string, args []string) int {
	t.Helper()
	found := 0
	for run := 1; ; run++ {
		require.LessOrEqual(t, run, 10, "the run on a new store never exited 0")
		r := deposit(t, env, args...)
		require.Contains(t, []int{exitDone, exitUnresolved}, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		require.Zero(t, s.Updated+s.Stale+s.Failed, r.stdout)
		found += s.Existing + s.Created
		if r.code == exitDone {
			return found
		}
	}
}

// objectOf is the object number of a payload ("obj-007": 7).
func objectOf(t *testing.T, body []byte) int {
	t.Helper()
	var p struct{ ID string }
	require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	var i int
	_, err := fmt.Sscanf(p.ID, "obj-%d", &i)
	require.NoError(t, err, p.ID)
	return i
}

// holdsInput checks that the server holds one record per object, each
// with its payload of input f.
func holdsInput(h *repotest.Handler, in objectInputs, f int) error {
	recs := h.Records()
	if len(recs) != objectCount {
		return fmt.Errorf("%d records, want one per object (%d)", len(recs), objectCount)
	}
	seen := map[int]bool{}
	for _, rec := range recs {
		var p struct {
			ID string
			V  int
		}
		var i int
		if err := json.Unmarshal(rec.Body, &p); err != nil {
			return fmt.Errorf("record %s: %w", rec.Key, err)
		}
		if _, err := fmt.Sscanf(p.ID, "obj-%d", &i); err != nil || seen[i] {
			return fmt.Errorf("record %s holds %s: a second record of one object, or none", rec.Key, rec.Body)
		}
		seen[i] = true
		if want := objectPayload(i, in.version(i, f)); !jsonEqual(rec.Body, []byte(want)) {
			return fmt.Errorf("record of object %d holds %s, not its v%d payload %s", i, rec.Body, f, want)
		}
	}
	return nil
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// objectStatus is the "objects" member of deposit status --json.
func objectStatus(t *testing.T, db string) objectsJSON {
	t.Helper()
	r := deposit(t, nil, "status", "--db", db, "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	var s struct{ Objects objectsJSON }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	return s.Objects
}

// Chaos, put (issue 41): v1, v2 and v3 of 300 objects deposited in turn
// on one store, each batch behind faults by a real deposit process that
// drivertest's harness SIGKILLs at writes that took effect and runs again
// until it exits 0 (and then once more, which must send nothing). Each
// change is applied exactly once: 300 creates, and as many updates as
// there are (object, version) changes, each object's record replaced by
// exactly the versions it changed to, in order, and holding its v3. Then
// v1 again: every object v2 or v3 changed is stale, the others replayed,
// with no request at all. Then the store lost and v3 run on a new one:
// every record is read back and found holding its version; nothing is
// created or updated.
func TestKilledObjectRunsApplyEachChangeOnce(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	log := newUpdateLog(h)
	in := newObjectInputs(t, 1)
	changes, either := in.changes()
	dir := t.TempDir()
	db := filepath.Join(dir, "deposit.db")
	runArgs := func(endpoint, db, input string) []string {
		return []string{"run", "--endpoint", endpoint, "--db", db, "--identity", "/id", "--concurrency", "8", "--json", input}
	}
	batch := func(f int, kills []int64, addr string) drivertest.Harness {
		return drivertest.Harness{
			Handler:  log,
			Faults:   drivertest.Faults{Spec: objectFaults, Seed: int64(40 + f)},
			Payloads: in.payloads(f),
			Command: func(c drivertest.Child) *exec.Cmd {
				cmd := exec.Command(binary, runArgs(c.Endpoint, c.Store, c.Input)...)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
				return cmd
			},
			Store:  db,
			Addr:   addr, // the first batch's: the store's target names the endpoint
			KillAt: kills,
			Runs:   12,
			Check:  func([][]byte) error { return holdsInput(h, in, f) },
		}
	}
	// Kills within the first half of the writes every batch makes at
	// least (a create per object in v1, an update per changed object in
	// v2 and v3), so that a kill put off (a killed process's own writes
	// still arriving) still finds a write to strike.
	kills := map[int][]int64{
		1: drivertest.RandomKills(11, 3, objectCount/2),
		2: drivertest.RandomKills(12, 2, int64(len(in.changed[2])/2)),
		3: drivertest.RandomKills(13, 2, int64(len(in.changed[3])/2)),
	}
	addr := ""
	var drops int64
	for f := 1; f <= 3; f++ {
		t.Run(fmt.Sprintf("v%d", f), func(t *testing.T) {
			report := batch(f, kills[f], addr).Run(t)
			require.Equal(t, len(kills[f]), report.Kills)
			drops += report.Stats.FaultsByKind["drop"]
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			st := h.Stats()
			t.Logf("v%d: %d runs, %d kills, %d faults %v; server: %d records, %d creates, %d updates, %d mismatches, %d replays",
				f, report.Runs, report.Kills, report.Stats.Faults, report.Stats.FaultsByKind, st.Records, st.Creates, st.Updates, st.Mismatches, st.Replays)
		})
		if t.Failed() {
			return
		}
	}

	st := h.Stats()
	require.Equal(t, int64(objectCount), st.Records)
	require.Equal(t, int64(objectCount), st.Creates, "one create per object")
	require.Zero(t, st.Duplicates)
	require.Zero(t, st.Overlaps)
	require.Equal(t, int64(changes), st.Updates, "each (object, version) change applied once")
	applied := log.byObject(t, h)
	for i := range objectCount {
		var want []int
		for f := 2; f <= 3; f++ {
			if in.changed[f][i] {
				want = append(want, f)
			}
		}
		require.Equal(t, want, applied[i], "the versions object %d's record was replaced with", i)
	}
	require.NoError(t, holdsInput(h, in, 3))
	t.Logf("%d objects, %d changes (%d objects changed twice): %d creates, %d updates, %d mismatches (412s after lost answers), %d drops, 7 kills",
		objectCount, changes, len(in.twice()), st.Creates, st.Updates, st.Mismatches, drops)

	// The harness has closed its server; the same handler is served on
	// the same address, behind the same faults, for the runs that follow.
	m, err := drivertest.Faults{Spec: objectFaults, Seed: 49}.Wrap(log)
	require.NoError(t, err)
	srv := serveOn(t, addr, m)

	// v1 again: nothing sent. Each object v2 or v3 changed is stale;
	// the others still hold their v1 and are replayed.
	r := deposit(t, nil, runArgs(srv.URL, db, in.write(t, dir, 1))...)
	require.Equal(t, exitDone, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: objectCount, Stale: either, Replayed: objectCount - either, ElapsedMS: s.ElapsedMS}, s)
	require.Zero(t, m.Stats().Requests, "a v1 re-run sends nothing")
	require.Equal(t, st, h.Stats())
	require.Equal(t, objectsJSON{Objects: objectCount, Versions: objectCount + changes, Updates: changes, Stale: either},
		objectStatus(t, db))
	t.Logf("v1 re-run: %d stale, %d replayed, %d requests", s.Stale, s.Replayed, m.Stats().Requests)

	// The store lost: v3 on a new one reads each record back, finds its
	// version there, and writes nothing (its creates are refused 412).
	// A line whose create's 412 was dropped, and refused again when
	// retried, is reported created: the client cannot tell that 412 from
	// one after its own create whose answer was lost. The server's counts
	// are the measure.
	lost := filepath.Join(t.TempDir(), "deposit.db")
	args := runArgs(srv.URL, lost, in.write(t, dir, 3))
	found := foundOnALostStore(t, nil, args)
	require.Equal(t, objectCount, found, "each object found once, holding its v3")
	after := h.Stats()
	require.Equal(t, st.Creates, after.Creates, "a lost store creates nothing")
	require.Equal(t, st.Updates, after.Updates, "a lost store updates nothing")
	require.Equal(t, st.Records, after.Records)
	require.NoError(t, holdsInput(h, in, 3))
	t.Logf("lost store, v3: %d objects found, %d creates and %d updates more, %d requests (%d replays)",
		found, after.Creates-st.Creates, after.Updates-st.Updates, m.Stats().Requests, after.Replays-st.Replays)
}

// lostAnswers bounds the 412s that lost answers explain: an update took
// effect, its answer was lost, and the retry (or the next run) sent it
// again on the old ETag, before the read that settles it. A drop loses one
// answer (a 412's too, whose retry meets another; a read's none); a kill
// the answers of every request its process had in flight, as many as
// --concurrency (8); and a line left unresolved after a lost answer (the
// read that would settle it gave up) sends it once more in the next run.
func lostAnswers(drops, kills, unresolved int64) int64 { return drops + 8*kills + unresolved }

// killer SIGKILLs, at chosen writes (numbered from 1 as their handler
// returns), the process that sent the write, named by its Chaos-Worker
// header, before the write's answer is sent; it waits for the process to
// be gone first.
type killer struct {
	next http.Handler
	mu   sync.Mutex
	n    int64
	at   []int64                   // writes still to kill at, ascending
	proc map[string]*killerProcess // by worker: the process running now
	hits int
}

type killerProcess struct {
	cmd    *exec.Cmd
	killed bool
	gone   chan struct{} // closed when its Wait returned
}

func (k *killer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	k.next.ServeHTTP(w, r)
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return
	}
	k.mu.Lock()
	k.n++
	p := k.proc[r.Header.Get("Chaos-Worker")]
	if len(k.at) == 0 || k.at[0] > k.n || p == nil || p.killed {
		k.mu.Unlock()
		return // not due, or not a running worker's: the kill waits for a later write
	}
	k.at = k.at[1:]
	p.killed = true
	k.hits++
	k.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.gone
}

// run runs args as worker w until it exits 0, at most runs times, and
// returns the summaries of the runs that ended (killed ones did not).
func (k *killer) run(t *testing.T, w string, runs int, args []string) []summaryJSON {
	var out []summaryJSON
	for run := 1; run <= runs; run++ {
		p := &process{cmd: exec.Command(binary, append(args, "--header", "Chaos-Worker: "+w)...), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
		p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
		kp := &killerProcess{cmd: p.cmd, gone: make(chan struct{})}
		k.mu.Lock()
		err := p.cmd.Start()
		if err == nil {
			k.proc[w] = kp
		}
		k.mu.Unlock()
		if err != nil {
			t.Errorf("worker %s: %v", w, err)
			return out
		}
		code, err := exitCode(p.cmd.Wait())
		k.mu.Lock()
		delete(k.proc, w)
		k.mu.Unlock()
		close(kp.gone)
		switch {
		case err != nil:
			t.Errorf("worker %s run %d: %v", w, run, err)
			return out
		case kp.killed:
			continue
		case code != exitDone && code != exitUnresolved:
			t.Errorf("worker %s run %d: exit %d: %s", w, run, code, p.stderr.String())
			return out
		}
		var s summaryJSON
		if err := json.Unmarshal([]byte(p.stdout.String()), &s); err != nil {
			t.Errorf("worker %s run %d: %v: %s", w, run, err, p.stdout.String())
			return out
		}
		out = append(out, s)
		if code == exitDone {
			return out
		}
	}
	t.Errorf("worker %s did not exit 0 in %d runs", w, runs)
	return out
}

// Two processes at once on one store (issue 41), one depositing v2 and
// the other v3, with --version-pointer /v, after v1 was deposited: behind
// faults, SIGKILLed at three writes, each run again until it exits 0. On
// SQLite and on PostgreSQL.
func TestTwoProcessesWithV2AndV3EndAtV3(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "deposit.db")
			if store == "postgres" {
				db = pgtest.URL(t)
			}
			runV2AndV3(t, db)
		})
	}
}

func runV2AndV3(t *testing.T, db string) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	log := newUpdateLog(h)
	kill := &killer{next: log, proc: map[string]*killerProcess{}}
	m, err := drivertest.Faults{Spec: objectFaults, Seed: 77}.Wrap(kill)
	require.NoError(t, err)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	in := newObjectInputs(t, 2)
	changes, either := in.changes()
	dir := t.TempDir()
	args := func(f int) []string {
		// A 10 s lease, as the fleet tests': a killed process's objects
		// wait that long on PostgreSQL (on SQLite a dead owner's are taken
		// at once).
		return []string{"run", "--endpoint", srv.URL, "--db", db, "--identity", "/id", "--version-pointer", "/v",
			"--concurrency", "8", "--lease", "10s", "--json", in.write(t, dir, f)}
	}

	kill.run(t, "1", 10, args(1))
	require.False(t, t.Failed())
	require.NoError(t, holdsInput(h, in, 1))
	base, baseFaults := h.Stats(), m.Stats()
	require.Equal(t, int64(objectCount), base.Creates)

	// Kills within the first half of the updates the two make at least
	// (one per object either changed), as in the test above.
	kill.mu.Lock()
	kill.at, kill.n = drivertest.RandomKills(21, 3, int64(either/2)), 0
	kill.mu.Unlock()
	var wg sync.WaitGroup
	sums := map[int][]summaryJSON{}
	var mu sync.Mutex
	for f := 2; f <= 3; f++ {
		wg.Go(func() {
			s := kill.run(t, fmt.Sprint(f), 12, args(f))
			mu.Lock()
			sums[f] = s
			mu.Unlock()
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	kill.mu.Lock()
	require.Equal(t, 3, kill.hits, "every kill struck")
	kill.mu.Unlock()

	st, faults := h.Stats(), m.Stats()
	drops := faults.FaultsByKind["drop"] - baseFaults.FaultsByKind["drop"]
	updates, mismatches := st.Updates-base.Updates, st.Mismatches-base.Mismatches
	var unresolved int64
	for f := 2; f <= 3; f++ {
		var updated, stale int
		for _, s := range sums[f] {
			updated, stale = updated+s.Updated, stale+s.Stale
			unresolved += int64(s.Unresolved)
		}
		t.Logf("v%d: %d runs ended (killed ones not counted): %d lines updated, %d stale", f, len(sums[f]), updated, stale)
	}
	byKind := map[string]int64{}
	for kind, n := range faults.FaultsByKind {
		byKind[kind] = n - baseFaults.FaultsByKind[kind]
	}
	t.Logf("%d objects changed in v2, %d in v3, %d in both: %d updates applied, %d mismatches, %d overlaps; %d kills, %d faults %v, %d lines unresolved",
		len(in.changed[2]), len(in.changed[3]), len(in.twice()), updates, mismatches, st.Overlaps,
		kill.hits, faults.Faults-baseFaults.Faults, byKind, unresolved)

	// No update lost: every object holds its v3, on one record.
	require.NoError(t, holdsInput(h, in, 3))
	require.Equal(t, int64(objectCount), st.Creates, "no object created twice")
	require.Zero(t, st.Duplicates)
	// The object leases keep each object's writes in one process at a
	// time: the server never saw two writes of one record at once.
	require.Zero(t, st.Overlaps)
	// None applied twice, none rolled back: each object's record was
	// replaced by the versions the order of the two processes allows, each
	// once, ascending. An object changed in v2 alone is v2 in both inputs:
	// one update. One changed in v3 alone: one update to v3 (the v2
	// process holds its v1, replayed or stale). One changed in both: v2
	// then v3 when v2 came first, or v3 alone when it came second (then
	// v2 is stale by its version pointer). So the updates lie between the
	// objects changed and the changes.
	applied := log.byObject(t, h)
	total := 0
	for i := range objectCount {
		var want [][]int
		switch c2, c3 := in.changed[2][i], in.changed[3][i]; {
		case c2 && c3:
			want = [][]int{{2, 3}, {3}}
		case c2:
			want = [][]int{{2}}
		case c3:
			want = [][]int{{3}}
		default:
			want = [][]int{nil}
		}
		require.Contains(t, want, applied[i], "the versions object %d's record was replaced with", i)
		total += len(applied[i])
	}
	require.Equal(t, int64(total), updates, "the server's count is the log's")
	require.GreaterOrEqual(t, total, either)
	require.LessOrEqual(t, total, changes)
	// A 412 is an update sent on the ETag of a version the record no
	// longer held. Under the leases, only a lost answer explains one (see
	// lostAnswers); the other process, which shares the store, never sends
	// on an ETag the store has replaced.
	require.LessOrEqual(t, mismatches, lostAnswers(drops, int64(kill.hits), unresolved))

	// Either input again: nothing sent, every line stale or replayed.
	before := m.Stats().Requests
	for f := 2; f <= 3; f++ {
		r := deposit(t, nil, args(f)...)
		require.Equal(t, exitDone, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		require.Equal(t, objectCount, s.Stale+s.Replayed, r.stdout)
	}
	require.Equal(t, before, m.Stats().Requests, "a re-run sends nothing")
	// Every row done: the object leases the killed processes left are
	// gone, removed by the lines that met them. On SQLite a dead owner is
	// proven at once; on PostgreSQL its leases are waited out (--lease),
	// so rows a re-run met before then may stay until a later run.
	pending := 0
	for _, row := range storeRows(t, db) {
		if row.State != dedup.StateDone {
			pending++
			require.True(t, isPostgres(db), "the store's row (%s, %s) is %s", row.Target, row.Key, row.State)
		}
	}
	t.Logf("%d rows of the store not done", pending)
	counts := objectStatus(t, db)
	require.Equal(t, objectsJSON{Objects: objectCount, Versions: objectCount + total, Updates: total, Stale: counts.Stale}, counts)
}
