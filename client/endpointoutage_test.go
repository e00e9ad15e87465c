package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/restart"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// restartable is a reference repository served by a restart.Server: a
// server that restarts, its records kept.
type restartable struct {
	*restart.Server
	h *repotest.Handler
}

func newRestartable(t *testing.T, cfg repotest.Config) *restartable {
	t.Helper()
	h, err := repotest.NewHandler(cfg)
	require.NoError(t, err)
	srv, err := restart.New(h)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return &restartable{Server: srv, h: h}
}

// outageEvents records a client's endpoint outage events.
type outageEvents struct {
	mu     sync.Mutex
	events []EndpointOutageEvent
}

func (o *outageEvents) add(e EndpointOutageEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *outageEvents) all() []EndpointOutageEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]EndpointOutageEvent(nil), o.events...)
}

// closeAfterCreates returns an OnRequest hook that closes srv once it
// has answered n creates.
func closeAfterCreates(srv *restartable, n int) func(RequestEvent) {
	var mu sync.Mutex
	created := 0
	return func(e RequestEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.Status == http.StatusCreated {
			if created++; created == n {
				srv.Close()
			}
		}
	}
}

// The server restarts mid-run: closed after 50 creates, it refuses
// connections until it listens again on the same port, which it does once
// the client says it is waiting. The batch waits the outage out (told once
// that it began and once that it ended) and ends with every item settled
// and one record each; before, the refusals spent the retry budget and
// left most items unresolved within half a second.
func TestAnEndpointThatRestartsMidRunIsWaitedOut(t *testing.T) {
	srv := newRestartable(t, repotest.Config{Latency: 2 * time.Millisecond})
	store := openStore(t)
	var events outageEvents
	var reopen sync.Once
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Hooks: Hooks{
		OnRequest: closeAfterCreates(srv, 50),
		OnEndpointOutage: func(e EndpointOutageEvent) {
			events.add(e)
			if !e.Done {
				reopen.Do(func() {
					if err := srv.Open(); err != nil {
						t.Error(err)
					}
				})
			}
		},
	}})
	require.NoError(t, err)
	const n = 300
	sum, err := c.Run(context.Background(), items(chaosPayloads(n)), BatchOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, sum.Unresolved)
	require.Equal(t, n, sum.Created+sum.Existing)

	got := events.all()
	require.Len(t, got, 2, "one event as the outage begins, one as it ends: %+v", got)
	require.False(t, got[0].Done)
	var dial *net.OpError
	require.ErrorAs(t, got[0].Err, &dial, "the first connection not made: %v", got[0].Err)
	require.Equal(t, "dial", dial.Op)
	require.Equal(t, DefaultEndpointOutage, got[0].Budget)
	require.True(t, got[1].Done)

	st := srv.h.Stats()
	require.Equal(t, int64(n), st.Records)
	require.Equal(t, int64(0), st.Duplicates)
	counts, err := store.Count(context.Background(), "")
	require.NoError(t, err)
	require.Equal(t, dedup.Counts{Done: n}, counts)
}

// An endpoint that answered and then refuses connections for longer than
// Config.EndpointOutage stops the batch: one item is delivered with
// ErrEndpointUnavailable, the others waiting are interrupted, and only
// the intents of requests that may have reached the server (cut off as
// it closed) stay pending. A negative EndpointOutage stops at the first
// refusal, without waiting.
func TestAnEndpointOutagePastItsBudgetStopsTheRun(t *testing.T) {
	for _, tt := range []struct {
		name   string
		budget time.Duration
		waits  bool
	}{
		{name: "past the budget", budget: 200 * time.Millisecond, waits: true},
		{name: "no budget", budget: -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRestartable(t, repotest.Config{Latency: 2 * time.Millisecond})
			store := openStore(t)
			var events outageEvents
			closeAt := closeAfterCreates(srv, 50)
			var mu sync.Mutex
			cutOff := map[string]bool{} // keys with a request that may have reached the server unanswered
			// A connection per request: net/http sends a request written
			// to a kept-alive connection found closed again on a new one,
			// and the hook would see only that one's refusal, though the
			// first write may have reached the server.
			oneShot := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, EndpointOutage: tt.budget, HTTPClient: oneShot, Hooks: Hooks{
				OnRequest: func(e RequestEvent) {
					closeAt(e)
					var dial *net.OpError
					if e.Err != nil && !(errors.As(e.Err, &dial) && dial.Op == "dial") {
						mu.Lock()
						cutOff[e.Key] = true
						mu.Unlock()
					}
				},
				OnEndpointOutage: events.add,
			}})
			require.NoError(t, err)
			var stopped int
			sum, err := c.Run(context.Background(), items(chaosPayloads(300)), BatchOptions{OnResult: func(r ItemResult) {
				if errors.Is(r.Err, ErrEndpointUnavailable) {
					stopped++
				}
			}})
			require.ErrorIs(t, err, ErrEndpointUnavailable)
			require.ErrorIs(t, err, ErrStopRun)
			require.Equal(t, 1, stopped, "one item says why the run stopped")
			require.Positive(t, sum.Unresolved)
			if tt.waits {
				require.Len(t, events.all(), 1, "the outage began, and never ended")
			} else {
				require.Empty(t, events.all(), "no outage is waited out")
			}

			pending := 0
			for rec, err := range store.List(context.Background(), "", dedup.StatePending) {
				require.NoError(t, err)
				require.True(t, cutOff[rec.Key], "%s stays pending, though every request of its was refused", rec.Key)
				pending++
			}
			require.Less(t, pending, sum.Unresolved, "the items whose every request was refused keep no intent")
		})
	}
}
