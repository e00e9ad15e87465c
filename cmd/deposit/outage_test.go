package main

import (
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/pgtest"
	"github.com/depositkit/deposit/repotest"
)

// outageFleet runs four processes on one PostgreSQL store and one input
// against a flaky server; during is given the number of records the
// server holds, every few milliseconds on the test's goroutine, until the
// processes end. It returns each process's exit status and stderr.
func outageFleet(t *testing.T, srv *repotest.Server, args []string, during func(records int64)) ([]int, []string) {
	codes, stderrs := make([]int, 4), make([]string, 4)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			p := start(t, args...)
			codes[w] = p.wait(t)
			stderrs[w] = p.stderr.String()
		})
	}
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	watch := time.NewTicker(5 * time.Millisecond)
	defer watch.Stop()
	for {
		select {
		case <-ended:
			return codes, stderrs
		case <-watch.C:
			during(srv.Stats().Records)
		}
	}
}

// settle re-runs one process until it exits 0.
func settle(t *testing.T, args []string) {
	t.Helper()
	for round := 0; ; round++ {
		require.Less(t, round, 4, "a re-run never settled the batch")
		p := start(t, args...)
		code := p.wait(t)
		if code == exitDone {
			return
		}
		require.Equal(t, exitUnresolved, code, p.stderr.String())
	}
}

// PostgreSQL restarted twice while four processes share it (triggered by
// the records the server holds, not by time): every process rides the
// restarts out and ends 0 (or 3, run again), and a re-run settles the
// batch with one record per payload.
func TestAFleetRidesOutPostgreSQLRestarts(t *testing.T) {
	pg := pgtest.Start(t)
	db := pg.URL(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 2000)
	srv := newServer(t, repotest.Config{Protocol: repotest.ProtocolPut, Faults: fleetFaults, Seed: 7})
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--concurrency", "8",
		"--lease", "10s", "--store-outage", "60s", "--json", input}

	restarts := 0
	codes, stderrs := outageFleet(t, srv, args, func(records int64) {
		if restarts < 2 && records >= int64(distinct*(restarts+1)/4) {
			pg.Restart(t)
			restarts++
			t.Logf("PostgreSQL restarted at %d records", records)
		}
	})
	require.Equal(t, 2, restarts, "the fleet finished before both restarts")
	for w, code := range codes {
		require.Contains(t, []int{exitDone, exitUnresolved}, code, "process %d: %s", w, stderrs[w])
		t.Logf("process %d exited %d", w, code)
	}
	settle(t, args)
	checkExactlyOnce(t, srv, db, distinct)
}

// PostgreSQL frozen (SIGSTOP: connections open, nothing answers, no
// server-side timeout can fire) past the outage budget: every process
// stops with exit 3 and a message naming the store without its password,
// while the server is still frozen; after SIGCONT a re-run settles the
// batch with one record per payload.
func TestAFleetStopsWhenPostgreSQLHangsPastTheBudget(t *testing.T) {
	// Open (issue 27): with every PostgreSQL process stopped, the
	// processes did not end (observed for 10 minutes); some wait on the
	// store is still without a deadline (suspects: a cancel request pgx
	// sends to the frozen postmaster, or the pool's Close waiting for a
	// connection still acquired). Enabled once that is found.
	t.Skip("a frozen PostgreSQL still holds the processes: see the comment above")
	pg := pgtest.Start(t)
	db := pg.URL(t)
	u, err := url.Parse(db)
	require.NoError(t, err)
	password, _ := u.User.Password()
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 2000)
	srv := newServer(t, repotest.Config{Protocol: repotest.ProtocolPut, Faults: fleetFaults, Seed: 7})
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--concurrency", "8",
		"--lease", "4s", "--store-outage", "2s", "--json", input}

	var (
		thaw     func()
		frozenAt time.Time
	)
	codes, stderrs := outageFleet(t, srv, args, func(records int64) {
		if thaw == nil && records >= int64(distinct/4) {
			thaw = pg.Freeze(t)
			frozenAt = time.Now()
			t.Logf("PostgreSQL frozen at %d records", records)
		}
	})
	require.NotNil(t, thaw, "the fleet finished before the freeze")
	t.Logf("every process ended %s after the freeze (budget 2s, lease 4s)", time.Since(frozenAt).Round(time.Millisecond))
	thaw()
	for w, code := range codes {
		require.Equal(t, exitUnresolved, code, "process %d: %s", w, stderrs[w])
		require.Contains(t, stderrs[w], "is unavailable", "process %d", w)
		require.Contains(t, stderrs[w], "run the same command again (safe)", "process %d", w)
		require.NotContains(t, stderrs[w], password, "process %d printed the store's password", w)
		t.Logf("process %d: %s", w, lastLine(stderrs[w]))
	}
	settle(t, args)
	checkExactlyOnce(t, srv, db, distinct)
}
