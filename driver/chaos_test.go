package driver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
)

// shelfHelperEnv, when set, makes TestShelfChaosHelperProcess a worker of
// the chaos test: it deposits the input with client.Run and prints its
// summary.
const shelfHelperEnv = "SHELF_CHAOS_WORKER"

const (
	shelfLag    = 100 * time.Millisecond // how far the search lags writes
	shelfSettle = 2 * shelfLag
	// shelfUnresolved is the helper's exit code when items are left
	// unresolved: the worker runs it again.
	shelfUnresolved = 3
)

// TestShelfChaosHelperProcess is not a test: it is a worker process of
// TestShelfDepositsEachPayloadOnceThroughKillsAndFaults, which
// re-executes the test binary with shelfHelperEnv set.
func TestShelfChaosHelperProcess(t *testing.T) {
	if os.Getenv(shelfHelperEnv) == "" {
		return // run as a normal test: nothing to do
	}
	os.Exit(runShelfWorker())
}

// runShelfWorker deposits the input file's lines to the Shelf endpoint
// and prints the summary as JSON; it returns the process's exit code.
func runShelfWorker() int {
	store, err := dedup.Open(os.Getenv("SHELF_CHAOS_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer store.Close()
	c, err := shelfClient(os.Getenv("SHELF_CHAOS_URL"), store, os.Getenv(shelfHelperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	sum, err := runShelfInput(c, os.Getenv("SHELF_CHAOS_INPUT"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(sum)
	if sum.Unresolved+sum.Failed+sum.Invalid > 0 {
		return shelfUnresolved
	}
	return 0
}

func shelfClient(endpoint string, store *dedup.SQLite, worker string) (*client.Client, error) {
	return client.New(client.Config{
		Target: Shelf{Endpoint: endpoint, Settle: shelfSettle},
		Store:  store,
		// A dead worker's keys are taken over at once (dedup.OwnerGone); the
		// lease only bounds a live one that stalls, which -race on a busy
		// machine can make long.
		Lease:  10 * time.Second,
		Retry:  backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 6},
		Header: http.Header{"X-Shelf-Worker": {worker}},
	})
}

func runShelfInput(c *client.Client, input string) (client.Summary, error) {
	f, err := os.Open(input)
	if err != nil {
		return client.Summary{}, err
	}
	defer f.Close()
	lr := client.NewLineReader(f, 0)
	sum, err := c.Run(context.Background(), lr.Items(), client.BatchOptions{Concurrency: 8, OnResult: func(r client.ItemResult) {
		if r.Err != nil {
			fmt.Fprintf(os.Stderr, "line %d: %s: %v\n", r.Line, r.Outcome, r.Err)
		}
	}})
	return sum, errors.Join(err, lr.Err())
}

// workerRuns is what one worker's processes did: the summaries of those
// that finished, and how many were killed.
type workerRuns struct {
	summaries []client.Summary
	killed    int
	events    []string // each process's end, at its time into the test
}

// Two processes deposit one batch to a Shelf on one SQLite store at once,
// through refusals (500, 503) and lost answers (502, dropped connections)
// at both steps and a search that lags writes; each is SIGKILLed once, on
// a request of its own that took effect (a create, a publish), and run
// again until it ends with nothing unresolved. The server ends with one
// record per distinct payload, each published by one request, and no
// publish sent to a record already published; every store row is done
// with the server's identifier, and a replay sends nothing.
func TestShelfDepositsEachPayloadOnceThroughKillsAndFaults(t *testing.T) {
	dir := t.TempDir()
	input, db := filepath.Join(dir, "in.jsonl"), filepath.Join(dir, "deposit.db")
	titles := writeShelfInput(t, input, 300, 30)

	procs := &shelfProcs{cmds: map[string]*exec.Cmd{}}
	srv := newChaosShelf(7, shelfFaults{refuse500: 0.05, refuse503: 0.05, lose502: 0.07, drop: 0.07}, shelfLag,
		[]shelfKill{{worker: "0", step: "create", at: len(titles) / 4}, {worker: "1", step: "publish", at: len(titles) / 2}},
		procs.kill)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)

	runs := make([]workerRuns, 2)
	var wg sync.WaitGroup
	for w := range runs {
		wg.Go(func() { runs[w] = runShelfWorkerUntilDone(t, procs, strconv.Itoa(w), hs.URL, db, input) })
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	records, counts := srv.snapshot()
	kills := runs[0].killed + runs[1].killed
	t.Logf("%d lines, %d distinct; server: %d records, %d requests (%d creates, %d publishes, %d searches); "+
		"faults: %d refused, %d answers lost, %d connections dropped; %d processes killed",
		len(titles), distinctCount(titles), len(records), counts.Requests, counts.Creates, counts.Publishes, counts.Searches,
		counts.Refused, counts.Lost, counts.Dropped, kills)
	for w, r := range runs {
		for i, s := range r.summaries {
			t.Logf("worker %d run %d: %+v", w, i, s)
		}
		t.Logf("worker %d: %s", w, strings.Join(r.events, ", "))
	}
	for w, r := range runs {
		require.Equal(t, 1, r.killed, "worker %d is killed once, on a request of its own", w)
	}

	checkShelfRecords(t, records, titles)
	checkShelfStore(t, db, hs.URL, records)

	// A replay of the whole batch is answered from the store.
	store, err := dedup.Open(db)
	require.NoError(t, err)
	defer store.Close()
	c, err := shelfClient(hs.URL, store, "replay")
	require.NoError(t, err)
	sum, err := runShelfInput(c, input)
	require.NoError(t, err)
	_, after := srv.snapshot()
	require.Zero(t, sum.Requests, "a replay sends nothing")
	require.Equal(t, counts.Requests, after.Requests, "the server saw no request of the replay")
	require.Equal(t, len(titles), sum.Replayed)
}

// shelfProcs holds each worker's current process, for the server to kill.
type shelfProcs struct {
	mu   sync.Mutex
	cmds map[string]*exec.Cmd
}

// start starts cmd as worker's current process.
func (p *shelfProcs) start(worker string, cmd *exec.Cmd) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cmds[worker] = cmd
	return cmd.Start()
}

func (p *shelfProcs) kill(worker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cmd := p.cmds[worker]; cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(syscall.SIGKILL)
	}
}

// runShelfWorkerUntilDone runs worker's process until it exits 0: again
// after a kill, after items left unresolved, and after a store busy past
// its wait. Off the test goroutine: t.Errorf, no require.
func runShelfWorkerUntilDone(t *testing.T, procs *shelfProcs, worker, url, db, input string) workerRuns {
	var runs workerRuns
	begin := time.Now()
	event := func(what string) {
		runs.events = append(runs.events, fmt.Sprintf("%s at %v", what, time.Since(begin).Round(time.Millisecond)))
	}
	for round := 0; round < 8; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestShelfChaosHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), shelfHelperEnv+"="+worker, "SHELF_CHAOS_URL="+url,
			"SHELF_CHAOS_DB="+db, "SHELF_CHAOS_INPUT="+input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := procs.start(worker, cmd); err != nil {
			t.Errorf("worker %s: %v", worker, err)
			return runs
		}
		err := cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			runs.killed++
			event("killed")
			continue
		}
		code := cmd.ProcessState.ExitCode()
		if code == 1 && strings.Contains(stderr.String(), "SQLITE_BUSY") {
			t.Logf("worker %s: the store was busy; running again", worker)
			continue
		}
		if code != 0 && code != shelfUnresolved {
			t.Errorf("worker %s exited %d (%v): %s", worker, code, err, stderr.String())
			return runs
		}
		var sum client.Summary
		if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
			t.Errorf("worker %s: summary %q: %v", worker, stdout.String(), err)
			return runs
		}
		runs.summaries = append(runs.summaries, sum)
		event(fmt.Sprintf("exited %d", code))
		if code == shelfUnresolved {
			t.Logf("worker %s left items unresolved:\n%s", worker, stderr.String())
		}
		if code == 0 {
			return runs
		}
	}
	t.Errorf("worker %s never finished the batch", worker)
	return runs
}

// writeShelfInput writes distinct payloads and repeats more lines that
// repeat some of them, shuffled; it returns each line's title.
func writeShelfInput(t *testing.T, path string, distinct, repeats int) []string {
	rnd := rand.New(rand.NewPCG(3, 5))
	titles := make([]string, 0, distinct+repeats)
	for i := range distinct {
		titles = append(titles, fmt.Sprintf("Shelf item %d", i))
	}
	for range repeats {
		titles = append(titles, titles[rnd.IntN(distinct)])
	}
	rnd.Shuffle(len(titles), func(i, j int) { titles[i], titles[j] = titles[j], titles[i] })
	var b strings.Builder
	for _, title := range titles {
		line, err := json.Marshal(map[string]string{"title": title})
		require.NoError(t, err)
		b.Write(line)
		b.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return titles
}

// checkShelfRecords checks the server: one record per distinct title,
// published by exactly one request, and no publish sent to a record
// already published; a publish re-sent after a refusal before commit is
// the only other publish request a record may have met.
func checkShelfRecords(t *testing.T, records []shelfRecord, titles []string) {
	t.Helper()
	byTitle := map[string]int{}
	for _, rec := range records {
		byTitle[rec.title]++
	}
	for _, title := range titles {
		require.Equal(t, 1, byTitle[title], "records of %q", title)
	}
	require.Len(t, records, distinctCount(titles))
	markers := map[string]bool{}
	refused, again := 0, 0
	for i, rec := range records {
		require.False(t, markers[rec.marker], "marker %s is on two records", rec.marker)
		markers[rec.marker] = true
		require.False(t, rec.published.IsZero(), "record %d (%s) is not published", i+1, rec.title)
		require.Equal(t, 1, rec.publishes, "record %d (%s) was published by %d requests", i+1, rec.title, rec.publishes)
		refused += rec.refused
		again += rec.again
	}
	t.Logf("publish requests: %d that published, %d re-sent after a refusal before commit, %d to a published record",
		len(records), refused, again)
	require.Zero(t, again, "publish requests sent to a record already published")
}

// checkShelfStore checks that every store row is done: one per record and
// step, the deposit's naming the server's record for its marker.
func checkShelfStore(t *testing.T, db, url string, records []shelfRecord) {
	t.Helper()
	store, err := dedup.Open(db)
	require.NoError(t, err)
	defer store.Close()
	name := Shelf{Endpoint: url}.Name()
	idOf := map[string]string{}
	for i, rec := range records {
		idOf[rec.marker] = strconv.Itoa(i + 1)
	}
	rows := map[string]int{}
	for row, err := range store.List(context.Background(), "", "") {
		require.NoError(t, err)
		require.Equal(t, dedup.StateDone, row.State, "%s %s", row.Target, row.Key)
		require.Equal(t, idOf[row.Key], row.Identifier, "%s %s", row.Target, row.Key)
		rows[row.Target]++
	}
	require.Equal(t, map[string]int{name: len(records), Shelf{Endpoint: url}.publishTarget(): len(records)}, rows)
}

func distinctCount(titles []string) int {
	seen := map[string]bool{}
	for _, title := range titles {
		seen[title] = true
	}
	return len(seen)
}
