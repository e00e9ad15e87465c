package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
)

// lineWatch is a process's stderr that notes the moment a line holding
// want is first written to it: the moment the test reads it.
type lineWatch struct {
	syncBuffer
	want string
	seen chan struct{}
	once sync.Once
	at   time.Time
}

func (w *lineWatch) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.syncBuffer.String(), w.want) {
		w.once.Do(func() {
			w.at = time.Now()
			close(w.seen)
		})
	}
	return n, err
}

// watched is a running deposit command whose stderr is watched for a
// line.
type watched struct {
	*process
	line   *lineWatch
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startWatched starts the command with its stderr watched for want.
func startWatched(t *testing.T, want string, args ...string) *watched {
	t.Helper()
	w := &lineWatch{want: want, seen: make(chan struct{})}
	p := &watched{process: &process{cmd: exec.Command(binary, args...), stdout: &syncBuffer{}, stderr: &w.syncBuffer}, line: w, exited: make(chan struct{})}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, w
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p
}

// awaitLine waits for the line, failing if the process ends without it.
// Wait returns only once stderr is all copied, so a line written before
// the exit has been seen by then.
func (p *watched) awaitLine(t *testing.T) {
	t.Helper()
	select {
	case <-p.line.seen:
	case <-p.exited:
		select {
		case <-p.line.seen:
		default:
			t.Fatalf("the process ended (%v) without printing %q; stderr:\n%s", p.err, p.line.want, p.stderr.String())
		}
	}
}

// exitCode waits for the process and returns its exit status.
func (p *watched) exitCode(t *testing.T) int {
	t.Helper()
	<-p.exited
	code, err := exitCode(p.err)
	require.NoError(t, err)
	return code
}

// arrivalLog is a server's log of when each request arrived, and for
// which path.
type arrivalLog struct {
	mu    sync.Mutex
	at    []time.Time
	paths []string
}

func (l *arrivalLog) add(r *http.Request) int {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at = append(l.at, now)
	l.paths = append(l.paths, r.URL.Path)
	return len(l.at)
}

// since counts the requests that arrived after t.
func (l *arrivalLog) since(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.at {
		if at.After(t) {
			n++
		}
	}
	return n
}

// counts returns the requests that arrived and the distinct paths.
func (l *arrivalLog) counts() (requests, paths int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	distinct := map[string]bool{}
	for _, p := range l.paths {
		distinct[p] = true
	}
	return len(l.paths), len(distinct)
}

// awaitedIn is the number of answers an acknowledgement says it awaits.
func awaitedIn(t *testing.T, stderr string) int {
	t.Helper()
	if strings.Contains(stderr, "no new request is sent, and none is awaiting its answer") {
		return 0
	}
	m := regexp.MustCompile(`waiting up to \S+ for the answers? to (\d+) requests? already sent`).FindStringSubmatch(stderr)
	require.NotNil(t, m, "the acknowledgement says how many answers it awaits: %s", stderr)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// The case: a server that answers every PUT 503 with Retry-After
// 1, 40 lines at --concurrency 4, SIGINT once retries are under way (the
// adaptive rate then holds requests back, each in its slot). No request
// may arrive after the interrupt is acknowledged on stderr, but for those
// the acknowledgement counts as already sent (a request let through just
// before the stop may still be on its way); between the signal and the
// acknowledgement, no more than the requests that can be in flight.
func TestNoRequestStartsAfterTheFirstInterrupt(t *testing.T) {
	var log arrivalLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(40)...)
	p := startWatched(t, "deposit run: stopping (SIGINT)",
		"run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--concurrency", "4", "--json", input)

	// Every line sent once, and retries paced since.
	waitUntil(func() bool { n, _ := log.counts(); return n >= 50 })
	signalled := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	p.awaitLine(t)
	require.Equal(t, exitUnresolved, p.exitCode(t), p.stderr.String())

	stderr := p.stderr.String()
	awaited := awaitedIn(t, stderr)
	require.LessOrEqual(t, log.since(p.line.at), awaited, "requests arrived after the interrupt was acknowledged, beyond those it said were sent; stderr:\n%s", stderr)
	require.LessOrEqual(t, log.since(signalled), 4, "more requests arrived after the signal than can be in flight")
	require.Contains(t, stderr, "deposit run: interrupted: no new requests were sent, the answers in flight were recorded")

	// The summary counts what the server saw: every request, and as
	// retries those that repeated one (a retry the stop cut short is none).
	requests, keys := log.counts()
	s := summaryOf(t, p.stdout.String())
	require.Equal(t, requests, s.Requests)
	require.Equal(t, requests-keys, s.Retries)
}

// With slow requests, the first interrupt is answered at once: the run
// says it stops, how many answers it waits for, and that a second signal
// quits without waiting. Those answers, once they come, are recorded, and
// nothing else is sent.
func TestTheFirstInterruptIsAcknowledgedAtOnce(t *testing.T) {
	for _, tc := range []struct {
		sig   syscall.Signal
		name  string
		again string
	}{
		{syscall.SIGINT, "SIGINT", "Ctrl-C again quits without waiting"},
		{syscall.SIGTERM, "SIGTERM", "another SIGTERM or SIGINT quits without waiting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log arrivalLog
			held := make(chan struct{}, 100)
			release := make(chan struct{})
			var once sync.Once
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				log.add(r)
				held <- struct{}{}
				<-release
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the server closes
			dir := t.TempDir()
			db := filepath.Join(dir, "deposit.db")
			input := writeFile(t, dir, "in.jsonl", payloads(20)...)
			p := startWatched(t, "deposit run: stopping ("+tc.name+")",
				"run", "--endpoint", srv.URL, "--db", db, "--concurrency", "4", "--json", input)

			for range 4 {
				<-held
			}
			require.NoError(t, p.cmd.Process.Signal(tc.sig))
			p.awaitLine(t)
			require.Contains(t, p.stderr.String(), "deposit run: stopping ("+tc.name+"): no new request is sent; "+
				"waiting up to 10s for the answers to 4 requests already sent, to record them; "+tc.again+
				" (those 4 items then stay uncertain until the next run settles them)\n")

			once.Do(func() { close(release) })
			require.Equal(t, exitUnresolved, p.exitCode(t), p.stderr.String())
			require.Contains(t, p.stderr.String(), "deposit run: interrupted: no new requests were sent, the answers in flight were recorded")
			requests, _ := log.counts()
			require.Equal(t, 4, requests, "requests sent after the interrupt")
			s := summaryOf(t, p.stdout.String())
			require.Equal(t, 4, s.Created, "the answers awaited are recorded")
			require.Equal(t, 4, s.Requests)
			done := 0
			for _, row := range storeRows(t, db) {
				if row.State == dedup.StateDone {
					done++
				}
			}
			require.Equal(t, 4, done)
			require.Zero(t, pendingRows(t, db), "an intent never sent is released")
		})
	}
}

// Answers that do not come within the wait are given up, and the last line
// says so, rather than that they were recorded; their items stay pending
// in the store, for the next run to settle.
func TestAnswersStillAwaitedAfterTheWaitAreSaidGivenUp(t *testing.T) {
	held := make(chan struct{}, 100)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before the server closes
	dir := t.TempDir()
	db := filepath.Join(dir, "deposit.db")
	input := writeFile(t, dir, "in.jsonl", payloads(20)...)
	p := startWatched(t, "deposit run: stopping (SIGINT)", "run", "--endpoint", srv.URL, "--db", db, "--concurrency", "2", input)
	for range 2 {
		<-held
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	p.awaitLine(t)
	require.Equal(t, exitUnresolved, p.exitCode(t), p.stderr.String())
	require.Contains(t, p.stderr.String(), "deposit run: interrupted: no new requests were sent; the answers still awaited when the wait ended were given up, their items stay uncertain; run the same command again to finish (safe)\n")
	require.Equal(t, 2, pendingRows(t, db))
}

// Once the run stops sending, the progress shows no ETA: the run no longer
// goes where it pointed.
func TestProgressShowsNoETAOnceStopping(t *testing.T) {
	var out syncBuffer
	p := &progress{w: &out, tty: true, width: func() int { return 200 }, size: 1000, read: func() int64 { return 250 }, done: make(chan struct{})}
	p.start = time.Now().Add(-10 * time.Second)
	p.itemsRead.Store(10)
	for range 10 {
		p.add(client.ItemResult{Result: client.Result{Outcome: client.OutcomeCreated}})
	}
	require.Contains(t, p.bar(10*time.Second, 200), "ETA ")
	require.Contains(t, p.status(), "ETA ")

	p.stopping("deposit run: stopping (SIGINT): no new request is sent")
	require.Contains(t, out.String(), "deposit run: stopping (SIGINT): no new request is sent\n")
	bar := p.bar(10*time.Second, 200)
	require.NotContains(t, bar, "ETA")
	require.Contains(t, bar, "1 items/s; stopping | 10 items")
	require.NotContains(t, p.status(), "ETA")
	require.Contains(t, p.status(), "; stopping")
}

// While the endpoint is waited out, the progress shows that in place of an
// ETA that only grows; once it answers again, the ETA comes back.
func TestProgressShowsNoETAWhileTheEndpointIsWaitedOut(t *testing.T) {
	var out syncBuffer
	p := &progress{w: &out, tty: true, width: func() int { return 200 }, size: 1000, read: func() int64 { return 250 }, done: make(chan struct{})}
	p.start = time.Now().Add(-10 * time.Second)
	p.itemsRead.Store(10)
	for range 10 {
		p.add(client.ItemResult{Result: client.Result{Outcome: client.OutcomeCreated}})
	}
	hook := p.endpointOutage("http://127.0.0.1:1")
	hook(client.EndpointOutageEvent{Err: errors.New("connection refused"), Budget: time.Minute})
	bar := p.bar(10*time.Second, 200)
	require.NotContains(t, bar, "ETA")
	require.Contains(t, bar, "1 items/s; waiting for the endpoint | 10 items")
	require.NotContains(t, p.status(), "ETA")
	require.Contains(t, p.status(), "; waiting for the endpoint")

	hook(client.EndpointOutageEvent{Done: true, Waited: 2 * time.Second})
	require.Contains(t, p.bar(10*time.Second, 200), "ETA ")
	require.NotContains(t, p.status(), "waiting for the endpoint")
}
