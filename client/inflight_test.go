package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/idempotencykey"
)

// Two processes with stores of their own deposit the same items to an
// Idempotency-Key server that holds each key's lock well past the second
// one's attempt limit, and answers 409 without Retry-After, as IRI does. The
// second waits the lock out within its time budget instead of giving up
// after its attempts, and ends with every item existing in one run.
func TestInFlightAnswersAreWaitedOutWithinTheTimeBudget(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{Protocol: repotest.ProtocolIdempotencyKey, LockHold: 1500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })

	// Two attempts with waits of at most 20 ms would give up within a
	// fraction of the lock; the floor and the elapsed limit decide instead.
	policy := backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 2, MaxElapsed: 30 * time.Second}
	newClient := func() *Client {
		c, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL, InFlightWait: 200 * time.Millisecond}, Store: openStore(t), Retry: policy})
		require.NoError(t, err)
		return c
	}
	first, second := newClient(), newClient()

	const n = 4
	payload := func(i int) []byte { return fmt.Appendf(nil, `{"item":%d}`, i) }
	var wg sync.WaitGroup
	firstErrs, secondErrs := make([]error, n), make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, firstErrs[i] = first.Deposit(context.Background(), payload(i))
		}()
	}
	// The second process starts once the first holds every lock.
	for srv.Stats().Requests < n {
		time.Sleep(5 * time.Millisecond)
	}
	outcomes := make([]Outcome, n)
	var wg2 sync.WaitGroup
	for i := range n {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			var res Result
			res, secondErrs[i] = second.Deposit(context.Background(), payload(i))
			outcomes[i] = res.Outcome
		}()
	}
	wg.Wait()
	wg2.Wait()
	for i := range n {
		require.NoError(t, firstErrs[i])
		require.NoError(t, secondErrs[i])
	}
	for i, o := range outcomes {
		require.Equal(t, OutcomeExisting, o, "item %d", i)
	}
	st := srv.Stats()
	require.Equal(t, int64(n), st.Records)
	require.Equal(t, int64(0), st.Duplicates)
	require.Greater(t, st.Conflicts, int64(n), "the second process met the locks more than once each")
}
