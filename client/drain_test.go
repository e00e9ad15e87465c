package client

import (
	"context"
	"errors"
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
	"github.com/depositkit/deposit/dedup"
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
	require.Equal(t, 0, sum.Retries, "a retry decided on, whose wait the stop ended, is none")
}

// A batch stopped while requests wait for their turn at the rate writes
// none of them, and still records the answer of the request already sent.
// At 0.2 requests a second the first request goes at once and the three
// behind it, holding their slots, wait 5 s each for the limiter; the
// server holds the first until the batch has said it stopped, so that
// exactly one request is in flight then, whatever the machine's speed. A
// gate that only the slots kept would let the three out, one every 5 s,
// within the minute of grace.
func TestAStoppedBatchWritesNoRequestThatWaitedForItsRate(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var (
		arrived  atomic.Int32
		stopped  = make(chan StopEvent, 1)
		why      = errors.New("the operator asked")
		released = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 1 {
			cancel(why)
			<-released
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)

	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Rate: 0.2, StaticRate: true})
	require.NoError(t, err)
	var created string
	start := time.Now()
	sum, err := c.Run(ctx, iter.Seq[Item](func(yield func(Item) bool) {
		for i := range 8 {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}), BatchOptions{
		Concurrency: 4,
		Grace:       time.Minute,
		OnStop: func(e StopEvent) {
			stopped <- e
			close(released)
		},
		OnResult: func(r ItemResult) {
			if r.Outcome == OutcomeCreated {
				created = r.Key
			}
		},
	})
	require.ErrorIs(t, err, context.Canceled)
	e := <-stopped
	require.ErrorIs(t, e.Reason, why, "the event names the canceller's cause")
	require.Equal(t, 1, e.InFlight, "the request the server holds is awaited")
	require.WithinRange(t, e.Deadline, time.Now(), start.Add(time.Minute+time.Second), "the grace ends a minute after the stop")
	require.Equal(t, int32(1), arrived.Load(), "requests written after the batch stopped")
	require.Equal(t, 1, sum.Created, "the answer of the request in flight is recorded")
	require.Equal(t, 1, sum.Requests)
	require.Equal(t, 0, sum.Retries)
	rec, err := store.Lookup(t.Context(), c.StoreTarget(), created)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, rec.State)
	for rec, err := range store.List(t.Context(), c.StoreTarget(), dedup.StatePending) {
		require.NoError(t, err)
		require.Fail(t, "an intent held back at the gate is released", rec.Key)
	}
}
