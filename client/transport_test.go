package client

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
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
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t), Retry: backoff.Policy{MaxAttempts: 1}})
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

// An attempt that gets no answer within the HTTP client's Timeout ends as
// a timeout and is retried: the server holds its first request until the
// client hangs up, and answers the others at once. A loaded machine may
// time out a later attempt too; each one still counts as a retry, and the
// first must have been given up by the client, not by the server.
func TestAnAttemptWithoutAnAnswerInTimeIsRetried(t *testing.T) {
	abandoned := make(chan struct{})
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			// Read the body first: only then does the server notice a
			// client that hangs up.
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			close(abandoned)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t), Retry: fastRetry,
		HTTPClient: &http.Client{Timeout: 100 * time.Millisecond}})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(`{"title":"slow"}`))
	require.NoError(t, err)
	<-abandoned // the client hung up on the request held without an answer
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.GreaterOrEqual(t, res.Requests, 2, "the request without an answer was not retried")
	require.Equal(t, res.Requests-1, res.Retries)
	require.Equal(t, int64(res.Requests), n.Load())
}

// The attempt timeout starts once a request is sent: waiting for the rate
// limit (here 10 requests a second for 12 items, so the last waits about a
// second) is not counted against the 300 ms each attempt has. An attempt
// that timed out while it waited would never reach the server, so every
// attempt counted must have arrived there; a loaded machine may time out
// one that did, and its retry is no failure of this rule.
func TestWaitingForTheRateIsNotPartOfAnAttempt(t *testing.T) {
	var arrived atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t), Retry: fastRetry,
		Rate: 10, StaticRate: true, HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	require.NoError(t, err)
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for i := range 12 {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"i":%d}`, i)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: 8})
	require.NoError(t, err)
	require.Equal(t, 12, sum.Created)
	require.Equal(t, int64(sum.Requests), arrived.Load(), "an attempt timed out while it waited for its turn")
}

// answerAll is a transport that answers every request 200 at once. It
// stands in for a server inside a synctest bubble, where no real network
// runs; it emulates nothing of a repository.
type answerAll struct{}

func (answerAll) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(`{"hits":{"hits":[]}}`)),
		Header: http.Header{}, Request: req}, nil
}

// An InvenioRDM search waits for its rate before it takes a request slot
// and before its attempt timeout starts: a write behind it is sent at once,
// and the search, once its turn comes (100 s later, at 0.01 searches a
// second), is sent and answered rather than failing on a 1 s timeout.
func TestASearchWaitsForItsRateHoldingNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, err := invenio.Target{Endpoint: "http://repo.example/api", SearchRate: 0.01}.Driver()
		require.NoError(t, err)
		hc, _ := newHTTPClient(&http.Client{Transport: answerAll{}, Timeout: time.Second}, d, NoRateLimit, false)
		slots := newRequestSlots(1, t.Context())
		ctx := context.WithValue(t.Context(), slotsKey{}, slots)
		send := func(method, url string) error {
			req, err := http.NewRequestWithContext(ctx, method, url, nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			return resp.Body.Close()
		}
		const search = "http://repo.example/api/user/records?q=x"
		require.NoError(t, send(http.MethodGet, search), "the first search has its turn at once")

		start := time.Now()
		searched := make(chan error, 1)
		var searchedAfter time.Duration
		go func() {
			err := send(http.MethodGet, search)
			searchedAfter = time.Since(start)
			searched <- err
		}()
		synctest.Wait() // the second search waits for its turn
		require.NoError(t, send(http.MethodPost, "http://repo.example/api/records"))
		require.Zero(t, time.Since(start), "the write waited behind the search")
		require.NoError(t, <-searched, "the search failed while it waited for its turn")
		require.Equal(t, 100*time.Second, searchedAfter)
	})
}
