package main

import (
	"context"
	"fmt"
	"iter"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// paceWhy is what the first progress line the client's rate limit paces
// adds, to say why it matters.
const paceWhy = "(the client's limit, not the server's)"

// pacedRun runs n items through a client with rate against srv at
// concurrency, its progress reported every few milliseconds as plain
// lines, and returns those lines.
func pacedRun(t *testing.T, srv *repotest.Server, rate float64, concurrency, n int) []string {
	t.Helper()
	store, err := dedup.Open(filepath.Join(t.TempDir(), "deposit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	var out syncBuffer
	// The whole input counts as read: the ETA scales the items read so far.
	p := newProgress(&out, 1, func() int64 { return 1 }, 20*time.Millisecond)
	cl, err := client.New(client.Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Rate: rate, HTTPClient: srv.Client()})
	require.NoError(t, err)
	p.followRate(rate > 0, "put", cl.RateWait)
	var items iter.Seq[client.Item] = func(yield func(client.Item) bool) {
		for i := range n {
			if !yield(client.Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}
	sum, err := cl.Run(context.Background(), p.count(items), client.BatchOptions{Concurrency: concurrency, OnResult: p.add})
	p.stop()
	require.NoError(t, err)
	require.Equal(t, n, sum.Created)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.True(t, slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "; ETA ") }),
		"the run lasted long enough to estimate its end")
	return lines
}

func TestProgressSaysWhenTheClientsRateSetsThePace(t *testing.T) {
	t.Run("a run the rate paces against a fast server says so, why once", func(t *testing.T) {
		lines := pacedRun(t, newServer(t, repotest.Config{}), 20, 4, 30)
		var paced []string
		for _, line := range lines {
			if strings.Contains(line, " at --rate 20/s") {
				paced = append(paced, line)
			}
		}
		require.NotEmpty(t, paced)
		require.Contains(t, paced[0], paceWhy, "the first line paced says why")
		for _, line := range paced[1:] {
			require.NotContains(t, line, paceWhy, "only the first says why")
		}
		require.True(t, slices.ContainsFunc(paced, func(l string) bool {
			return regexp.MustCompile(`; ETA \d+s at --rate 20/s`).MatchString(l)
		}), "the ETA says what paces it")
	})
	t.Run("an unlimited run does not", func(t *testing.T) {
		lines := pacedRun(t, newServer(t, repotest.Config{Latency: 20 * time.Millisecond}), client.NoRateLimit, 1, 30)
		for _, line := range lines {
			require.NotContains(t, line, "--rate")
		}
	})
	t.Run("a run the server paces under a rate it never reaches does not", func(t *testing.T) {
		lines := pacedRun(t, newServer(t, repotest.Config{Latency: 20 * time.Millisecond}), 1000, 1, 30)
		for _, line := range lines {
			require.NotContains(t, line, "--rate")
		}
	})
}

// The command line wires the client's count to the progress: a run paced
// by --rate says so on its first progress line (one every 5 s on a log).
func TestRunSaysWhenItsRateSetsThePace(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	lines := make([]string, 40)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"n":%d}`, i)
	}
	input := writeFile(t, dir, "in.jsonl", lines...)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--rate", "6", input)
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `progress: .*; ETA \d+s at --rate 6/s \(the client's limit, not the server's\)`, r.stderr)
}

// A limit the user did not set is named as the target's default.
func TestPaceNoteNamesWhoseLimitItIs(t *testing.T) {
	pc := pacing{given: false, protocol: "invenio", rate: 1.5, paced: true}
	require.Equal(t, " at 1.5/s, the invenio default of --rate (the client's limit, not the server's)", pc.note(true, true))
	pc.given = true
	require.Equal(t, " at --rate 1.5/s", pc.note(true, false))
	require.Empty(t, pc.note(false, true), "dropped on a narrow terminal")
	pc.paced = false
	require.Empty(t, pc.note(true, true))
}

// On a terminal the bar drops the why first, the limit after the counts'
// breakdown, and the ETA itself only after both.
func TestProgressBarDropsThePaceNoteInTurn(t *testing.T) {
	p := &progress{size: 1000, read: func() int64 { return 250 }}
	p.itemsRead.Store(2500)
	p.requests.Store(1400)
	p.sum = client.Summary{Total: 2000, Created: 1900, Failed: 37, Invalid: 13, Unresolved: 50}
	p.pace = pacing{given: true, rate: 1.5, paced: true}
	for _, tc := range []struct {
		columns int
		want    string
	}{
		{250, "[=====               ]  25% 20 items/s; ETA 6m43s at --rate 1.5/s (the client's limit, not the server's) | 2000 items: 1900 done (1900 created, 0 existing, 0 replayed), 37 failed, 13 invalid, 50 unresolved; 1400 requests"},
		{200, "[=====               ]  25% 20 items/s; ETA 6m43s at --rate 1.5/s | 2000 items: 1900 done (1900 created, 0 existing, 0 replayed), 37 failed, 13 invalid, 50 unresolved; 1400 requests"},
		{120, "[=====               ]  25% 20 items/s; ETA 6m43s | 2000 items: 1900 done, 37 failed, 13 invalid, 50 unresolved"},
	} {
		require.Equal(t, tc.want, p.bar(100*time.Second, tc.columns), "%d columns", tc.columns)
	}
}
