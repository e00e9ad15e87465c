package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/target/put"
)

// An item waiting out a Retry-After holds no slot: at concurrency 1 the
// items after it are sent while it waits, and still no two requests are
// ever in flight at once.
func TestAnItemWaitingToRetryHoldsNoSlot(t *testing.T) {
	var (
		mu          sync.Mutex
		arrivals    []string
		inFlight    int
		maxInFlight int
		slowSeen    bool
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		arrivals = append(arrivals, name)
		first := !slowSeen && len(arrivals) == 1
		slowSeen = slowSeen || first
		mu.Unlock()
		time.Sleep(time.Millisecond) // long enough for overlapping requests to show
		mu.Lock()
		inFlight--
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)

	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t),
		Retry: backoff.Policy{Base: time.Millisecond, Cap: 2 * time.Second, MaxAttempts: 3, MaxElapsed: time.Minute}})
	require.NoError(t, err)
	const n = 6
	keys := make(map[string]int64)
	items := func(yield func(Item) bool) {
		for i := range n {
			p := fmt.Appendf(nil, `{"n":%d}`, i)
			k, err := c.Key(p)
			if err != nil {
				panic(err)
			}
			keys[k.Key] = int64(i + 1)
			if !yield(Item{Line: int64(i + 1), Payload: p}) {
				return
			}
		}
	}
	sum, err := c.Run(context.Background(), items, BatchOptions{Concurrency: 1})
	require.NoError(t, err)
	require.Equal(t, n, sum.Created)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, maxInFlight, "concurrency 1 bounds the requests in flight")
	require.Len(t, arrivals, n+1)
	lines := make([]int64, len(arrivals))
	for i, a := range arrivals {
		lines[i] = keys[a]
	}
	// A wait that held the slot would let nothing through until the retry;
	// an idle machine sends all five others within the second, a loaded
	// one at least the next.
	require.NotEqual(t, lines[0], lines[1], "no item was sent while the one that met the 503 waited: %v", lines)
	sent := map[int64]int{}
	for _, l := range lines {
		sent[l]++
	}
	require.Equal(t, 2, sent[lines[0]], "the item that met the 503 is sent twice, the others once: %v", lines)
	require.Len(t, sent, n, "%v", lines)
}

// A batch whose first answer stops it has begun no more items than its
// slots: the items waiting for a retry are what the extra workers are for,
// and none waited.
func TestABatchStoppedByItsFirstAnswerBeganOnlyItsSlots(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Retry: fastRetry})
	require.NoError(t, err)
	items := func(yield func(Item) bool) {
		for i := range 200 {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}
	_, err = c.Run(context.Background(), items, BatchOptions{Concurrency: 2})
	require.ErrorIs(t, err, ErrStopRun)
	counts, err := store.Count(context.Background(), "")
	require.NoError(t, err)
	require.LessOrEqual(t, counts.Pending, 2)
}
