package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
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
// the fleet sends no more requests per record than one process alone
// (within 10%, plus one deposit's worth for each item a killed worker left
// uncertain). Run on SQLite and on PostgreSQL, under put and
// idempotency-key.
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
		return []string{"run", "--protocol", string(proto), "--endpoint", endpoint, "--db", db, "--concurrency", "8",
			"--lease", "2s", "--json", input}
	}
	newFleetServer := func() *repotest.Server {
		return newServer(t, repotest.Config{Protocol: proto, Faults: fleetFaults, Seed: 7})
	}

	// One process alone: the baseline of requests per record.
	alone := newFleetServer()
	aloneDB := newDB()
	for round := 0; ; round++ {
		require.Less(t, round, 5, "one process never finished the batch")
		p := start(t, args(alone.URL, aloneDB)...)
		if p.wait(t) == exitDone {
			break
		}
	}
	// A 409 "still in flight" (idempotency-key) is a wait, not a write: a
	// key whose writer was killed is locked on the server for a while, and
	// the process that takes it over asks until the lock ends. Requests
	// per record are compared without those answers.
	needed := func(st repotest.Stats) float64 { return float64(st.Requests-st.Conflicts) / float64(distinct) }
	base := needed(alone.Stats())
	t.Logf("one process alone: %d requests (%d answered in flight), %d overlapping writes",
		alone.Stats().Requests, alone.Stats().Conflicts, alone.Stats().Overlaps)

	srv := newFleetServer()
	db := newDB()
	rnd := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	var (
		mu        sync.Mutex
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
		wg.Go(func() {
			for round := 0; ; round++ {
				if round >= 6 {
					t.Errorf("worker %d never finished the batch", w)
					return
				}
				p := start(t, args(srv.URL, db)...)
				if round == 0 && killAfter > 0 {
					time.AfterFunc(killAfter, func() { p.cmd.Process.Signal(syscall.SIGKILL) })
				}
				code := p.wait(t)
				if code == -1 {
					continue // killed
				}
				if code != exitDone && code != exitUnresolved {
					t.Errorf("worker %d exited %d: %s", w, code, p.stderr.String())
					return
				}
				s := summaryOf(t, p.stdout.String())
				mu.Lock()
				created += s.Created
				lost += s.LeasesLost
				recovered += s.Recovered
				mu.Unlock()
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

	if proto == repotest.ProtocolPut {
		checkExactlyOnce(t, srv, db, distinct)
	} else {
		checkIdentifiersOnce(t, srv, db, distinct)
	}
	st := srv.Stats()
	perRecord := needed(st)
	t.Logf("fleet of 4: %d requests (%d answered in flight), %.2f per record (one process alone: %.2f); %d overlapping writes; %d leases lost",
		st.Requests, st.Conflicts, perRecord, base, st.Overlaps, lost)
	require.Zero(t, st.Overlaps, "a key was written by two processes at once")
	require.LessOrEqual(t, created, distinct, "no payload is reported created twice")
	// Within 10% of one process alone, plus one deposit's worth of requests
	// for each item a killed worker left uncertain: another settles it.
	allowed := base*1.1 + float64(recovered)*base/float64(distinct)
	t.Logf("%d items recovered from the killed workers: allowed %.2f requests per record", recovered, allowed)
	require.LessOrEqual(t, perRecord, allowed, fmt.Sprintf("the fleet sent %.2f requests per record, one process %.2f", perRecord, base))
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
