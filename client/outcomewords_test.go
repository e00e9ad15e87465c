package client

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

// The words a deposit reports for a record that exists: created when this
// deposit may have made it, existing only when nothing it sent could have.
// The reference repository's faults are real: a drop commits the record,
// then closes the connection without an answer.

// newRepo starts the reference repository for proto with faults.
func newRepo(t *testing.T, proto, faults string) *repotest.Server {
	t.Helper()
	srv, err := repotest.NewServer(repotest.Config{Protocol: repotest.Protocol(proto), Faults: faults})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// newRepoClient is a client of srv with store, sharing srv's transport.
func newRepoClient(t *testing.T, srv *repotest.Server, proto string, store Store, retry backoff.Policy) *Client {
	t.Helper()
	c, err := New(Config{Target: targetFor(proto, srv.URL), Store: store, Retry: retry, Rate: NoRateLimit, HTTPClient: srv.Client()})
	require.NoError(t, err)
	return c
}

func TestOutcomeWords(t *testing.T) {
	ctx := context.Background()
	for _, proto := range []string{protocol.Put, protocol.IdempotencyKey} {
		t.Run(proto, func(t *testing.T) {
			t.Run("an answer lost after the server stored the record is created", func(t *testing.T) {
				srv := newRepo(t, proto, "nth=1:drop")
				res, err := newRepoClient(t, srv, proto, openStore(t), fastRetry).Deposit(ctx, []byte(payload))
				require.NoError(t, err)
				require.Equal(t, 1, res.Retries, "the lost answer was asked again")
				require.Equal(t, OutcomeCreated, res.Outcome, "the server's exists answers this deposit's own first attempt")
				st := srv.Stats()
				require.EqualValues(t, 1, st.Records)
				require.EqualValues(t, 1, st.Replays, "the retry was answered exists")
				require.Zero(t, st.Duplicates)
			})

			t.Run("a record another client deposited first is existing", func(t *testing.T) {
				srv := newRepo(t, proto, "")
				first, err := newRepoClient(t, srv, proto, openStore(t), fastRetry).Deposit(ctx, []byte(payload))
				require.NoError(t, err)
				require.Equal(t, OutcomeCreated, first.Outcome)

				res, err := newRepoClient(t, srv, proto, openStore(t), fastRetry).Deposit(ctx, []byte(payload))
				require.NoError(t, err)
				require.Equal(t, OutcomeExisting, res.Outcome, "nothing this store sent could have made it")
				require.Equal(t, first.Identifier, res.Identifier)
				require.EqualValues(t, 1, srv.Stats().Records)
			})

			t.Run("an intent an earlier run left uncertain is created when settled", func(t *testing.T) {
				srv := newRepo(t, proto, "nth=1:drop")
				store := openStore(t)
				once := backoff.Policy{Base: time.Millisecond, MaxAttempts: 1, MaxElapsed: time.Second}
				_, err := newRepoClient(t, srv, proto, store, once).Deposit(ctx, []byte(payload))
				require.ErrorIs(t, err, ErrUnresolved, "the only attempt's answer was lost")

				c := newRepoClient(t, srv, proto, store, fastRetry)
				res, err := c.Deposit(ctx, []byte(payload))
				require.NoError(t, err)
				require.True(t, res.Recovered)
				require.Zero(t, res.Retries, "answered exists at once")
				require.Equal(t, OutcomeCreated, res.Outcome, "the earlier run's request made it")
				rec, err := store.Lookup(ctx, c.StoreTarget(), res.Key)
				require.NoError(t, err)
				require.Equal(t, dedup.OutcomeCreated, rec.Outcome)
			})
		})
	}
}

// Go's transport sends a request with an Idempotency-Key again, by itself
// and unseen, when a kept-alive connection closes after the request was
// written and before any answer: the exchange sees one attempt, answered
// with a hit. The trace of the connection tells it that the hit answers
// its own first request.
func TestOutcomeWordsSeeTheTransportsOwnRetry(t *testing.T) {
	srv := newRepo(t, protocol.IdempotencyKey, "nth=1:drop")
	// A request that reaches no protocol (404 for a GET) leaves a
	// kept-alive connection for the deposit to reuse.
	resp, err := srv.Client().Get(srv.URL + "/warm")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	before := srv.Stats().Requests

	res, err := newRepoClient(t, srv, protocol.IdempotencyKey, openStore(t), fastRetry).Deposit(context.Background(), []byte(payload))
	require.NoError(t, err)
	st := srv.Stats()
	require.EqualValues(t, 2, st.Requests-before, "the dropped request and the transport's own retry")
	require.Equal(t, 1, res.Requests, "the exchange saw one attempt")
	require.EqualValues(t, 1, st.Replays, "answered with a hit")
	require.Equal(t, OutcomeCreated, res.Outcome)
}

// A target the client checks (InvenioRDM's marker search, DataCite's
// read-back) says created when the check finds what an ambiguous attempt
// of this deposit made, and existing for what another client made.
func TestOutcomeWordsOfCheckedTargets(t *testing.T) {
	ctx := context.Background()
	draftOnly := invenio.Target{NoPublish: true} // the draft is the deposit's own step

	t.Run("invenio: a draft found by its marker after a dropped create is created", func(t *testing.T) {
		s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop", IndexLag: 10 * time.Millisecond})
		res, err := invenioClient(t, s, openStore(t), draftOnly, fastRetry).Deposit(ctx, invenioRecord(1))
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, res.Outcome)
		require.Equal(t, int64(1), s.Stats().Drafts)
	})

	t.Run("invenio: a draft an earlier run's create made is created when resumed", func(t *testing.T) {
		s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop", IndexLag: 10 * time.Millisecond})
		store := openStore(t)
		one := backoff.Policy{Base: time.Millisecond, MaxAttempts: 1, MaxElapsed: time.Second}
		killed := invenioClient(t, s, store, draftOnly, one)
		cctx, cancel := context.WithCancel(ctx)
		// The drop ends the first run as a kill would: the context ends
		// as the check starts.
		killed.hooks.OnRequest = func(e RequestEvent) {
			if e.Method == http.MethodPost && e.Status == 0 {
				cancel()
			}
		}
		_, err := killed.Deposit(cctx, invenioRecord(2))
		require.Error(t, err)
		require.Equal(t, int64(1), s.Stats().Drafts)

		res, err := invenioClient(t, s, store, draftOnly, fastRetry).Deposit(ctx, invenioRecord(2))
		require.NoError(t, err)
		require.True(t, res.Recovered)
		require.Equal(t, OutcomeCreated, res.Outcome, "the marker search found the earlier run's draft")
		require.Equal(t, int64(1), s.Stats().Drafts, "no second create")
	})

	t.Run("invenio: a lost store's drafts are recorded created by the scan", func(t *testing.T) {
		s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 5 * time.Millisecond})
		first, err := invenioClient(t, s, openStore(t), draftOnly, fastRetry).Deposit(ctx, invenioRecord(3))
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, first.Outcome)

		lost := openStore(t)
		c := invenioClient(t, s, lost, draftOnly, fastRetry)
		res, err := c.Deposit(ctx, invenioRecord(3))
		require.NoError(t, err)
		require.Equal(t, OutcomeReplayed, res.Outcome, "answered from the rows the scan seeded")
		require.Equal(t, first.Identifier, res.Identifier)
		rec, err := lost.Lookup(ctx, c.StoreTarget(), res.Key)
		require.NoError(t, err)
		require.Equal(t, dedup.OutcomeCreated, rec.Outcome, "found by this key's marker: an earlier run of this deposit made it")
		require.Equal(t, int64(1), s.Stats().Drafts)
	})

	t.Run("datacite: a DOI another client registered first is existing", func(t *testing.T) {
		srv := newStub(t, repotest.DataCiteConfig{})
		first, err := newDataCiteClient(t, srv, openStore(t), nil).Deposit(ctx, dcPayload(4))
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, first.Outcome)

		res, err := newDataCiteClient(t, srv, openStore(t), nil).Deposit(ctx, dcPayload(4))
		require.NoError(t, err)
		require.Equal(t, OutcomeExisting, res.Outcome, "taken, read back as this key's, but not made by this store")
		require.Equal(t, first.Identifier, res.Identifier)
		require.Equal(t, int64(1), srv.Stats().Minted)
	})
}
