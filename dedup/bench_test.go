package dedup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/depositkit/deposit/internal/pgtest"
)

// benchRows is the size of the store the benchmarks run against.
const benchRows = 1_000_000

// benchStore holds the 1M-row store, built once per benchmark process.
var benchStore struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchStore.dir != "" {
		os.RemoveAll(benchStore.dir)
	}
	if err := pgtest.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// benchKey is the key of row i of the benchmark store.
func benchKey(i int) string { return fmt.Sprintf("%064x", i) }

// openBench opens the 1M-row store, building it on first use in one
// transaction: 80% done, 20% pending, each with a small body.
func openBench(b *testing.B) *SQLite {
	b.Helper()
	benchStore.once.Do(func() {
		benchStore.dir, benchStore.err = os.MkdirTemp("", "dedup-bench")
		if benchStore.err != nil {
			return
		}
		benchStore.path = filepath.Join(benchStore.dir, "deposit.db")
		s, err := Open(benchStore.path)
		if err != nil {
			benchStore.err = err
			return
		}
		defer s.Close()
		_, benchStore.err = s.wdb.Exec(`
			WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
			INSERT INTO records (target, key, state, outcome, identifier, status, body, attempts, created_at, updated_at)
			SELECT ?2, printf('%064x', i),
				CASE WHEN i % 5 = 0 THEN 'pending' ELSE 'done' END,
				CASE WHEN i % 5 = 0 THEN '' ELSE 'created' END,
				CASE WHEN i % 5 = 0 THEN '' ELSE '10.5072/' || i END,
				CASE WHEN i % 5 = 0 THEN 0 ELSE 201 END,
				CAST('{"title":"record ' || i || '","creators":["A. Author"]}' AS BLOB),
				1, 1767225600000000, 1767225600000000
			FROM n`, benchRows, target)
	})
	if benchStore.err != nil {
		b.Fatal(benchStore.err)
	}
	s, err := Open(benchStore.path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// keySeed makes every newKeys call of a benchmark process draw other keys.
var keySeed atomic.Uint64

// newKeys returns n random keys that are not in the benchmark store.
func newKeys(n int) []string {
	rng := rand.New(rand.NewPCG(keySeed.Add(1), 99))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
	}
	return keys
}

func perSecond(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), unit)
}

func BenchmarkLookup(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		if _, err := s.Lookup(ctx, target, benchKey(rng.IntN(benchRows))); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N, "lookups/s")
}

func BenchmarkLookupParallel(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			if _, err := s.Lookup(ctx, target, benchKey(rng.IntN(benchRows))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	perSecond(b, b.N, "lookups/s")
}

func BenchmarkLookupMany1000(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(2, 2))
	keys := make([]string, 1000)
	for b.Loop() {
		for i := range keys {
			keys[i] = benchKey(rng.IntN(benchRows))
		}
		got, err := s.LookupMany(ctx, target, keys)
		if err != nil || len(got) == 0 {
			b.Fatal(err, len(got))
		}
	}
	perSecond(b, b.N*len(keys), "lookups/s")
}

func BenchmarkComplete(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	keys := newKeys(b.N)
	c := Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/bench", Status: 201}
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Complete(ctx, target, keys[i], c); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N, "completes/s")
}

func BenchmarkCompleteMany1000(b *testing.B) {
	benchConfirmations(b, false, func(s *SQLite, items map[string]Confirmation) error {
		_, err := s.CompleteMany(context.Background(), target, items)
		return err
	})
}

// BenchmarkCompleteManyPending1000 and BenchmarkConfirmManyPending1000
// confirm pending keys, as a batch's outcome writer does: ConfirmMany reads
// no row back.
func BenchmarkCompleteManyPending1000(b *testing.B) {
	benchConfirmations(b, true, func(s *SQLite, items map[string]Confirmation) error {
		_, err := s.CompleteMany(context.Background(), target, items)
		return err
	})
}

func BenchmarkConfirmManyPending1000(b *testing.B) {
	benchConfirmations(b, true, func(s *SQLite, items map[string]Confirmation) error {
		_, err := s.ConfirmMany(context.Background(), target, items)
		return err
	})
}

// benchConfirmations has confirm record groups of 1,000 confirmations of
// keys not in the store; with pending, each group is claimed (untimed) just
// before.
func benchConfirmations(b *testing.B, pending bool, confirm func(*SQLite, map[string]Confirmation) error) {
	s := openBench(b)
	ctx := context.Background()
	const batch = 1000
	keys := newKeys(b.N * batch)
	c := Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/bench", Status: 201}
	lease := Lease{Owner: "bench", TTL: time.Minute}
	b.ResetTimer()
	for i := range b.N {
		group := keys[i*batch : (i+1)*batch]
		if pending {
			b.StopTimer()
			intents := make([]Intent, len(group))
			for j, k := range group {
				intents[j] = Intent{Ref: Ref{Target: target, Key: k}, Body: []byte(`{"title":"bench"}`)}
			}
			if _, err := s.ClaimMany(ctx, lease, intents); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		items := make(map[string]Confirmation, batch)
		for _, k := range group {
			items[k] = c
		}
		if err := confirm(s, items); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N*batch, "completes/s")
}

// BenchmarkBeginGroupCommit8 has 8 goroutines record intents at once; the
// writer commits what is queued together.
func BenchmarkBeginGroupCommit8(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	keys := newKeys(b.N)
	body := []byte(`{"title":"a new record","creators":["A. Author"]}`)
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 8 {
				if _, err := s.Begin(ctx, target, keys[i], body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	perSecond(b, b.N, "begins/s")
}

// BenchmarkCompleteGroupCommit8 is BenchmarkComplete from 8 goroutines.
func BenchmarkCompleteGroupCommit8(b *testing.B) {
	s := openBench(b)
	ctx := context.Background()
	keys := newKeys(b.N)
	c := Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/bench", Status: 201}
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 8 {
				if _, err := s.Complete(ctx, target, keys[i], c); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	perSecond(b, b.N, "completes/s")
}

// BenchmarkCountByTarget counts the 1M-row store per target and state, as
// deposit status does: in SQL from the indexes, and, as the baseline, by
// reading every record through List.
func BenchmarkCountByTarget(b *testing.B) {
	openBench(b).Close() // built and closed: read as a store no process has open
	r, err := OpenReadOnly(benchStore.path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	ctx := context.Background()
	want := Counts{Pending: benchRows / 5, Done: benchRows - benchRows/5}

	b.Run("sql", func(b *testing.B) {
		for b.Loop() {
			got, err := r.CountByTarget(ctx)
			if err != nil || len(got) != 1 || got[0].Counts != want {
				b.Fatal(err, got)
			}
		}
		perSecond(b, b.N*benchRows, "rows/s")
	})
	b.Run("list", func(b *testing.B) {
		for b.Loop() {
			got := map[string]*Counts{}
			for rec, err := range r.List(ctx, "", "") {
				if err != nil {
					b.Fatal(err)
				}
				c := got[rec.Target]
				if c == nil {
					c = &Counts{}
					got[rec.Target] = c
				}
				switch rec.State {
				case StatePending:
					c.Pending++
				case StateDone:
					c.Done++
				case StateFailed:
					c.Failed++
				}
			}
			if len(got) != 1 || *got[target] != want {
				b.Fatal(got)
			}
		}
		perSecond(b, b.N*benchRows, "rows/s")
	})
}
