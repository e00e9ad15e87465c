package dedup

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// The PostgreSQL benchmarks run against the test binary's pgtest server,
// on localhost with its default durability (fsync on, synchronous commit),
// with a store of benchRows rows shaped like openBench's. Each call is a
// round trip to the server, so they measure what a client on the same
// machine as its database gets; a network adds its round-trip time to
// each call but the batched forms.

// benchPG holds the 1M-row PostgreSQL store's URL, built once per
// benchmark process.
var benchPG struct {
	once sync.Once
	url  string
	err  error
}

// openBenchPG opens the 1M-row PostgreSQL store, building it on first use
// in one statement: 80% done, 20% pending, each with a small body.
func openBenchPG(b *testing.B) *Postgres {
	b.Helper()
	ctx := context.Background()
	benchPG.once.Do(func() {
		u, _ := pgSchemaURL(b)
		s, err := OpenPostgres(ctx, u)
		if err != nil {
			benchPG.err = err
			return
		}
		defer s.Close()
		_, err = s.pool.Exec(ctx, `INSERT INTO `+s.schema+`.records (target, key, state, outcome, identifier, status, body, attempts, created_at, updated_at)
			SELECT $1, lpad(to_hex(i), 64, '0'),
				CASE WHEN i % 5 = 0 THEN 'pending' ELSE 'done' END,
				CASE WHEN i % 5 = 0 THEN '' ELSE 'created' END,
				CASE WHEN i % 5 = 0 THEN '' ELSE '10.5072/' || i END,
				CASE WHEN i % 5 = 0 THEN 0 ELSE 201 END,
				convert_to('{"title":"record ' || i || '","creators":["A. Author"]}', 'UTF8'),
				1, now(), now()
			FROM generate_series(0, $2::int - 1) AS i`, target, benchRows)
		if err == nil {
			_, err = s.pool.Exec(ctx, "VACUUM ANALYZE "+s.schema+".records")
		}
		benchPG.url, benchPG.err = u, err
	})
	if benchPG.err != nil {
		b.Fatal(benchPG.err)
	}
	s, err := OpenPostgres(ctx, benchPG.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkPostgresLookup(b *testing.B) {
	s := openBenchPG(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		if _, err := s.Lookup(ctx, target, benchKey(rng.IntN(benchRows))); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N, "lookups/s")
}

func BenchmarkPostgresLookupParallel(b *testing.B) {
	s := openBenchPG(b)
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

func BenchmarkPostgresLookupMany1000(b *testing.B) {
	s := openBenchPG(b)
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

func BenchmarkPostgresComplete(b *testing.B) {
	s := openBenchPG(b)
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

func BenchmarkPostgresCompleteMany1000(b *testing.B) {
	s := openBenchPG(b)
	ctx := context.Background()
	const batch = 1000
	keys := newKeys(b.N * batch)
	c := Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/bench", Status: 201}
	b.ResetTimer()
	for i := range b.N {
		items := make(map[string]Confirmation, batch)
		for _, k := range keys[i*batch : (i+1)*batch] {
			items[k] = c
		}
		if _, err := s.CompleteMany(ctx, target, items); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N*batch, "completes/s")
}

// BenchmarkPostgresComplete8 is BenchmarkPostgresComplete from 8
// goroutines, each statement its own transaction (the server groups their
// commits' log flushes).
func BenchmarkPostgresComplete8(b *testing.B) {
	benchParallel(b, openBenchPG(b), "completes/s", func(s claimer, key string) error {
		_, err := s.Complete(context.Background(), target, key, Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/bench", Status: 201})
		return err
	})
}

// claimer is what the Claim benchmarks call, on either backend.
type claimer interface {
	Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error)
	Complete(ctx context.Context, target, key string, c Confirmation) (Record, error)
}

var (
	benchBody  = []byte(`{"title":"a new record","creators":["A. Author"]}`)
	benchLease = Lease{Owner: "bench-owner", TTL: time.Minute}
)

// benchClaim has one goroutine claim new keys, as the engine does before
// a deposit's first request.
func benchClaim(b *testing.B, s claimer) {
	ctx := context.Background()
	keys := newKeys(b.N)
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Claim(ctx, target, keys[i], benchBody, benchLease); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N, "claims/s")
}

// benchParallel has 8 goroutines call op on new keys at once.
func benchParallel(b *testing.B, s claimer, unit string, op func(s claimer, key string) error) {
	keys := newKeys(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 8 {
				if err := op(s, keys[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	perSecond(b, b.N, unit)
}

func claimNew(s claimer, key string) error {
	_, err := s.Claim(context.Background(), target, key, benchBody, benchLease)
	return err
}

func BenchmarkClaim(b *testing.B)         { benchClaim(b, openBench(b)) }
func BenchmarkPostgresClaim(b *testing.B) { benchClaim(b, openBenchPG(b)) }

// BenchmarkClaimGroupCommit8 has 8 goroutines claim at once; SQLite's
// writer commits what is queued together.
func BenchmarkClaimGroupCommit8(b *testing.B) {
	benchParallel(b, openBench(b), "claims/s", claimNew)
}

// BenchmarkPostgresClaim8 has 8 goroutines claim at once over the pool.
func BenchmarkPostgresClaim8(b *testing.B) {
	benchParallel(b, openBenchPG(b), "claims/s", claimNew)
}

// benchClaimMany claims new keys in groups of 64, as a batch's claims are
// coalesced: one op is one key.
func benchClaimMany(b *testing.B, s interface {
	ClaimMany(ctx context.Context, lease Lease, intents []Intent) ([]Claimed, error)
}) {
	ctx := context.Background()
	keys := newKeys(b.N)
	b.ResetTimer()
	for i := 0; i < len(keys); i += 64 {
		group := make([]Intent, 0, 64)
		for _, k := range keys[i:min(i+64, len(keys))] {
			group = append(group, Intent{Ref: Ref{Target: target, Key: k}, Body: benchBody})
		}
		if _, err := s.ClaimMany(ctx, benchLease, group); err != nil {
			b.Fatal(err)
		}
	}
	perSecond(b, b.N, "claims/s")
}

func BenchmarkClaimMany64(b *testing.B)         { benchClaimMany(b, openBench(b)) }
func BenchmarkPostgresClaimMany64(b *testing.B) { benchClaimMany(b, openBenchPG(b)) }
