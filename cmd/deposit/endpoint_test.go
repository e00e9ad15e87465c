package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/restart"
	"github.com/depositkit/deposit/repotest"
)

// restartable is a reference repository served by a restart.Server: a
// server that restarts, its records kept.
type restartable struct {
	*restart.Server
	h *repotest.Handler
}

func newRestartable(t *testing.T, cfg repotest.Config) *restartable {
	t.Helper()
	h, err := repotest.NewHandler(cfg)
	require.NoError(t, err)
	srv, err := restart.New(h)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &restartable{Server: srv, h: h}
}

// checkOnce checks that the server holds one record per distinct payload,
// each done in the store at db with the server's identifier.
func (r *restartable) checkOnce(t *testing.T, db string, distinct int) {
	t.Helper()
	st := r.h.Stats()
	require.Equal(t, int64(0), st.Duplicates)
	require.Equal(t, int64(distinct), st.Records)
	ids := map[string]string{}
	for _, rec := range r.h.Records() {
		ids[rec.Key] = rec.Identifier
	}
	rows := storeRows(t, db)
	require.Len(t, rows, distinct)
	for _, row := range rows {
		require.Equal(t, dedup.StateDone, row.State, row.Key)
		require.Equal(t, ids[row.Key], row.Identifier, row.Key)
	}
}

// ended reports, on the channel returned, p's exit status once it ends.
func ended(p *process) <-chan int {
	ch := make(chan int, 1)
	go func() {
		code, err := exitCode(p.cmd.Wait())
		if err != nil {
			code = -2
		}
		ch <- code
	}()
	return ch
}

// until polls cond until it holds; the test fails should p end first
// (its exit status on code).
func until(t *testing.T, p *process, code <-chan int, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case c := <-code:
			t.Fatalf("the run ended (%d) too early:\n%s", c, p.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// itemLines returns the lines of stderr about one item ("line N: ...").
func itemLines(stderr string) []string {
	var lines []string
	for l := range strings.Lines(stderr) {
		if strings.HasPrefix(l, "line ") {
			lines = append(lines, l)
		}
	}
	return lines
}

// The server restarts in the middle of a run: closed once it holds 60
// records, it refuses connections until it listens on the same port
// again, once the run has said it waits. The run waits it out, says so
// in one line (and in one more that it answers again), and ends 0 with
// one record per payload. Before, every item the run had taken up ended
// unresolved, a "connection refused" line each, within half a second.
func TestARunWaitsOutAServerRestart(t *testing.T) {
	srv := newRestartable(t, repotest.Config{Latency: 5 * time.Millisecond})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 400)
	db := filepath.Join(dir, "deposit.db")

	p := start(t, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
	code := ended(p)
	until(t, p, code, func() bool { return srv.h.Stats().Records >= 60 })
	srv.Close()
	until(t, p, code, func() bool { return strings.Contains(p.stderr.String(), "connection refused") })
	require.NoError(t, srv.Open())
	require.Equal(t, exitDone, <-code, p.stderr.String())
	waiting := fmt.Sprintf("the endpoint %s stopped accepting connections (connection refused); waiting up to 1m0s for it to answer again (--endpoint-outage)\n", srv.URL)
	stderr := p.stderr.String()
	t.Logf("stderr:\n%s", stderr)
	require.Equal(t, 1, strings.Count(stderr, waiting), "one line says the run waits: %s", stderr)
	require.Equal(t, 1, strings.Count(stderr, "the endpoint "+srv.URL+" answers again, after "), stderr)
	require.Empty(t, itemLines(stderr), "no item is reported on its own")
	s := summaryOf(t, p.stdout.String())
	require.Equal(t, 0, s.Unresolved)
	srv.checkOnce(t, db, distinct)
}

// The server goes away and stays away past --endpoint-outage: the run
// says once that it waits, then stops with exit 3 and one line that says
// why, with one item reported (the one that found the budget spent), and
// keeps no intent for the items whose requests were only refused. Once
// the server is back, the same command settles the rest.
func TestARunStopsWhenTheServerStaysDownPastTheOutage(t *testing.T) {
	srv := newRestartable(t, repotest.Config{Latency: 5 * time.Millisecond})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 400)
	db := filepath.Join(dir, "deposit.db")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--endpoint-outage", "300ms", "--json", input}

	p := start(t, args...)
	code := ended(p)
	until(t, p, code, func() bool { return srv.h.Stats().Records >= 60 })
	srv.Close()
	require.Equal(t, exitUnresolved, <-code, p.stderr.String())
	stderr := p.stderr.String()
	t.Logf("stderr:\n%s", stderr)
	require.Equal(t, 1, strings.Count(stderr, "stopped accepting connections"), stderr)
	// One item is reported: the stop's. Its key may stand on more than
	// one line of the input (crashInput repeats payloads), and each of
	// those lines says it is unresolved.
	keys := map[string]bool{}
	for _, l := range itemLines(stderr) {
		_, rest, _ := strings.Cut(l, ": unresolved: ")
		key, _, _ := strings.Cut(rest, " ")
		keys[key] = true
	}
	require.Len(t, keys, 1, "one item reported: the stop's:\n%s", stderr)
	require.Equal(t, fmt.Sprintf("deposit run: stopped: the endpoint %s accepted no connection for 300ms (--endpoint-outage): connection refused; once it answers again, run the same command again (safe)", srv.URL),
		lastLine(stderr))
	s := summaryOf(t, p.stdout.String())
	require.Positive(t, s.Unresolved)
	require.Less(t, pendingRows(t, db), s.Unresolved, "items whose every request was refused keep no intent")

	require.NoError(t, srv.Open())
	r := start(t, args...)
	require.Equal(t, exitDone, r.wait(t), r.stderr.String())
	srv.checkOnce(t, db, distinct)
}

// An https:// endpoint whose server speaks plain HTTP fails every TLS
// handshake, so no request reaches it: the run stops at its first request
// and says to check the scheme, retries nothing and keeps no intent.
// Before, it retried the handshake 516 times and left every line pending.
func TestAnHTTPSEndpointOfAPlainServerStopsAtOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	endpoint := "https" + strings.TrimPrefix(srv.URL, "http")
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(200)...)
	db := filepath.Join(dir, "d.db")
	r := deposit(t, nil, "run", "--endpoint", endpoint, "--db", db, "--json", input)
	require.Equal(t, exitStop, r.code, r.stderr)
	require.Equal(t, "deposit run: stopped: the endpoint "+endpoint+" is unreachable: the server there speaks plain HTTP, not HTTPS: check the scheme of --endpoint",
		lastLine(r.stderr))
	s := summaryOf(t, r.stdout)
	require.Equal(t, 0, s.Retries)
	require.Empty(t, storeRows(t, db), "no request reached the server: no intent stays")
	require.Equal(t, int64(0), srv.Stats().Requests)
}
