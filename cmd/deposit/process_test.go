package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/pgtest"
	"github.com/depositkit/deposit/repotest"
)

// binary is the deposit command built once for the tests that need a real
// process (kill -9, signals, several processes at once).
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deposit-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binary = filepath.Join(dir, "deposit")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building the deposit command: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if err := pgtest.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// process is a running deposit command.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
}

// syncBuffer is a buffer a process writes to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func start(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(binary, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

// wait returns the exit status, or -1 when the process was killed by a signal.
func (p *process) wait(t *testing.T) int {
	t.Helper()
	code, err := exitCode(p.cmd.Wait())
	require.NoError(t, err)
	return code
}

// crashInput writes n lines: distinct payloads and, every tenth line, a
// repeat of an earlier one with other member order. It returns the number
// of distinct payloads.
func crashInput(t *testing.T, path string, n int) int {
	t.Helper()
	var b strings.Builder
	distinct := 0
	for i := range n {
		if i%10 == 9 {
			j := i - 5
			fmt.Fprintf(&b, "{ \"n\": %d, \"title\": \"record %d\" }\n", j, j)
			continue
		}
		fmt.Fprintf(&b, `{"title":"record %d","n":%d}`+"\n", i, i)
		distinct++
	}
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	return distinct
}

// checkExactlyOnce checks the invariants against the server and the store:
// one record per distinct payload, no duplicates, every row done, no phantom
// (a done row the server has no record for), identifiers matching the
// server's.
func checkExactlyOnce(t *testing.T, srv *repotest.Server, db string, distinct int) {
	t.Helper()
	st := srv.Stats()
	require.Equal(t, int64(0), st.Duplicates)
	require.Equal(t, int64(distinct), st.Records)
	ids := map[string]string{}
	for _, rec := range srv.Records() {
		ids[rec.Key] = rec.Identifier
	}
	rows := storeRows(t, db)
	require.Len(t, rows, distinct)
	for _, row := range rows {
		require.Equal(t, dedup.StateDone, row.State, row.Key)
		id, ok := ids[row.Key]
		require.True(t, ok, "phantom: %s is done in the store but the server has no record", row.Key)
		require.Equal(t, id, row.Identifier, row.Key)
	}
}

// pendingRows counts the store's pending rows.
func pendingRows(t *testing.T, db string) int {
	t.Helper()
	if _, err := os.Stat(db); err != nil {
		return 0
	}
	n := 0
	for _, row := range storeRows(t, db) {
		if row.State == dedup.StatePending {
			n++
		}
	}
	return n
}

func TestKilledRunsFinishExactlyOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{Faults: "drop=0.15,500=0.05", Seed: 11})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 3000)
	db := filepath.Join(dir, "deposit.db")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--concurrency", "8", "--json", input}
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))

	for kill := range 4 {
		p := start(t, args...)
		// A random moment: from the first requests to well into the batch.
		time.Sleep(time.Duration(50+rnd.IntN(700)) * time.Millisecond)
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Logf("kill %d: the run had already ended: %v", kill, err)
		}
		p.wait(t)
	}
	pending := pendingRows(t, db)
	t.Logf("after the kills: %d records on the server, %d pending in the store", srv.Stats().Records, pending)

	recovered, unresolved := 0, 0
	for round := 1; ; round++ {
		require.LessOrEqual(t, round, 10, "the batch never finished")
		p := start(t, args...)
		code := p.wait(t)
		require.Contains(t, []int{exitDone, exitUnresolved}, code, p.stderr.String())
		s := summaryOf(t, p.stdout.String())
		recovered += s.Recovered
		unresolved += s.Unresolved
		if round == 1 && pending > 0 {
			require.Contains(t, p.stderr.String(), ": recovered: ", "recovered items are named in the log")
		}
		if code == exitDone {
			break
		}
	}
	// Every item a killed run left pending is reported recovered once; an
	// item a re-run itself leaves unresolved (its retries ran out) is
	// recovered by the next one, so it may add to the count.
	require.GreaterOrEqual(t, recovered, pending, "every item left pending by a killed run is reported recovered")
	require.LessOrEqual(t, recovered, pending+unresolved, "no item is reported recovered twice")
	checkExactlyOnce(t, srv, db, distinct)

	p := start(t, args...)
	require.Equal(t, exitDone, p.wait(t))
	s := summaryOf(t, p.stdout.String())
	require.Equal(t, summaryJSON{Total: 3000, Replayed: 3000, ElapsedMS: s.ElapsedMS}, s)
}

func TestAKilledRunLeavesOnlyWholeResultLines(t *testing.T) {
	srv := newServer(t, repotest.Config{Latency: 2 * time.Millisecond})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	crashInput(t, input, 5000)
	resultsPath := filepath.Join(dir, "results.jsonl")
	p := start(t, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--results", resultsPath, input)

	// More than a 64 KiB buffer's worth of results, so that a writer that
	// cuts lines at buffer boundaries has cut one.
	waitUntil(func() bool {
		fi, err := os.Stat(resultsPath)
		return err == nil && fi.Size() > 64<<10
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, -1, p.wait(t), "killed mid-run")

	text, err := os.ReadFile(resultsPath)
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(text, []byte("\n")), "the file ends with a whole line: %q", text[max(0, len(text)-200):])
	lines := jsonLines(t, string(text))
	require.Greater(t, len(lines), 0)
	for _, m := range lines {
		require.NotEmpty(t, m["outcome"], m)
	}
}

func TestFourProcessesOnOneStoreDepositExactlyOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{Faults: "drop=0.1,503=0.05", Seed: 5})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 1000)
	db := filepath.Join(dir, "deposit.db")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--json", input}

	procs := make([]*process, 4)
	for i := range procs {
		procs[i] = start(t, args...)
	}
	codes := make([]int, len(procs))
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { codes[i], errs[i] = exitCode(p.cmd.Wait()) })
	}
	wg.Wait()
	created := 0
	for i, p := range procs {
		require.NoError(t, errs[i])
		require.Contains(t, []int{exitDone, exitUnresolved}, codes[i], p.stderr.String())
		created += summaryOf(t, p.stdout.String()).Created
	}
	for round := 0; slices.Contains(codes, exitUnresolved); round++ {
		require.Less(t, round, 5, "the batch never finished")
		p := start(t, args...)
		codes = []int{p.wait(t)}
		created += summaryOf(t, p.stdout.String()).Created
	}
	require.LessOrEqual(t, created, distinct, "no payload is reported created twice")
	checkExactlyOnce(t, srv, db, distinct)
}

// exitCode is the exit status of a finished command.
func exitCode(err error) (int, error) {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return 0, err
}

// waitUntil polls cond until it holds.
func waitUntil(cond func() bool) {
	for !cond() {
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInterruptRecordsWhatIsInFlightAndExitsThree(t *testing.T) {
	srv := newServer(t, repotest.Config{Latency: 20 * time.Millisecond})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 400)
	db := filepath.Join(dir, "deposit.db")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--json", input}

	p := start(t, args...)
	waitUntil(func() bool { return srv.Stats().Creates >= 10 })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitUnresolved, p.wait(t), p.stderr.String())
	require.Contains(t, p.stderr.String(), "interrupted")
	require.Contains(t, p.stderr.String(), "deposit run: ")
	s := summaryOf(t, p.stdout.String())
	require.Greater(t, s.Unresolved, 0)
	require.Less(t, s.Total, 400, "the run stops reading")

	// Every record the server created, in flight ones included, is done in
	// the store, and every done row is a record of the server's.
	ids := map[string]string{}
	for _, rec := range srv.Records() {
		ids[rec.Key] = rec.Identifier
	}
	done := 0
	for _, row := range storeRows(t, db) {
		if row.State == dedup.StateDone {
			done++
			require.Equal(t, ids[row.Key], row.Identifier, "phantom or wrong identifier: %s", row.Key)
		}
	}
	require.Equal(t, len(ids), done)

	p = start(t, args...)
	require.Equal(t, exitDone, p.wait(t), p.stderr.String())
	checkExactlyOnce(t, srv, db, distinct)
}

func TestSecondInterruptExitsAtOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{Latency: 5 * time.Second})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	crashInput(t, input, 20)
	p := start(t, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), input)
	waitUntil(func() bool { return srv.Stats().Requests >= 1 })
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	// A signal that arrives before the process has taken the one before it
	// may be merged with it, however long the test waits on a busy machine:
	// another is sent every 100 ms until the process ends. Without the
	// second-signal exit, it would end only after its 5 s requests, with
	// the status of an interrupted batch.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-exited:
			code, err := exitCode(err)
			require.NoError(t, err)
			require.Equal(t, exitInterrupt2, code, p.stderr.String())
			return
		case <-tick.C:
			p.cmd.Process.Signal(syscall.SIGINT) // fails once the process has ended
		}
	}
}

func TestServeAnswersUntilInterrupted(t *testing.T) {
	dir := t.TempDir()
	p := start(t, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "server.db"), "--faults", "500=0.2", "--seed", "2")
	var url string
	waitUntil(func() bool {
		line, _, ok := strings.Cut(p.stdout.String(), "\n")
		if !ok {
			return false
		}
		_, rest, _ := strings.Cut(line, "listening on ")
		url, _, _ = strings.Cut(rest, " ")
		return true
	})
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), p.stdout.String())

	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 50)
	db := filepath.Join(dir, "deposit.db")
	r := deposit(t, nil, "run", "--endpoint", url, "--db", db, "--json", input)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, nil, "run", "--endpoint", url, "--db", db, "--json", input)
	}
	require.Equal(t, exitDone, r.code, r.stderr)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitDone, p.wait(t), p.stderr.String())
	require.Contains(t, p.stdout.String(), fmt.Sprintf("%d records, ", distinct))
	require.Contains(t, p.stdout.String(), " 0 duplicates")
}

func TestDemoPrintsTheServersCounters(t *testing.T) {
	r := deposit(t, nil, "demo", "--seed", "7")
	require.Equal(t, exitDone, r.code, r.stdout+r.stderr)
	require.Contains(t, r.stdout, "records                   170  (distinct payloads in the batch: 170)")
	require.Contains(t, r.stdout, "duplicates                0\n")
	require.Contains(t, r.stdout, "requests during replay    0\n")
	require.Contains(t, r.stdout, "200 replayed")
}
