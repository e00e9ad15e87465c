package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
)

// WorkerHeader is the header by which a child's requests name their
// worker, so that a kill strikes the process that sent the write.
const WorkerHeader = "Drivertest-Worker"

// childEnv names, in a child process, the test it serves; childInfo holds
// its Child as JSON.
const (
	childEnv  = "DRIVERTEST_CHILD"
	childInfo = "DRIVERTEST_CHILD_INFO"
)

// Harness runs one batch against a handler in child processes, kills
// them with SIGKILL at chosen writes, runs them again until the batch
// completes, and then checks what the handler holds. The zero value is
// not usable: Handler, and Client or Command, are required.
//
// With Client, each child is the test binary itself, re-executed to run
// only the test that called [Harness.Run]; in the child, Run deposits the
// batch and ends the test there. Everything the test does before Run is
// done again in each child, so the test must reach Run the same way, and
// Client must take what it needs from its [Child], not from the parent's
// variables (a child's server is its own, and idle).
type Harness struct {
	// Handler is the repository, served on 127.0.0.1 behind Faults.
	Handler http.Handler
	// Faults are injected into every request; the zero value injects none.
	Faults Faults
	// Payloads are the batch, one JSON document each, written one a line to
	// the input file the children read ([Child.Input]).
	Payloads [][]byte

	// Client configures the client of a child's run, in the child: a
	// Target pointed at Child.Endpoint, and whatever else the test wants.
	// The harness sets Store (the SQLite file at Child.Store) and adds
	// Child.Header; a zero Retry becomes a fast policy (1 ms to 20 ms,
	// Retry-After capped at 20 ms, 8 attempts) and a zero Lease 10 s, so a
	// batch with faults stays quick. Each run deposits the input at
	// Concurrency.
	Client func(Child) (client.Config, error)
	// Command, instead of Client, is the process of a run (the deposit
	// command, say): its exit status 0 means done, 3 unresolved (run it
	// again), any other a failure. It must use Child.Store as its store, and,
	// with several Workers, send Child.Header.
	Command func(Child) *exec.Cmd
	// Concurrency is each run's concurrency under Client; 0 means 8.
	Concurrency int
	// Workers is how many processes run the batch at once, on one store;
	// 0 means 1.
	Workers int
	// Runs bounds the runs of each worker, killed ones included; 0 means 10.
	Runs int

	// KillAt are the writes (numbered from 1 in the order their handler
	// returned, over the whole test) at which the process that sent the
	// write is killed with SIGKILL: the write took effect, and its answer
	// is never sent. [RandomKills] draws them from a seed.
	KillAt []int64
	// LoseStore removes the store after each kill: the next run starts on
	// an empty one, as after a lost disk. Only with one worker.
	LoseStore bool

	// Store is the store's path; "" is a new one in the Run's temporary
	// directory, removed when its test ends. With Addr, a test runs one
	// batch after another on one store (a batch that changes some payloads
	// of the one before, say): a path in the parent test's t.TempDir().
	Store string
	// Addr is the address the handler is served on; "" is a free port of
	// 127.0.0.1. A store's target names hold the endpoint, so a later Run
	// on the same Store gives an earlier Run's Report.Endpoint (less
	// "http://"), once that Run's test (a subtest) has ended and closed it.
	Addr string

	// Check checks the handler's records once the batch is done: one per
	// payload, say. Its error fails the test.
	Check func(payloads [][]byte) error
}

// Child is what a run of the batch is given.
type Child struct {
	Endpoint string      // the URL of the handler behind the faults
	Store    string      // the SQLite store's path
	Input    string      // the batch as JSON Lines
	Worker   int         // from 0
	Run      int         // this worker's run, from 1; the replay's is 0
	Header   http.Header // names the worker (WorkerHeader)
}

// Report is what a Harness saw.
type Report struct {
	Runs, Kills int // processes started (the replay not included), and killed
	// Summaries are the summaries of the runs that ended, under Client.
	Summaries []client.Summary
	Stats     Stats  // the middleware's counters, before the replay
	Store     string // the store's path, for a test to read after Run
	Endpoint  string // the handler's URL, served until the test ends
}

// childResult is what a child run writes for the parent under Client.
type childResult struct {
	Summary client.Summary
	Err     string
	Stop    bool // the run stopped (client.ErrStopRun): running again would not help
}

// Run runs the batch until it completes: every worker's last run left
// nothing unresolved. Then it checks that every store row is done, calls
// Check, and runs the batch once more, which must send no request. A
// pending row of a recheck target (a step's Recheck, "<protocol>-recheck
// ...") is a note for the next run, not an unfinished step: with such
// notes, a first replay may send requests (their searches) and must leave
// every row done, and a second must send none. In a
// child process, Run deposits the batch instead, and skips the rest of
// the test.
func (h Harness) Run(t *testing.T) Report {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		h.child(t)
		t.SkipNow() // the parent reads the result; nothing after Run is the child's
	}
	workers := max(h.Workers, 1)
	if h.Handler == nil || (h.Client == nil) == (h.Command == nil) {
		t.Fatal("drivertest: a Harness needs a Handler, and a Client or a Command")
	}
	if h.LoseStore && workers > 1 {
		t.Fatal("drivertest: LoseStore needs one worker: the others would keep the store open")
	}
	m, err := h.Faults.Wrap(h.Handler)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store := h.Store
	if store == "" {
		store = filepath.Join(dir, "deposit.db")
	}
	p := &parent{h: h, t: t, dir: dir, store: store, input: filepath.Join(dir, "batch.jsonl"),
		procs: map[int]*exec.Cmd{}, kills: slices.Sorted(slices.Values(h.KillAt))}
	p.report.Store = p.store
	p.writeInput()
	m.committed = p.committed
	srv := httptest.NewUnstartedServer(m)
	if h.Addr != "" {
		l, err := net.Listen("tcp", h.Addr)
		if err != nil {
			t.Fatalf("drivertest: Addr: %v", err)
		}
		srv.Listener.Close()
		srv.Listener = l
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p.endpoint = srv.URL
	p.report.Endpoint = srv.URL

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { p.untilDone(w) })
	}
	wg.Wait()
	if t.Failed() {
		return p.report
	}
	p.report.Stats = m.Stats()
	notes := p.checkStore()
	if h.Check != nil {
		if err := h.Check(h.Payloads); err != nil {
			t.Fatalf("drivertest: the batch is done, but Check says: %v", err)
		}
	}
	if notes > 0 {
		// The replay searches again for the records the notes name, and
		// settles them; the one after it must send nothing.
		p.replay(m, true)
		if notes = p.checkStore(); notes > 0 {
			t.Fatalf("drivertest: a replay left %d recheck notes pending: it should have searched for them", notes)
		}
	}
	p.replay(m, false)
	return p.report
}

// RandomKills draws n distinct write numbers in [1, within] from seed, for
// Harness.KillAt.
func RandomKills(seed uint64, n int, within int64) []int64 {
	rnd := rand.New(rand.NewPCG(seed, 0x6b696c6c))
	n = min(n, int(max(within, 0)))
	seen := map[int64]bool{}
	for len(seen) < n {
		seen[1+rnd.Int64N(within)] = true
	}
	out := make([]int64, 0, n)
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// parent runs the workers of one Harness.Run.
type parent struct {
	h                 Harness
	t                 *testing.T
	dir, store, input string
	endpoint          string
	mu                sync.Mutex
	procs             map[int]*exec.Cmd // each worker's current process
	kills             []int64           // writes still to kill at, ascending
	report            Report
	killedProc        map[*exec.Cmd]bool
}

func (p *parent) writeInput() {
	var b bytes.Buffer
	for i, payload := range p.h.Payloads {
		if bytes.ContainsAny(payload, "\n\r") {
			var c bytes.Buffer
			if err := json.Compact(&c, payload); err != nil {
				p.t.Fatalf("drivertest: payload %d: %v", i+1, err)
			}
			payload = c.Bytes()
		}
		b.Write(payload)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(p.input, b.Bytes(), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// committed kills the sender of write n when a kill is due at n, and
// says whether it did (the middleware then withholds the answer).
func (p *parent) committed(r *http.Request, n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.kills) == 0 || p.kills[0] > n {
		return false
	}
	worker := -1
	if w, err := strconv.Atoi(r.Header.Get(WorkerHeader)); err == nil {
		worker = w
	} else if len(p.procs) == 1 {
		for w := range p.procs {
			worker = w
		}
	}
	cmd := p.procs[worker]
	if cmd == nil || cmd.Process == nil || p.killedProc[cmd] {
		return false // not a running worker's: the kill waits for the next write
	}
	p.kills = p.kills[1:]
	if p.killedProc == nil {
		p.killedProc = map[*exec.Cmd]bool{}
	}
	p.killedProc[cmd] = true
	_ = cmd.Process.Signal(syscall.SIGKILL)
	return true
}

func (p *parent) child(w, run int) Child {
	return Child{Endpoint: p.endpoint, Store: p.store, Input: p.input, Worker: w, Run: run,
		Header: http.Header{WorkerHeader: {strconv.Itoa(w)}}}
}

// command is the process of worker w's run, and where a Client run
// writes its result.
func (p *parent) command(c Child) (*exec.Cmd, string) {
	if p.h.Command != nil {
		return p.h.Command(c), ""
	}
	result := filepath.Join(p.dir, fmt.Sprintf("result-%d-%d.json", c.Worker, c.Run))
	info, _ := json.Marshal(struct {
		Child
		Result string
	}{c, result})
	cmd := exec.Command(os.Args[0], "-test.run="+runPattern(p.t.Name()), "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+p.t.Name(), childInfo+"="+string(info))
	return cmd, result
}

// runPattern is the -test.run pattern of exactly the test named name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, part := range parts {
		parts[i] = "^" + regexp.QuoteMeta(part) + "$"
	}
	return strings.Join(parts, "/")
}

// outcome is how one run ended.
type outcome int

const (
	done outcome = iota
	again
	failed
)

// start runs c's process to its end and says how it ended. Off the test
// goroutine: t.Errorf, never t.Fatal.
func (p *parent) start(c Child) (outcome, string) {
	cmd, result := p.command(c)
	var stdout, stderr bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	p.mu.Lock()
	err := cmd.Start()
	if err == nil {
		p.procs[c.Worker] = cmd
	}
	p.mu.Unlock()
	if err != nil {
		return failed, err.Error()
	}
	err = cmd.Wait()
	p.mu.Lock()
	delete(p.procs, c.Worker)
	killed := p.killedProc[cmd]
	p.mu.Unlock()
	said := strings.TrimSpace(stderr.String() + "\n" + stdout.String())
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if killed && ws.Signal() == syscall.SIGKILL {
			return again, "killed"
		}
		return failed, fmt.Sprintf("ended by %v: %s", ws.Signal(), said)
	}
	if result == "" { // a Command
		switch code := cmd.ProcessState.ExitCode(); code {
		case 0:
			return done, said
		case 3:
			return again, said
		default:
			return failed, fmt.Sprintf("exit status %d (%v): %s", code, err, said)
		}
	}
	b, rerr := os.ReadFile(result)
	var res childResult
	if rerr != nil || json.Unmarshal(b, &res) != nil {
		return failed, fmt.Sprintf("the child wrote no result (%v, %v): %s", err, rerr, said)
	}
	if c.Run > 0 {
		p.mu.Lock()
		p.report.Summaries = append(p.report.Summaries, res.Summary)
		p.mu.Unlock()
	}
	s := res.Summary
	switch {
	case res.Stop || s.Failed+s.Invalid > 0:
		return failed, fmt.Sprintf("%s (%+v): %s", res.Err, s, said)
	case res.Err != "" || s.Unresolved > 0:
		return again, strings.TrimSpace(fmt.Sprintf("%s (%+v)\n%s", res.Err, s, said))
	}
	return done, said
}

// untilDone runs worker w until a run completes the batch.
func (p *parent) untilDone(w int) {
	runs := p.h.Runs
	if runs <= 0 {
		runs = 10
	}
	last := ""
	for run := 1; run <= runs; run++ {
		p.mu.Lock()
		p.report.Runs++
		p.mu.Unlock()
		out, said := p.start(p.child(w, run))
		switch out {
		case done:
			return
		case failed:
			p.t.Errorf("drivertest: worker %d run %d: %s", w, run, said)
			return
		}
		if said == "killed" {
			p.mu.Lock()
			p.report.Kills++
			p.mu.Unlock()
			if p.h.LoseStore {
				for _, suffix := range []string{"", "-wal", "-shm"} {
					if err := os.Remove(p.store + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
						p.t.Errorf("drivertest: losing the store: %v", err)
						return
					}
				}
			}
		}
		last = said
	}
	p.t.Errorf("drivertest: worker %d did not complete the batch in %d runs; the last said: %s", w, runs, last)
}

// checkStore checks that every row of the store is done, and returns how
// many recheck notes are pending (the next run searches for them).
func (p *parent) checkStore() (notes int) {
	r, err := dedup.OpenReadOnly(p.store)
	if err != nil {
		p.t.Fatalf("drivertest: the store: %v", err)
	}
	defer r.Close()
	for row, err := range r.List(context.Background(), "", "") {
		if err != nil {
			p.t.Fatalf("drivertest: the store: %v", err)
		}
		if row.State == dedup.StatePending && protocol.IsRecheck(row.Target) {
			notes++
		} else if row.State != dedup.StateDone {
			p.t.Errorf("drivertest: the batch is done, but the store's row (%s, %s) is %s", row.Target, row.Key, row.State)
		}
	}
	return notes
}

// replay runs the batch once more: it must complete, and without a
// request unless searches were due.
func (p *parent) replay(m *Middleware, searches bool) {
	before := m.Stats().Requests
	out, said := p.start(p.child(0, 0))
	if out != done {
		p.t.Fatalf("drivertest: a replay of the completed batch did not complete: %s", said)
	}
	if after := m.Stats().Requests; after != before && !searches {
		p.t.Fatalf("drivertest: a replay of the completed batch sent %d requests: the store should answer it", after-before)
	}
}

// child deposits the batch in a child process and writes the result for
// the parent.
func (h Harness) child(t *testing.T) {
	var info struct {
		Child
		Result string
	}
	if err := json.Unmarshal([]byte(os.Getenv(childInfo)), &info); err != nil {
		t.Fatalf("drivertest: child: %v", err)
	}
	res := h.deposit(info.Child)
	b, err := json.Marshal(res)
	if err == nil {
		err = os.WriteFile(info.Result, b, 0o644)
	}
	if err != nil {
		t.Fatalf("drivertest: child: %v", err)
	}
}

// deposit runs the batch once, as Client configures it.
func (h Harness) deposit(c Child) childResult {
	fail := func(err error) childResult {
		return childResult{Err: err.Error(), Stop: errors.Is(err, client.ErrStopRun) || errors.Is(err, client.ErrConfig)}
	}
	cfg, err := h.Client(c)
	if err != nil {
		return childResult{Err: err.Error(), Stop: true}
	}
	store, err := dedup.Open(c.Store)
	if err != nil {
		return fail(err)
	}
	defer store.Close()
	cfg.Store = store
	cfg.Header = cfg.Header.Clone()
	if cfg.Header == nil {
		cfg.Header = http.Header{}
	}
	for name, values := range c.Header {
		cfg.Header[name] = values
	}
	if cfg.Retry == (backoff.Policy{}) {
		cfg.Retry = backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 8}
	}
	if cfg.Lease == 0 {
		cfg.Lease = 10 * time.Second
	}
	cl, err := client.New(cfg)
	if err != nil {
		return fail(err)
	}
	f, err := os.Open(c.Input)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	lr := client.NewLineReader(f, 0)
	concurrency := h.Concurrency
	if concurrency <= 0 {
		concurrency = 8
	}
	sum, err := cl.Run(context.Background(), lr.Items(), client.BatchOptions{Concurrency: concurrency,
		OnResult: func(r client.ItemResult) {
			if r.Err != nil {
				fmt.Fprintf(os.Stderr, "line %d: %s: %v\n", r.Line, r.Outcome, r.Err)
			}
		}})
	if err = errors.Join(err, lr.Err()); err != nil {
		res := fail(err)
		res.Summary = sum
		return res
	}
	return childResult{Summary: sum}
}
