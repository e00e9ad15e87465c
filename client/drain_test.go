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
)

// A batch that is stopped while its items wait out a Retry-After sends no
// request afterwards: the wait listens to the drain, not only to the
// context (which outlives the stop by the grace period).
func TestStoppedBatchSendsNoRetryAfterItsWait(t *testing.T) {
	const workers = 4
	var (
		answered  atomic.Int32
		stopped   atomic.Bool
		afterStop atomic.Int32
		allBusy   = make(chan struct{})
		once      sync.Once
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopped.Load() {
			afterStop.Add(1)
		}
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		if answered.Add(1) == workers {
			once.Do(func() { close(allBusy) })
		}
	}))
	t.Cleanup(srv.Close)

	c, err := New(Config{
		Target: Put{Endpoint: srv.URL},
		Store:  openStore(t),
		// Retry-After: 1 is honoured (the cap is above it), and the limits
		// leave room for many retries.
		Retry: backoff.Policy{Base: time.Millisecond, Cap: 2 * time.Second, MaxAttempts: 10, MaxElapsed: time.Minute},
	})
	require.NoError(t, err)

	items := func(yield func(Item) bool) {
		for i := range 20 {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-allBusy
		// Every worker has its 503 and is waiting out the Retry-After.
		time.Sleep(200 * time.Millisecond)
		stopped.Store(true)
		cancel()
	}()
	sum, err := c.Run(ctx, iter.Seq[Item](items), BatchOptions{Concurrency: workers, Grace: 5 * time.Second})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int32(0), afterStop.Load(), "requests sent after the batch was stopped")
	require.Equal(t, 0, sum.Created)
	require.Equal(t, sum.Total, sum.Unresolved)
}
