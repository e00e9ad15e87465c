package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

func benchPayload(run string, i int) []byte {
	return fmt.Appendf(nil, `{"title":"Series %s-%d","creators":["Vega, A.","Ng, B."],"year":2026,"size":%d.25,"keywords":["reef","temperature","time series"]}`, run, i, i)
}

// BenchmarkDeposit compares the client (keys, store, classification, retries
// armed) with a plain net/http loop that sends the same canonical bodies to
// the same server with If-None-Match: * over a keep-alive client, at the same
// concurrency. One op is one new record. The floor is the plain loop plus
// the least any client that keeps the crash rules must write: each group of
// intents committed (one ClaimMany) before its requests, each outcome
// committed (ConfirmMany of whatever has arrived) after its answer. It is
// what the store costs, apart from the client's own work.
func BenchmarkDeposit(b *testing.B) {
	for _, latency := range []time.Duration{0, 2 * time.Millisecond, 20 * time.Millisecond} {
		for _, conc := range []int{1, 8} {
			name := fmt.Sprintf("latency=%s/concurrency=%d", latency, conc)
			b.Run("client/"+name, func(b *testing.B) { benchClient(b, conc, latency) })
			b.Run("plain/"+name, func(b *testing.B) { benchPlain(b, conc, latency, nil) })
			b.Run("floor/"+name, func(b *testing.B) { benchPlain(b, conc, latency, newFloorWrites(b)) })
		}
	}
}

var benchRun atomic.Int64

func benchClient(b *testing.B, conc int, latency time.Duration) {
	srv, err := repotest.NewServer(repotest.Config{Latency: latency})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	store, err := dedup.Open(filepath.Join(b.TempDir(), "deposit.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	run := fmt.Sprint(benchRun.Add(1))
	b.ResetTimer()
	cpu := processCPU()
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for i := range b.N {
			if !yield(Item{Line: int64(i), Payload: benchPayload(run, i)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: conc})
	b.StopTimer()
	cpu = processCPU() - cpu
	if err != nil || sum.Created != b.N {
		b.Fatalf("created %d of %d: %v", sum.Created, b.N, err)
	}
	reportDeposits(b, cpu)
}

// floorWrites are the floor's store writes: intents claimed in groups of
// floorGroup before their requests, outcomes recorded in groups (whatever
// has arrived) after their answers. A nil *floorWrites writes nothing: the
// plain loop.
type floorWrites struct {
	store *dedup.SQLite
	done  chan string
	wg    sync.WaitGroup
}

// floorGroup is how many intents the floor claims in one transaction.
const floorGroup = 64

const floorTarget = "floor"

// newFloorWrites opens the floor's store, closed at the end of b.
func newFloorWrites(b *testing.B) *floorWrites {
	store, err := dedup.Open(filepath.Join(b.TempDir(), "deposit.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	return &floorWrites{store: store}
}

// feed sends the index of each of keys to next, then closes it; the floor
// claims each group of intents before it sends their indices, and starts
// recording outcomes.
func (f *floorWrites) feed(b *testing.B, keys []string, next chan<- int) {
	defer close(next)
	if f == nil {
		for i := range keys {
			next <- i
		}
		return
	}
	f.done = make(chan string, 1024)
	f.wg.Go(func() { f.complete(b) })
	lease := dedup.Lease{Owner: "floor", TTL: time.Minute}
	intents := make([]dedup.Intent, 0, floorGroup)
	for from := 0; from < len(keys); from += floorGroup {
		intents = intents[:0]
		for _, k := range keys[from:min(from+floorGroup, len(keys))] {
			intents = append(intents, dedup.Intent{Ref: dedup.Ref{Target: floorTarget, Key: k}})
		}
		if _, err := f.store.ClaimMany(context.Background(), lease, intents); err != nil {
			b.Error(err)
			return
		}
		for i := range intents {
			next <- from + i
		}
	}
}

// complete records the outcomes sent to done until it is closed.
func (f *floorWrites) complete(b *testing.B) {
	confirm := func(k string) dedup.Confirmation {
		return dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: k, Status: 201}
	}
	for key := range f.done {
		group := map[string]dedup.Confirmation{key: confirm(key)}
	more:
		for len(group) < 1024 {
			select {
			case k, ok := <-f.done:
				if !ok {
					break more
				}
				group[k] = confirm(k)
			default:
				break more
			}
		}
		if _, err := f.store.ConfirmMany(context.Background(), floorTarget, group); err != nil {
			b.Error(err) // and go on draining done, so that no sender blocks
		}
	}
}

// record hands over the outcome of key.
func (f *floorWrites) record(key string) {
	if f != nil {
		f.done <- key
	}
}

// finish waits for the outcomes and checks that n rows are done.
func (f *floorWrites) finish(b *testing.B, n int) {
	if f == nil {
		return
	}
	close(f.done)
	f.wg.Wait()
	if got, err := f.store.Count(context.Background(), floorTarget); err != nil || got.Done != n {
		b.Fatalf("floor: %d of %d done: %v", got.Done, n, err)
	}
}

// benchPlain runs the plain loop; with floor, the floor: the loop with the
// store's writes.
func benchPlain(b *testing.B, conc int, latency time.Duration, floor *floorWrites) {
	srv, err := repotest.NewServer(repotest.Config{Latency: latency})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	run := fmt.Sprint(benchRun.Add(1))
	keys, bodies := make([]string, b.N), make([][]byte, b.N)
	for i := range keys {
		body, err := canonical.JCS(benchPayload(run, i))
		if err != nil {
			b.Fatal(err)
		}
		keys[i], bodies[i] = canonical.Key(body), body
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	hc := &http.Client{Transport: t}
	next := make(chan int, floorGroup)
	var wg sync.WaitGroup
	b.ResetTimer()
	cpu := processCPU()
	go floor.feed(b, keys, next)
	for range conc {
		wg.Go(func() {
			for i := range next {
				r, _ := http.NewRequest(http.MethodPut, srv.URL+"/"+keys[i], bytes.NewReader(bodies[i]))
				r.Header.Set("If-None-Match", "*")
				r.Header.Set("Content-Type", "application/json")
				// A failure is reported and the loop goes on, so that the
				// feed never blocks.
				resp, err := hc.Do(r)
				if err != nil {
					b.Error(err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("status %d", resp.StatusCode)
					continue
				}
				floor.record(keys[i])
			}
		})
	}
	wg.Wait()
	floor.finish(b, len(keys))
	b.StopTimer()
	reportDeposits(b, processCPU()-cpu)
}

// reportDeposits reports the rate of deposits and the process's CPU time
// per deposit, the client's and the server's together: without latency a
// run is bound by the machine's cores, so what it spends is what limits
// its rate.
func reportDeposits(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deposits/s")
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/deposit")
	}
}

// BenchmarkReplay replays 100,000 finished items, every one answered from
// the store with no request, and in the same iterations, alternated,
// computes their keys in one goroutine as `deposit key` does: replay-x is
// the replay's time over the keys'. Each replay opens the store afresh, as
// a new `deposit run` process does: its caches start cold, and the log of
// the writes that filled it has been checkpointed into the file. The
// figures in docs/performance.md come from
//
//	go test -run '^$' -bench 'Replay$' -benchtime 5x ./client
func BenchmarkReplay(b *testing.B) {
	const n = 100_000
	srv, err := repotest.NewServer(repotest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	path := filepath.Join(b.TempDir(), "deposit.db")
	store, err := dedup.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	if err != nil {
		b.Fatal(err)
	}
	payloads := make([][]byte, n)
	batch := map[string]dedup.Confirmation{}
	for i := range payloads {
		payloads[i] = benchPayload("replay", i)
		k, err := c.Key(payloads[i])
		if err != nil {
			b.Fatal(err)
		}
		batch[k.Key] = dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: fmt.Sprintf("10.5072/r%d", i), Status: 201}
		if len(batch) == 5000 || i == n-1 {
			if _, err := store.CompleteMany(context.Background(), c.StoreTarget(), batch); err != nil {
				b.Fatal(err)
			}
			batch = map[string]dedup.Confirmation{}
		}
	}
	if err := store.Close(); err != nil {
		b.Fatal(err)
	}
	var replays, keys []float64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		for _, p := range payloads {
			if _, err := c.Key(p); err != nil {
				b.Fatal(err)
			}
		}
		keys = append(keys, time.Since(t0).Seconds())
		t0 = time.Now()
		store, err := dedup.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		rc, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
		if err != nil {
			b.Fatal(err)
		}
		sum, err := rc.Run(context.Background(), func(yield func(Item) bool) {
			for i, p := range payloads {
				if !yield(Item{Line: int64(i), Payload: p}) {
					return
				}
			}
		}, BatchOptions{Concurrency: 8})
		if cerr := store.Close(); cerr != nil {
			b.Fatal(cerr)
		}
		replays = append(replays, time.Since(t0).Seconds())
		if err != nil || sum.Replayed != n || sum.Requests != 0 {
			b.Fatalf("replayed %d of %d with %d requests: %v", sum.Replayed, n, sum.Requests, err)
		}
	}
	b.StopTimer()
	replay, key := median(replays), median(keys)
	b.ReportMetric(n/replay, "items/s")
	b.ReportMetric(replay, "replay-s")
	b.ReportMetric(key, "key-s")
	b.ReportMetric(replay/key, "replay-x")
	if got := srv.Stats().Requests; got != 0 {
		b.Fatalf("%d requests during replay", got)
	}
}

// median is the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// BenchmarkLineReader measures reading JSON Lines into items: the cost per
// line before any key is computed.
func BenchmarkLineReader(b *testing.B) {
	var buf bytes.Buffer
	for i := range 10000 {
		fmt.Fprintf(&buf, `{"title":"record %d","n":%d,"keywords":["a","b","c"]}`+"\n", i, i)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		lr := NewLineReader(bytes.NewReader(data), DefaultMaxLineBytes)
		for range lr.Items() {
		}
	}
}
