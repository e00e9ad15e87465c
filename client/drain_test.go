package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/target/put"
)

// A batch that is stopped while its items wait out a Retry-After sends no
// request afterwards: the wait listens to the drain, not only to the
// context (which outlives the stop by the grace period). The batch is
// stopped once every item has had its 503 and begun its wait, so that no
// request is in flight then; the 10 s Retry-After ends well within the
// grace period, so a wait deaf to the drain would send again.
func TestStoppedBatchSendsNoRetryAfterItsWait(t *testing.T) {
	const workers, items = 4, 20
	var (
		stopped   atomic.Bool
		afterStop atomic.Int32
		mu        sync.Mutex
		waiting   = map[string]bool{}
		allWait   = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopped.Load() {
			afterStop.Add(1)
		}
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	c, err := New(Config{
		Target: put.Target{Endpoint: srv.URL},
		Store:  openStore(t),
		// Retry-After: 10 is honoured (the cap is above it), and the limits
		// leave room for many retries.
		Retry: backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Second, MaxAttempts: 10, MaxElapsed: time.Minute},
		Hooks: Hooks{OnRetry: func(e RetryEvent) {
			mu.Lock()
			defer mu.Unlock()
			waiting[e.Key] = true
			if len(waiting) == items {
				close(allWait)
			}
		}},
	})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-allWait
		stopped.Store(true)
		cancel()
	}()
	sum, err := c.Run(ctx, iter.Seq[Item](func(yield func(Item) bool) {
		for i := range items {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}), BatchOptions{Concurrency: workers, Grace: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, stopped.Load(), "the batch ended before every item waited")
	require.Equal(t, int32(0), afterStop.Load(), "requests sent after the batch was stopped")
	require.Equal(t, 0, sum.Created)
	require.Equal(t, items, sum.Total)
	require.Equal(t, items, sum.Unresolved)
	require.Equal(t, items, sum.Requests, "each item sent once, before the stop")
}
