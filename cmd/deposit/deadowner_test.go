package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// A run killed with SIGKILL mid-batch leaves the keys it claimed (ahead of
// sending, in groups) leased for 10 minutes. The re-run on the same SQLite
// store takes them over at once: the store proves the killed run dead by
// its lock, so the re-run never says it waits, and every line is settled
// exactly once.
func TestARerunTakesOverAKilledRunsLeasesAtOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{Latency: 5 * time.Millisecond})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 1000)
	db := filepath.Join(dir, "deposit.db")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--lease", "10m", "--json", input}

	p := start(t, args...)
	waitUntil(func() bool { return srv.Stats().Creates >= 50 })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, -1, p.wait(t), "killed mid-run")

	// What the killed run left: keys it claimed, leased for minutes more.
	leased := 0
	for _, row := range storeRows(t, db) {
		if row.State == dedup.StatePending && time.Until(row.LeaseExpires) > 5*time.Minute {
			leased++
		}
	}
	require.Positive(t, leased, "the killed run left keys leased")

	p = start(t, args...)
	exited := make(chan struct{})
	go func() { p.cmd.Wait(); close(exited) }()
	waitUntil(func() bool {
		select {
		case <-exited:
			return true
		default:
			return strings.Contains(p.stderr.String(), "waiting for keys")
		}
	})
	select {
	case <-exited:
	default:
		p.cmd.Process.Kill()
		<-exited
		t.Fatalf("the re-run waits for the killed run's leases:\n%s", p.stderr.String())
	}
	require.Equal(t, exitDone, p.cmd.ProcessState.ExitCode(), p.stderr.String())
	require.NotContains(t, p.stderr.String(), "waiting for keys")
	s := summaryOf(t, p.stdout.String())
	require.GreaterOrEqual(t, s.Recovered, leased, "every key the killed run left pending is recovered")
	checkExactlyOnce(t, srv, db, distinct)
}
