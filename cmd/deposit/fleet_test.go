package main

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
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

// fleetFaults is the flaky server of the fleet tests: drops after commit,
// 503 and 429 with Retry-After, 500, and a little latency.
const fleetFaults = "drop=0.15,503=0.1:retry-after=1,429=0.05:retry-after=1,500=0.05,latency=2ms"

// Four processes share one store and one input against a flaky server; two
// of them are SIGKILLed at random moments and started again, and every
// process is re-run until it exits 0. The leases keep each key in one
// process at a time: the server sees no overlapping writes of a key, and
// no key is settled twice but by a process that could not know it was
// (see settlingAnswers). The bounds are counts the protocol allows,
// never a ratio of requests that a loaded machine moves. Run on SQLite
// and on PostgreSQL, under put and idempotency-key.
func TestAFleetSharingOneStoreDepositsEachKeyFromOneProcess(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		for _, proto := range []repotest.Protocol{repotest.ProtocolPut, repotest.ProtocolIdempotencyKey} {
			t.Run(store+"/"+string(proto), func(t *testing.T) {
				newDB := func() string {
					if store == "postgres" {
						return pgtest.URL(t)
					}
					return filepath.Join(t.TempDir(), "deposit.db")
				}
				runFleet(t, proto, newDB)
			})
		}
	}
}

func runFleet(t *testing.T, proto repotest.Protocol, newDB func() string) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 2000)
	args := func(endpoint, db string) []string {
		// A lease is only as good as its renewals: a process that cannot
		// renew within half the lease (a loaded machine, a stalled store)
		// loses its keys while its requests may still be in flight, and
		// their writes overlap the next owner's. 10 s leaves room for
		// stalls of seconds, at the cost of waiting that long for the keys
		// a killed process held.
		return []string{"run", "--protocol", string(proto), "--endpoint", endpoint, "--db", db, "--concurrency", "8",
			"--lease", "10s", "--json", input}
	}
	// The request counts of a run depend on how many items were in flight
	// when a worker was killed, and so on the machine's speed; the bounds
	// below are counts the protocol allows, with no baseline run.
	srv := newServer(t, repotest.Config{Protocol: proto, Faults: fleetFaults, Seed: 7})
	db := newDB()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var (
		mu        sync.Mutex
		summaries []string // each finished run's stdout
		created   int
		lost      int
		recovered int
	)
	// Each worker runs its process until it exits 0; workers 0 and 1 kill
	// their first process at a random moment.
	var wg sync.WaitGroup
	for w := range 4 {
		killAfter := time.Duration(0)
		if w < 2 {
			killAfter = time.Duration(100+rnd.IntN(1500)) * time.Millisecond
		}
		// Off the test goroutine: no require; the summaries are read once
		// the workers are done.
		wg.Go(func() {
			for round := 0; ; round++ {
				if round >= 6 {
					t.Errorf("worker %d never finished the batch", w)
					return
				}
				p := &process{cmd: exec.Command(binary, args(srv.URL, db)...), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
				p.cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
				p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
				if err := p.cmd.Start(); err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if round == 0 && killAfter > 0 {
					time.AfterFunc(killAfter, func() { p.cmd.Process.Signal(syscall.SIGKILL) })
				}
				code, err := exitCode(p.cmd.Wait())
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if code == -1 {
					continue // killed
				}
				busy := code == exitStop && strings.Contains(p.stderr.String(), "SQLITE_BUSY")
				if code != exitDone && code != exitUnresolved && !busy {
					t.Errorf("worker %d exited %d: %s", w, code, p.stderr.String())
					return
				}
				if busy {
					// Another process held the SQLite write lock past the
					// store's 10 s busy wait (a loaded machine): the run
					// stopped, and running again is what a user does.
					t.Logf("worker %d: the store was busy; running again", w)
				}
				if out := p.stdout.String(); !busy || out != "" {
					mu.Lock()
					summaries = append(summaries, out)
					mu.Unlock()
				}
				if code == exitDone {
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, out := range summaries {
		s := summaryOf(t, out)
		created += s.Created
		lost += s.LeasesLost
		recovered += s.Recovered
	}

	if proto == repotest.ProtocolPut {
		checkExactlyOnce(t, srv, db, distinct)
	} else {
		checkIdentifiersOnce(t, srv, db, distinct)
	}
	st := srv.Stats()
	t.Logf("fleet of 4: %d requests (%d settling, %d read-backs, %d faults, %d answered in flight); %d overlapping writes; %d recovered, %d leases lost",
		st.Requests, settlingAnswers(st), readBacks(st), st.Faults, st.Conflicts, st.Overlaps, recovered, lost)
	require.Zero(t, st.Overlaps, "a key was written by two processes at once")
	require.LessOrEqual(t, created, distinct, "no payload is reported created twice")
	// Every key is settled by an answer its owner read: a retry goes on
	// until one says created or exists, and then no more is sent. A key is
	// settled again only by a process that found it pending, claimed by
	// another: the owner that read the first answer was killed before
	// recording it (the next owner reports the item recovered) or gave up
	// its lease (counted lost). The faults, drawn from (seed, key,
	// attempt), do not enter: however many, one answer settles a key.
	require.GreaterOrEqual(t, settlingAnswers(st), int64(distinct), "every key was settled by an answer")
	require.LessOrEqual(t, settlingAnswers(st)-int64(distinct), int64(recovered+lost),
		"a key settled again though no process had lost its answer")
	require.LessOrEqual(t, readBacks(st), st.Replays, "at most one read-back per answer that the record exists")
}

// settlingAnswers counts the writes the server answered with a verdict that
// settles a key: created, or exists (put's 412, an idempotency-key replay);
// a drop commits and answers nothing, so it settles nothing. A 409 "in
// flight" (idempotency-key: a killed writer's lock) is a wait, not counted.
func settlingAnswers(st repotest.Stats) int64 {
	return st.Creates + st.Replays - st.FaultsByKind["drop"]
}

// readBacks counts the requests that were not writes: under put, the GET
// that reads a record back after a 412. Writes are those that committed
// (Creates, Replays), those refused by a fault before committing (every
// fault but a drop, which commits), and the 409s. The fleet's fault spec
// applies to writes only.
func readBacks(st repotest.Stats) int64 {
	return st.Requests - st.Creates - st.Replays - (st.Faults - st.FaultsByKind["drop"]) - st.Conflicts
}

// checkIdentifiersOnce is checkExactlyOnce for a server that names its
// records itself (idempotency-key): one record per distinct payload, no
// duplicates, every row done with an identifier of the server's, and no
// identifier for two rows.
func checkIdentifiersOnce(t *testing.T, srv *repotest.Server, db string, distinct int) {
	t.Helper()
	st := srv.Stats()
	require.Equal(t, int64(0), st.Duplicates)
	require.Equal(t, int64(distinct), st.Records)
	ids := map[string]bool{}
	for _, rec := range srv.Records() {
		ids[rec.Identifier] = true
	}
	rows := storeRows(t, db)
	require.Len(t, rows, distinct)
	seen := map[string]bool{}
	for _, row := range rows {
		require.Equal(t, dedup.StateDone, row.State, row.Key)
		require.True(t, ids[row.Identifier], "phantom: %s is done with %s, which the server does not hold", row.Key, row.Identifier)
		require.False(t, seen[row.Identifier], "%s names two keys", row.Identifier)
		seen[row.Identifier] = true
	}
}
