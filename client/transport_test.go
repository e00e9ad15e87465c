package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
)

// A request that fails for good must not cost the other workers their
// keep-alive connections (go-retryablehttp closes its client's idle
// connections when it gives up). Every tenth request is dropped and never
// retried: the batch may open one connection per drop plus one per worker.
// Before the client hid CloseIdleConnections it opened about 1,200 here.
func TestAFailedRequestKeepsTheOthersConnections(t *testing.T) {
	var conns, n atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%10 == 0 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	const workers = 8
	c, err := New(Config{Target: Put{Endpoint: srv.URL}, Store: openStore(t), Retry: backoff.Policy{MaxAttempts: 1}})
	require.NoError(t, err)
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for i := range 2000 {
			if !yield(Item{Payload: fmt.Appendf(nil, `{"i":%d}`, i)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: workers})
	require.NoError(t, err)
	require.Equal(t, 200, sum.Unresolved, "every tenth request dropped")
	require.LessOrEqual(t, conns.Load(), int64(sum.Unresolved+2*workers))
}
