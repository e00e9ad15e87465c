package client

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// flakyFaults are the random faults of BenchmarkFlaky: throttles that do
// not come from load.
const flakyFaults = "drop=0.15,503=0.1:retry-after=1,429=0.05:retry-after=1,500=0.05,latency=2ms"

// BenchmarkFlaky deposits 2,000 lines at concurrency 8 into a server whose
// 429s and 503s are random (flakyFaults, seed 7), with 10 attempts per
// request as `deposit run` makes, once with the adaptive rate and once with
// a static one: an adaptive rate must not slow this batch down. One op is
// one batch; run it with -benchtime 1x -count N to alternate.
//
//	go test -run '^$' -bench Flaky -benchtime 1x -count 5 ./client/
func BenchmarkFlaky(b *testing.B) {
	for _, static := range []bool{true, false} {
		b.Run(rateName(static), func(b *testing.B) {
			var secs float64
			var requests, unresolved, throttled int
			for range b.N {
				b.StopTimer()
				srv, err := repotest.NewServer(repotest.Config{Faults: flakyFaults, Seed: 7})
				if err != nil {
					b.Fatal(err)
				}
				res := benchBatch(b, srv, 2000, 8, static)
				srv.Close()
				secs += res.secs
				requests += res.sum.Requests
				unresolved += res.sum.Unresolved
				throttled += res.throttled
			}
			n := float64(b.N)
			b.ReportMetric(secs/n, "s/batch")
			b.ReportMetric(float64(requests)/n, "requests/batch")
			b.ReportMetric(float64(throttled)/n, "throttled/batch")
			b.ReportMetric(float64(unresolved)/n, "unresolved/batch")
		})
	}
}

// BenchmarkThrottled deposits 6,000 lines at concurrency 8 into a server
// that accepts 400 writes a second and answers 429 with Retry-After: 1
// above that (repotest's RateLimit), with the adaptive rate and with a
// static one. It reports the records a second (created), as a share of
// the limit, the lines left unresolved, and
// the share of writes answered 429 after the first 3 seconds. One op is one
// batch.
//
//	go test -run '^$' -bench Throttled -benchtime 1x -count 3 ./client/
func BenchmarkThrottled(b *testing.B) {
	const limit, lines = 400, 6000
	for _, static := range []bool{true, false} {
		b.Run(rateName(static), func(b *testing.B) {
			var secs, late, lateThrottled, created, unresolved float64
			for range b.N {
				b.StopTimer()
				srv, err := repotest.NewServer(repotest.Config{RateLimit: limit})
				if err != nil {
					b.Fatal(err)
				}
				res := benchBatch(b, srv, lines, 8, static)
				srv.Close()
				secs += res.secs
				created += float64(res.sum.Created)
				unresolved += float64(res.sum.Unresolved)
				late += float64(res.lateWrites)
				lateThrottled += float64(res.lateThrottled)
			}
			b.ReportMetric(created/secs, "records/s")
			b.ReportMetric(100*created/secs/limit, "%-of-limit")
			b.ReportMetric(unresolved/float64(b.N), "unresolved/batch")
			b.ReportMetric(100*lateThrottled/max(late, 1), "%-429-after-3s")
		})
	}
}

func rateName(static bool) string {
	if static {
		return "rate=static"
	}
	return "rate=adaptive"
}

// batchResult is what benchBatch measured.
type batchResult struct {
	sum       Summary
	secs      float64
	throttled int // answers 429 or 503
	// lateWrites counts the writes answered after the first 3 seconds,
	// lateThrottled those of them answered 429.
	lateWrites, lateThrottled int
}

// benchBatch deposits n lines, the same at every call, into srv at concurrency conc, timed, and
// checks that the server holds no duplicate and one record per line
// settled (and at most one per line unresolved: a write may have committed
// before its answer was lost).
func benchBatch(b *testing.B, srv *repotest.Server, n, conc int, static bool) batchResult {
	store, err := dedup.Open(filepath.Join(b.TempDir(), "deposit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var (
		mu    sync.Mutex
		res   batchResult
		start time.Time
	)
	c, err := New(Config{
		Target: put.Target{Endpoint: srv.URL}, Store: store, StaticRate: static,
		Retry: backoff.Policy{MaxAttempts: 10},
		Hooks: Hooks{OnRequest: func(e RequestEvent) {
			if e.Method != http.MethodPut {
				return
			}
			throttled := e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable
			mu.Lock()
			defer mu.Unlock()
			if throttled {
				res.throttled++
			}
			if time.Since(start) > 3*time.Second {
				res.lateWrites++
				if e.Status == http.StatusTooManyRequests {
					res.lateThrottled++
				}
			}
		}},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start = time.Now()
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for i := range n {
			if !yield(Item{Line: int64(i), Payload: benchPayload("throttle", i)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: conc})
	res.secs = time.Since(start).Seconds()
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	st := srv.Stats()
	settled := int64(sum.Created + sum.Existing)
	if st.Duplicates != 0 || st.Records < settled || st.Records > settled+int64(sum.Unresolved) {
		b.Fatalf("server: %d records, %d duplicates; client: %d created, %d existing, %d unresolved",
			st.Records, st.Duplicates, sum.Created, sum.Existing, sum.Unresolved)
	}
	res.sum = sum
	return res
}
