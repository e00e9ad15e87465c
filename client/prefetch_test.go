package client

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
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
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
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

	again, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
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

// countingStore is a SQLite store that counts the look-ups of the
// look-ahead (LookupDone) apart from the engine's.
type countingStore struct {
	*dedup.SQLite
	lookupDone atomic.Int64
}

func (s *countingStore) LookupDone(ctx context.Context, target string, keys []string, dst []dedup.Record) ([]dedup.Record, error) {
	s.lookupDone.Add(1)
	return s.SQLite.LookupDone(ctx, target, keys, dst)
}

// TestLookAheadAnswersFinishedItemsAsTheEngineDoes replays a finished
// batch through the look-ahead, with and without a Debug logger, and
// strictly in input order (one slot, no waiting), where the engine answers
// every item: each line gets the same result all three ways, for a
// one-step target and for InvenioRDM (several rows per deposit, a record
// id beside the DOI). At Debug the look-ahead logs each replay as the
// engine does.
func TestLookAheadAnswersFinishedItemsAsTheEngineDoes(t *testing.T) {
	const n = 300
	// Each target's start returns a function that makes clients of one
	// server.
	put := func(t *testing.T) func(Store, *slog.Logger) *Client {
		srv, err := repotest.NewServer(repotest.Config{})
		require.NoError(t, err)
		t.Cleanup(srv.Close)
		return func(store Store, logger *slog.Logger) *Client {
			c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Logger: logger})
			require.NoError(t, err)
			return c
		}
	}
	invenio := func(t *testing.T) func(Store, *slog.Logger) *Client {
		srv := startInvenioStub(t, repotest.InvenioConfig{})
		return func(store Store, logger *slog.Logger) *Client {
			c := invenioClient(t, srv, store, invenio.Target{}, fastRetry)
			c.log = logger
			return c
		}
	}
	for _, tc := range []struct {
		name    string
		start   func(*testing.T) func(Store, *slog.Logger) *Client
		payload func(int) []byte
	}{
		{"put", put, func(i int) []byte { return fmt.Appendf(nil, `{"title":"item %d"}`, i) }},
		{"invenio", invenio, invenioRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.start(t)
			store := &countingStore{SQLite: openStore(t)}
			var logs bytes.Buffer
			debug := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c := client(store, slog.New(slog.DiscardHandler))
			var its []Item
			for i := range n {
				its = append(its, Item{Line: int64(i + 1), Payload: tc.payload(i)})
			}
			sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4})
			require.NoError(t, err)
			require.Equal(t, n, sum.Created)

			replay := func(c *Client, opts BatchOptions) map[int64]ItemResult {
				got := map[int64]ItemResult{}
				opts.OnResult = func(r ItemResult) { got[r.Line] = r }
				sum, err := c.Run(context.Background(), seqOf(its), opts)
				require.NoError(t, err)
				require.Equal(t, n, sum.Replayed)
				require.Zero(t, sum.Requests)
				return got
			}
			before := store.lookupDone.Load()
			ahead := replay(c, BatchOptions{Concurrency: 4})
			require.Greater(t, store.lookupDone.Load(), before, "the look-ahead answered")
			logged := replay(client(store, debug), BatchOptions{Concurrency: 4})
			before = store.lookupDone.Load()
			engine := replay(c, BatchOptions{Concurrency: 1, Waiting: -1})
			require.Equal(t, before, store.lookupDone.Load(), "the engine answered")

			require.Equal(t, engine, ahead)
			require.Equal(t, engine, logged)
			require.Equal(t, n, strings.Count(logs.String(), "msg=replay "), logs.String())
			if tc.name == "invenio" {
				require.NotEmpty(t, engine[1].RecordID)
			}
		})
	}
}
