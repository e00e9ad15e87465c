package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// BenchmarkObjects compares what an object's update costs with what a
// create costs, through Client.Run at concurrency 8 against the reference
// server under put, with a SQLite store. One op is one item of a batch of
// b.N:
//
//   - create: new payloads, no identity (today's path);
//   - create-ungrouped: the same, through a store that hides ConfirmMany,
//     so that outcomes are written one by one and no claims are made
//     ahead, as under an identity: the cost of losing the group commits;
//   - create-identity: the first versions of new objects;
//   - update: each object at v1 already, v2 deposited;
//   - stale: v1 again after v2 (no request);
//   - replay: v2 again (no request).
//
// The server sleeps the latency before every request it answers (its
// Config.Latency delays creates only, not updates); the objects' earlier
// versions are deposited without it, before the timer starts. Beside
// items/s and requests per item, it reports the store calls that write
// per item and the time items spend waiting in store calls, split into
// the objects' lease rows (claim and release), their versions
// (BeginUpdate, ApplyVersion, NoteStale), the key rows and the lookups.
// The figures in docs/performance.md come from one test binary
// (go test -c ./client/), run once per sub-benchmark in alternated rounds:
//
//	client.test -test.run '^$' -test.bench 'BenchmarkObjects/latency=0s/update$' -test.benchtime 2000x
func BenchmarkObjects(b *testing.B) {
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		for _, kind := range []string{"create", "create-ungrouped", "create-identity", "update", "stale", "replay"} {
			b.Run(fmt.Sprintf("latency=%s/%s", latency, kind), func(b *testing.B) { benchObjects(b, latency, kind) })
		}
	}
}

func objectBenchPayload(run string, i, version int) []byte {
	return fmt.Appendf(nil, `{"id":"%s-%d","version":%d,"title":"Series %s-%d","creators":["Vega, A.","Ng, B."],"year":2026,"size":%d.25,"keywords":["reef","temperature","time series"]}`,
		run, i, version, run, i, i)
}

func benchObjects(b *testing.B, latency time.Duration, kind string) {
	h, err := repotest.NewHandler(repotest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	var delay atomic.Int64 // off while the earlier versions are deposited
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(delay.Load()); d > 0 {
			time.Sleep(d)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	sqlite, err := dedup.Open(filepath.Join(b.TempDir(), "deposit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer sqlite.Close()
	timed := &timedStore{SQLite: sqlite}
	var store Store = timed
	cfg := Config{Target: put.Target{Endpoint: srv.URL}, Identity: []string{"/id"}}
	switch kind {
	case "create":
		cfg.Identity = nil
	case "create-ungrouped":
		cfg.Identity = nil
		store = ungroupedStore{timed}
	}
	cfg.Store = store
	run := fmt.Sprint(benchRun.Add(1))
	items := func(version int) func(func(Item) bool) {
		return func(yield func(Item) bool) {
			for i := range b.N {
				if !yield(Item{Line: int64(i + 1), Payload: objectBenchPayload(run, i, version)}) {
					return
				}
			}
		}
	}
	opts := BatchOptions{Concurrency: 8}
	earlier := map[string][]int{"update": {1}, "stale": {1, 2}, "replay": {1, 2}}[kind]
	for _, v := range earlier {
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if sum, err := c.Run(context.Background(), items(v), opts); err != nil || sum.Created+sum.Updated != b.N {
			b.Fatalf("version %d: %d created, %d updated of %d: %v", v, sum.Created, sum.Updated, b.N, err)
		}
	}
	version := map[string]int{"update": 2, "stale": 1, "replay": 2}[kind]
	version = max(version, 1)
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	timed.leaseTarget = objectLeaseTarget(c.target.Name())
	before := h.Stats()
	delay.Store(int64(latency))
	timed.reset()
	b.ResetTimer()
	cpu := processCPU()
	sum, err := c.Run(context.Background(), items(version), opts)
	b.StopTimer()
	cpu = processCPU() - cpu
	delay.Store(0)
	if err != nil {
		b.Fatal(err)
	}
	after := h.Stats()
	n := b.N
	switch want := map[string]*int{"update": &sum.Updated, "stale": &sum.Stale, "replay": &sum.Replayed}[kind]; {
	case want == nil && (sum.Created != n || after.Creates-before.Creates != int64(n)):
		b.Fatalf("created %d of %d (server: %d): %+v", sum.Created, n, after.Creates-before.Creates, sum)
	case want != nil && *want != n:
		b.Fatalf("%s %d of %d: %+v", kind, *want, n, sum)
	case kind == "update" && after.Updates-before.Updates != int64(n):
		b.Fatalf("the server applied %d updates of %d", after.Updates-before.Updates, n)
	case (kind == "stale" || kind == "replay") && sum.Requests != 0:
		b.Fatalf("%d requests for %s lines", sum.Requests, kind)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(sum.Requests)/float64(n), "req/item")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-µs/item")
	}
	b.ReportMetric(float64(timed.writes.Load())/float64(n), "writes/item")
	for i, unit := range []string{"lease-µs/item", "version-µs/item", "row-µs/item", "lookup-µs/item"} {
		b.ReportMetric(float64(timed.spent[i].Load())/1e3/float64(n), unit)
	}
}

// The kinds of store call timedStore adds up.
const (
	spentLease   = iota // claims and releases of objects' lease rows
	spentVersion        // BeginUpdate, ApplyVersion, NoteStale
	spentRow            // every other write: key rows, renewals
	spentLookup         // reads
	spentKinds
)

// timedStore is a SQLite store that counts its writing calls and adds up
// the time callers wait in each kind of call. Every method of the store
// stays promoted, so the client takes the same paths as with the store
// itself.
type timedStore struct {
	*dedup.SQLite
	leaseTarget string // set before the timed run, read only after
	writes      atomic.Int64
	spent       [spentKinds]atomic.Int64 // nanoseconds
}

func (s *timedStore) reset() {
	s.writes.Store(0)
	for i := range s.spent {
		s.spent[i].Store(0)
	}
}

// since adds the time since t0 to kind, counting a write unless kind is a
// lookup.
func (s *timedStore) since(kind int, t0 time.Time) {
	s.spent[kind].Add(int64(time.Since(t0)))
	if kind != spentLookup {
		s.writes.Add(1)
	}
}

func (s *timedStore) rowKind(target string) int {
	if target == s.leaseTarget {
		return spentLease
	}
	return spentRow
}

func (s *timedStore) Claim(ctx context.Context, target, key string, body []byte, lease dedup.Lease) (dedup.Record, error) {
	defer s.since(s.rowKind(target), time.Now())
	return s.SQLite.Claim(ctx, target, key, body, lease)
}

func (s *timedStore) Release(ctx context.Context, owner string, ref dedup.Ref, unsent bool) error {
	defer s.since(s.rowKind(ref.Target), time.Now())
	return s.SQLite.Release(ctx, owner, ref, unsent)
}

func (s *timedStore) ClaimMany(ctx context.Context, lease dedup.Lease, intents []dedup.Intent) ([]dedup.Claimed, error) {
	defer s.since(spentRow, time.Now())
	return s.SQLite.ClaimMany(ctx, lease, intents)
}

func (s *timedStore) Renew(ctx context.Context, lease dedup.Lease, refs []dedup.Ref) ([]dedup.Ref, error) {
	defer s.since(spentRow, time.Now())
	return s.SQLite.Renew(ctx, lease, refs)
}

func (s *timedStore) Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error) {
	defer s.since(spentRow, time.Now())
	return s.SQLite.Begin(ctx, target, key, body)
}

func (s *timedStore) Complete(ctx context.Context, target, key string, c dedup.Confirmation) (dedup.Record, error) {
	defer s.since(spentRow, time.Now())
	return s.SQLite.Complete(ctx, target, key, c)
}

func (s *timedStore) ConfirmMany(ctx context.Context, target string, items map[string]dedup.Confirmation) (map[string]string, error) {
	defer s.since(spentRow, time.Now())
	return s.SQLite.ConfirmMany(ctx, target, items)
}

func (s *timedStore) BeginUpdate(ctx context.Context, target, key, version, order string) (dedup.Object, error) {
	defer s.since(spentVersion, time.Now())
	return s.SQLite.BeginUpdate(ctx, target, key, version, order)
}

func (s *timedStore) ApplyVersion(ctx context.Context, target, key string, a dedup.Applied) (dedup.Object, error) {
	defer s.since(spentVersion, time.Now())
	return s.SQLite.ApplyVersion(ctx, target, key, a)
}

func (s *timedStore) NoteStale(ctx context.Context, target, key string) error {
	defer s.since(spentVersion, time.Now())
	return s.SQLite.NoteStale(ctx, target, key)
}

func (s *timedStore) Lookup(ctx context.Context, target, key string) (dedup.Record, error) {
	defer s.since(spentLookup, time.Now())
	return s.SQLite.Lookup(ctx, target, key)
}

func (s *timedStore) LookupMany(ctx context.Context, target string, keys []string) (map[string]dedup.Record, error) {
	defer s.since(spentLookup, time.Now())
	return s.SQLite.LookupMany(ctx, target, keys)
}

func (s *timedStore) LookupDone(ctx context.Context, target string, keys []string, dst []dedup.Record) ([]dedup.Record, error) {
	defer s.since(spentLookup, time.Now())
	return s.SQLite.LookupDone(ctx, target, keys, dst)
}

func (s *timedStore) LookupObject(ctx context.Context, target, key string) (dedup.Object, error) {
	defer s.since(spentLookup, time.Now())
	return s.SQLite.LookupObject(ctx, target, key)
}

func (s *timedStore) LookupVersion(ctx context.Context, target, key, version string) (dedup.Version, error) {
	defer s.since(spentLookup, time.Now())
	return s.SQLite.LookupVersion(ctx, target, key, version)
}

// ungroupedStore is a store without ConfirmMany: a batch then writes each
// outcome alone and claims nothing ahead, as it does under an identity,
// while claims are still coalesced (ClaimMany).
type ungroupedStore struct{ groupedClaims }

// groupedClaims is what ungroupedStore keeps of a store.
type groupedClaims interface {
	Store
	manyClaimer
	doneLooker
	ownerProver
}
