package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// PostgreSQL frozen outright (SIGSTOP: its connections stay open and
// nothing answers) past the store outage budget, while four processes
// share it against a flaky server, once they have written a quarter of
// the batch's lines to their --results (a trigger on progress, not on
// time): every process gives the store up and ends, with exit 3 and the
// message that names the store, without its password. What each process
// says it gave up is what it counts: leases_lost is the sum of the leases
// its log says were given up, and the leases it could not release are
// reported in one line at most. Thawed, a re-run settles the batch with
// one record per payload. How long each process took to end after the
// freeze is logged, not asserted.
func TestAFleetGivesUpAFrozenPostgreSQLAndEnds(t *testing.T) {
	pg := pgtest.Start(t)
	db := pg.URL(t)
	u, err := url.Parse(db)
	require.NoError(t, err)
	password, _ := u.User.Password()
	require.NotEmpty(t, password)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 2000)
	srv := newServer(t, repotest.Config{Protocol: repotest.ProtocolPut, Faults: fleetFaults, Seed: 7})
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--concurrency", "8",
		"--lease", "4s", "--store-outage", "2s", "--json", input}

	const workers = 4
	results := make([]string, workers)
	procs := make([]*process, workers)
	for w := range procs {
		results[w] = filepath.Join(dir, fmt.Sprintf("results-%d.jsonl", w))
		procs[w] = start(t, slices.Concat(args[:1], []string{"--results", results[w]}, args[1:])...)
	}
	ended := make(chan int, workers)
	codes, took := make([]int, workers), make([]time.Duration, workers)
	var frozenAt time.Time
	frozen := make(chan struct{})
	for w, p := range procs {
		go func() {
			code, err := exitCode(p.cmd.Wait())
			if err != nil {
				code = -2
			}
			<-frozen
			codes[w], took[w] = code, time.Since(frozenAt)
			ended <- w
		}()
	}
	waitUntil(func() bool { return resultLines(results) >= 2000/4 })
	thaw := pg.Freeze(t)
	frozenAt = time.Now()
	close(frozen)
	for range workers {
		<-ended
	}
	thaw()

	shown := showDB(db)
	for w, p := range procs {
		stderr := p.stderr.String()
		t.Logf("process %d exited %d, %s after the freeze", w, codes[w], took[w].Round(time.Millisecond))
		require.Equal(t, exitUnresolved, codes[w], "process %d: %s", w, stderr)
		require.Contains(t, stderr, "deposit run: stopped: the store "+shown+" is unavailable", "process %d", w)
		require.NotContains(t, stderr, password, "process %d printed the store's password", w)
		require.NotContains(t, stderr, "could not release a lease", "process %d", w)
		require.LessOrEqual(t, strings.Count(stderr, "could not be released"), 1, "process %d: %s", w, stderr)
		s := summaryOf(t, p.stdout.String())
		require.Equal(t, leasesGivenUp(t, stderr), s.LeasesLost, "process %d: leases_lost is what its log says it gave up", w)
	}
	settle(t, args)
	checkExactlyOnce(t, srv, db, distinct)
}

// resultLines counts the lines written to the --results files so far.
func resultLines(paths []string) int {
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || bytes.Count(b, []byte("\n")) == 0 {
			return 0 // a process that has written nothing yet
		}
		n += bytes.Count(b, []byte("\n"))
	}
	return n
}

// leasesGivenUp sums the leases=N of the log lines of stderr that say
// leases were given up.
func leasesGivenUp(t *testing.T, stderr string) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(stderr) {
		if !strings.Contains(line, "could not renew leases for half their duration: gave up") &&
			!strings.Contains(line, "taken over by another process (not renewed in time)") {
			continue
		}
		m := regexp.MustCompile(` leases=(\d+)`).FindStringSubmatch(line)
		require.NotNil(t, m, "no leases= in %q", line)
		k, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		n += k
	}
	return n
}
