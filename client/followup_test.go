package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// dropFirstWrite serves h, but answers the first write of key by committing
// it and then closing the connection unanswered: an ambiguous failure.
func dropFirstWrite(t *testing.T, h http.Handler, key string) *httptest.Server {
	var dropped atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.TrimPrefix(r.URL.Path, "/") == key && dropped.CompareAndSwap(false, true) {
			h.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// lines yields n items: distinct payloads, but for the lines in at, which
// carry the payload twice with their members in turn.
func lines(n int, twice [2]string, at ...int64) iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for i := int64(1); i <= int64(n); i++ {
			body := fmt.Sprintf(`{"title":"record %d","n":%d}`, i, i)
			if k := slices.Index(at, i); k >= 0 {
				body = twice[k%2]
			}
			if !yield(Item{Line: i, Payload: []byte(body)}) {
				return
			}
		}
	}
}

func TestAnUnresolvedItemIsDeliveredAtOnceAndFollowedUpWhenItsKeySettles(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	twice := [2]string{`{"title":"given twice","n":-1}`, `{ "n": -1, "title": "given twice" }`}
	key := keyOf(t, twice[0])
	srv := dropFirstWrite(t, h, key)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t),
		Retry: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 1}})
	require.NoError(t, err)

	// Line 20 meets the dropped answer and, with one attempt, is
	// unresolved; line 150 carries the same payload and settles the key.
	var got []ItemResult
	sum, err := c.Run(context.Background(), lines(200, twice, 20, 150), BatchOptions{
		OnResult: func(r ItemResult) { got = append(got, r) }})
	require.NoError(t, err)

	first, followUp, settler := -1, -1, -1
	for i, r := range got {
		switch {
		case r.Line == 20 && !r.FollowUp:
			first = i
		case r.Line == 20:
			followUp = i
		case r.Line == 150:
			settler = i
		default:
			require.False(t, r.FollowUp, "line %d was never unresolved", r.Line)
		}
	}
	require.Len(t, got, 201, "one result per line, and one follow-up")
	require.NotEqual(t, -1, first)
	require.Equal(t, OutcomeUnresolved, got[first].Outcome, "line 20 is first delivered unresolved")
	require.Equal(t, key, got[first].Key)
	require.Less(t, first, settler, "line 20's unresolved result is delivered as soon as it is known, before line 150 settles its key")
	require.Equal(t, settler+1, followUp, "the follow-up comes right after the result that settled the key")

	fu := got[followUp]
	require.Equal(t, OutcomeCreated, got[settler].Outcome, "line 150 finds the record line 20's request committed: this deposit's own")
	require.Equal(t, OutcomeReplayed, fu.Outcome)
	require.NoError(t, fu.Err)
	require.Equal(t, key, fu.Key)
	require.Equal(t, got[settler].Identifier, fu.Identifier)
	require.Equal(t, 1, fu.Requests, "the follow-up counts the request line 20 sent")

	require.Equal(t, Summary{Total: 200, Created: 199, Replayed: 1,
		Requests: int(h.Stats().Requests), Elapsed: sum.Elapsed}, sum, "line 20 is counted once, settled")
	require.Equal(t, int64(199), h.Stats().Records, "one record per distinct payload")
}

// A key settled by a terminal answer follows its unresolved line up as
// failed, with that answer's error; strictly in input order, the unresolved
// result comes first.
func TestAFollowUpOfAFailedKeyIsFailed(t *testing.T) {
	var writes atomic.Int64
	other := keyOf(t, `{"other":1}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, other):
			w.WriteHeader(http.StatusCreated)
		case writes.Add(1) == 1:
			w.WriteHeader(http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusUnprocessableEntity)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t),
		Retry: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 1}})
	require.NoError(t, err)
	items := []Item{{Line: 1, Payload: []byte(`{"other":1}`)}, {Line: 2, Payload: []byte(payload)}, {Line: 3, Payload: []byte(payload)}}
	var got []ItemResult
	sum, err := c.Run(context.Background(), slices.Values(items), BatchOptions{Concurrency: 1, Waiting: -1, OnResult: func(r ItemResult) { got = append(got, r) }})
	require.NoError(t, err)
	require.Len(t, got, 4)
	require.Equal(t, []int64{1, 2, 3, 2}, []int64{got[0].Line, got[1].Line, got[2].Line, got[3].Line})
	require.Equal(t, OutcomeUnresolved, got[1].Outcome)
	require.False(t, got[1].FollowUp)
	require.Equal(t, OutcomeFailed, got[2].Outcome)
	require.True(t, got[3].FollowUp)
	require.Equal(t, OutcomeFailed, got[3].Outcome)
	require.ErrorIs(t, got[3].Err, ErrTerminal)
	require.Equal(t, http.StatusUnprocessableEntity, got[3].Status)
	require.Equal(t, 3, sum.Total)
	require.Equal(t, 2, sum.Failed, "line 2 is counted by its final result")
	require.Zero(t, sum.Unresolved)
}

// keyOf is the key of the payload p under the default form.
func keyOf(t *testing.T, p string) string {
	t.Helper()
	b, err := canonical.JCS([]byte(p))
	require.NoError(t, err)
	return canonical.Key(b)
}

// The lines kept for follow-ups are the unresolved ones only, forgotten
// once settled, and never more than the bound: a batch whose 100,000 items
// all end unresolved keeps no more than maxUnsettledLines of them.
func TestUnsettledLinesStayBounded(t *testing.T) {
	u := newUnsettledLines(maxUnsettledLines)
	const n = 100_000
	for i := range n {
		u.add(ItemResult{Line: int64(i + 1), Result: Result{Key: fmt.Sprintf("%064x", i), Outcome: OutcomeUnresolved, Requests: 1}, Err: ErrUnresolved})
	}
	require.Equal(t, maxUnsettledLines, u.len())
	require.Len(t, u.byKey, maxUnsettledLines)

	settled := u.settle(fmt.Sprintf("%064x", 0))
	require.Len(t, settled, 1)
	require.Equal(t, int64(1), settled[0].line)
	require.Equal(t, maxUnsettledLines-1, u.len(), "a settled key is forgotten")
	require.Empty(t, u.settle(fmt.Sprintf("%064x", 0)), "and followed up once")
	require.Empty(t, u.settle(fmt.Sprintf("%064x", n-1)), "a line past the bound was not kept")

	for i := 1; i < maxUnsettledLines; i++ {
		u.settle(fmt.Sprintf("%064x", i))
	}
	require.Zero(t, u.len())
	require.Empty(t, u.byKey)
}
