package client

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/idempotencykey"
)

// Another client's request holds an Idempotency-Key in flight on the
// server (IRI's lock, held 2 s) past this client's time budget: every
// answer this client gets is 409 "in flight", and it gives up. None of
// its requests ran, so its store keeps no intent, and once the other's
// record exists the next run reports it existing, as a fresh store does;
// before, the row stayed pending and the next run said created and
// recovered.
func TestAKeyAnsweredOnlyInFlightLeavesNoAttemptBehind(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{Protocol: repotest.ProtocolIdempotencyKey, LockHold: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	body := []byte(`{"title":"held by another client"}`)

	other, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: openStore(t)})
	require.NoError(t, err)
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Deposit(context.Background(), body)
		otherDone <- err
	}()
	for srv.Stats().Requests < 1 {
		time.Sleep(time.Millisecond) // its request holds the key's lock from its arrival
	}

	store := openStore(t)
	var mu sync.Mutex
	var statuses []int
	c, err := New(Config{
		Target: idempotencykey.Target{Endpoint: srv.URL, InFlightWait: 10 * time.Millisecond},
		Store:  store,
		Retry:  backoff.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxElapsed: 100 * time.Millisecond},
		Hooks: Hooks{OnRequest: func(e RequestEvent) {
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, e.Status)
		}},
	})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), body)
	require.ErrorIs(t, err, ErrUnresolved)
	mu.Lock()
	require.NotEmpty(t, statuses)
	for _, s := range statuses {
		require.Equal(t, http.StatusConflict, s, "every answer said the other's request is in flight: %v", statuses)
	}
	mu.Unlock()
	_, err = store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.ErrorIs(t, err, dedup.ErrNotFound, "no request of this store's ran: no intent stays")

	require.NoError(t, <-otherDone)
	res, err = c.Deposit(context.Background(), body)
	require.NoError(t, err)
	require.Equal(t, OutcomeExisting, res.Outcome, "the other client made it")
	require.False(t, res.Recovered)

	fresh, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: openStore(t)})
	require.NoError(t, err)
	fres, err := fresh.Deposit(context.Background(), body)
	require.NoError(t, err)
	require.Equal(t, fres.Outcome, res.Outcome, "a fresh store says the same")
	require.Equal(t, int64(1), srv.Stats().Records)
}
