package client

import (
	"context"
	"fmt"
	"iter"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// TestRunAnswersFinishedKeysFromTheStoreAndSendsTheRest runs a batch whose
// first half an earlier run finished, one key of it left pending and one
// failed: the finished ones are replayed without a request or a lease, the
// rest go through the engine as in a first run.
func TestRunAnswersFinishedKeysFromTheStoreAndSendsTheRest(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	store := openStore(t)
	c, err := New(Config{Target: Put{Endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	ctx := context.Background()
	payload := func(i int) []byte { return fmt.Appendf(nil, `{"title":"item %d"}`, i) }
	items := func(n int) iter.Seq[Item] {
		return func(yield func(Item) bool) {
			for i := range n {
				if !yield(Item{Line: int64(i + 1), Payload: payload(i)}) {
					return
				}
			}
		}
	}
	sum, err := c.Run(ctx, items(1000), BatchOptions{Concurrency: 4})
	require.NoError(t, err)
	require.Equal(t, 1000, sum.Created)
	keyOf := func(i int) string {
		k, err := c.Key(payload(i))
		require.NoError(t, err)
		return k.Key
	}
	// Line 1001 pending as if a run had died after its intent, line 1002
	// recorded failed.
	_, err = store.Begin(ctx, c.StoreTarget(), keyOf(1000), nil)
	require.NoError(t, err)
	_, err = store.Fail(ctx, c.StoreTarget(), keyOf(1001), dedup.Failure{Status: 422, Problem: "refused"})
	require.NoError(t, err)
	before, err := store.Lookup(ctx, c.StoreTarget(), keyOf(7))
	require.NoError(t, err)

	again, err := New(Config{Target: Put{Endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	requests := srv.Stats().Requests
	got := map[int64]ItemResult{}
	sum, err = again.Run(ctx, items(2000), BatchOptions{Concurrency: 4, OnResult: func(r ItemResult) { got[r.Line] = r }})
	require.NoError(t, err)
	require.Equal(t, 1000, sum.Replayed)
	require.Equal(t, 999, sum.Created, "lines 1001 and 1003-2000")
	require.Equal(t, 1, sum.Recovered, "line 1001 was settled by the engine")
	require.Equal(t, 1, sum.Failed, "line 1002's recorded failure is answered")
	require.Equal(t, int64(999), srv.Stats().Requests-requests, "one request for each line created")
	require.Equal(t, 999, sum.Requests)
	r := got[8]
	require.Equal(t, OutcomeReplayed, r.Outcome)
	require.Equal(t, before.Identifier, r.Identifier)
	require.Equal(t, before.Status, r.Status)
	require.Zero(t, r.Requests)
	after, err := store.Lookup(ctx, c.StoreTarget(), keyOf(7))
	require.NoError(t, err)
	require.Equal(t, before, after, "a replayed key is neither claimed nor written")
}
