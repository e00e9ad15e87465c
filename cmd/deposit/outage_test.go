package main

import (
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
