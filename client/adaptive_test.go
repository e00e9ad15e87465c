package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// throttleFirst answers 503 to the first n PUTs for each path, 201 after.
type throttleFirst struct {
	n    int
	mu   sync.Mutex
	seen map[string]int
}

func (h *throttleFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.seen[r.URL.Path]++
	k := h.seen[r.URL.Path]
	h.mu.Unlock()
	if k <= h.n {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func adaptiveItems(n int) func(func(Item) bool) {
	return func(yield func(Item) bool) {
		for i := range n {
			if !yield(Item{Line: int64(i + 1), Payload: benchPayload("adaptive", i)}) {
				return
			}
		}
	}
}

func TestAdaptiveRateThrottlesSpendNoRetryBudgetWhileTheRateCanFall(t *testing.T) {
	for _, adaptive := range []bool{false, true} {
		name := map[bool]string{false: "static: the budget runs out", true: "adaptive: every item created"}[adaptive]
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(&throttleFirst{n: 2, seen: map[string]int{}})
			defer srv.Close()
			c, err := New(Config{
				Target: put.Target{Endpoint: srv.URL}, Store: openStore(t), Retry: fastRetry,
				Budget: backoff.NewBudget(10), StaticRate: !adaptive,
			})
			require.NoError(t, err)
			sum, err := c.Run(context.Background(), adaptiveItems(4), BatchOptions{Concurrency: 1})
			require.NoError(t, err)
			if adaptive {
				require.Equal(t, 4, sum.Created, "created")
			} else {
				require.Positive(t, sum.Unresolved, "unresolved: 2 retries in the budget, 8 needed")
			}
		})
	}
}

func TestAdaptiveRateStopsARunThrottledAtItsLowestRate(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{Faults: "503=1:retry-after=1"})
	require.NoError(t, err)
	defer srv.Close()
	// A ceiling of 1 request a second is the adaptive rate's lowest: it
	// starts there, as it would after a server had throttled it down.
	c, err := New(Config{
		Target: put.Target{Endpoint: srv.URL}, Store: openStore(t), Retry: fastRetry,
		Budget: backoff.NewBudget(10), Rate: 1,
	})
	require.NoError(t, err)
	sum, err := c.Run(context.Background(), adaptiveItems(20), BatchOptions{Concurrency: 2})
	require.ErrorIs(t, err, ErrStopRun)
	require.ErrorIs(t, err, backoff.ErrBudgetExhausted)
	require.Equal(t, sum.Total, sum.Unresolved, "every item read unresolved")
	require.Less(t, sum.Total, 20, "items read: the run stopped before the end")
}
