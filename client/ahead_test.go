package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// A batch whose keys come three times each, far apart and close together,
// sends one request per key: a claim made ahead for a later line of a key
// is never used after an earlier line's deposit settled the key (it would
// re-send, and the server would answer "exists"). Every later line is
// replayed.
func TestClaimsAheadNeverResendASettledKey(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t)})
	require.NoError(t, err)
	const keys = 700
	line := 0
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		// Each key at i, i+1 (the next line) and i+350 (other groups).
		for round := range 2 {
			for i := range keys / 2 {
				k := round*keys/2 + i
				for range 2 {
					line++
					if !yield(Item{Line: int64(line), Payload: fmt.Appendf(nil, `{"n":%d}`, k)}) {
						return
					}
				}
				line++
				if !yield(Item{Line: int64(line), Payload: fmt.Appendf(nil, `{"n":%d}`, (k+keys/2)%keys)}) {
					return
				}
			}
		}
	}, BatchOptions{Concurrency: 8})
	require.NoError(t, err)
	st := srv.Stats()
	require.Equal(t, keys, sum.Created)
	require.Zero(t, sum.Existing, "a later line re-sent a key an earlier one settled")
	require.Equal(t, 2*keys, sum.Replayed)
	require.EqualValues(t, keys, st.Requests, "one request per key")
	require.Zero(t, st.Duplicates)
}

// attemptsOf counts the rows of target by their attempts.
func attemptsOf(t *testing.T, s *dedup.SQLite, target string) map[int]int {
	t.Helper()
	n := map[int]int{}
	for rec, err := range s.List(context.Background(), target, "") {
		require.NoError(t, err)
		n[rec.Attempts]++
	}
	return n
}

// A claim made ahead stands for its item's deposit while its lease is
// held, however long the item waited: the lease is renewed from the claim.
// One whose lease was given up meanwhile does not: the deposit claims the
// key again. The clock is synctest's, so the waits are exact however slow
// the machine.
func TestAClaimMadeAheadStandsWhileItsLeaseIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := openStore(t)
		c, err := New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store, Lease: 400 * time.Millisecond})
		require.NoError(t, err)
		var on atomic.Bool
		on.Store(true)
		b := newClaimsAhead(c, &on)
		old, lost := c.mustKey(t, `{"n":"old"}`), c.mustKey(t, `{"n":"lost"}`)

		jobs := []job{{k: &old}}
		b.claim(context.Background(), jobs)
		require.NotNil(t, jobs[0].ahead)
		time.Sleep(300 * time.Millisecond) // three quarters of the lease, renewed meanwhile
		_, ok := ahead{b: b, e: jobs[0].ahead}.take()
		require.True(t, ok, "a claim whose lease is held was not used")
		rec, err := store.Lookup(context.Background(), c.StoreTarget(), old.Key)
		require.NoError(t, err)
		require.Equal(t, 1, rec.Attempts, "the key was claimed once")
		_, drop := c.leases.hold(context.Background(), jobs[0].ahead.ref)
		drop()

		jobs = []job{{k: &lost}}
		b.claim(context.Background(), jobs)
		require.NotNil(t, jobs[0].ahead)
		e := jobs[0].ahead
		require.Equal(t, 1, c.leases.giveUp(map[dedup.Ref]*heldLease{e.ref: e.held}, []dedup.Ref{e.ref}))
		_, ok = ahead{b: b, e: e}.take()
		require.False(t, ok, "a claim whose lease was given up was used")
		time.Sleep(400 * time.Millisecond) // the renewer's next tick: it ends
	})
}

// Against a slow server, the look-ahead claims no more ahead than the batch
// takes in an eighth of the lease, so that its claims do not hold leases
// other processes would wait for. Here the lease is 800 ms and each request
// takes 20 ms at concurrency 1: about 5 of a group of 64 would be taken in
// 100 ms. A claim made ahead stands while its lease is held, so every key
// is claimed once.
func TestClaimsAheadAreTakenInTimeAgainstASlowServer(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{Latency: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Lease: 800 * time.Millisecond})
	require.NoError(t, err)
	const n = 200
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for i := range n {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: 1})
	require.NoError(t, err)
	require.Equal(t, n, sum.Created)
	byAttempts := attemptsOf(t, store, c.StoreTarget())
	// A key is claimed twice only where its lease was given up (the store
	// did not answer renewals for half the lease, on a stalled machine).
	require.Equal(t, n, byAttempts[1]+byAttempts[2], "%v", byAttempts)
	require.Equal(t, int(c.LeasesLost()), byAttempts[2], "every key claimed once unless its lease was given up: %v", byAttempts)
}

// A key in flight in this process is not claimed ahead: its deposit may
// settle it before the later item's deposit would use the claim.
func TestAKeyInFlightIsNotClaimedAhead(t *testing.T) {
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store})
	require.NoError(t, err)
	var on atomic.Bool
	on.Store(true)
	b := newClaimsAhead(c, &on)
	flying, idle := c.mustKey(t, `{"n":"flying"}`), c.mustKey(t, `{"n":"idle"}`)
	c.flights.join(flying.Key)
	jobs := []job{{k: &flying}, {k: &idle}}
	b.claim(context.Background(), jobs)
	require.Nil(t, jobs[0].ahead)
	require.NotNil(t, jobs[1].ahead)
	_, err = store.Lookup(context.Background(), c.StoreTarget(), flying.Key)
	require.ErrorIs(t, err, dedup.ErrNotFound)
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), idle.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)

	// And the claim is taken once, by its own deposit.
	got, ok := ahead{b: b, e: jobs[1].ahead}.take()
	require.True(t, ok)
	require.Equal(t, idle.Key, got.Record.Key)
	_, ok = ahead{b: b, e: jobs[1].ahead}.take()
	require.False(t, ok)
}

func (c *Client) mustKey(t *testing.T, payload string) canonical.Keyed {
	t.Helper()
	k, err := c.Key([]byte(payload))
	require.NoError(t, err)
	return k
}

// A batch stopped midway leaves pending only what it sent. Once its
// requests in flight have finished, no row is pending: the claims made
// ahead for items never sent are released, and so are the intents of
// items that were waiting for a request slot when the batch stopped. The
// next run counts nothing recovered and sends each remaining key once.
func TestAStoppedBatchLeavesNothingPendingThatItNeverSent(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{Latency: 2 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	const n = 400
	items := func(yield func(Item) bool) {
		for i := range n {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first, err := c.Run(ctx, items, BatchOptions{Concurrency: 2, OnResult: func(r ItemResult) {
		if r.Outcome == OutcomeCreated {
			// By the first answer the look-ahead has claimed a group, and
			// workers beyond the slots wait with their intents recorded.
			stop()
		}
	}})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, first.Created, n/2, "the batch did not stop early")
	require.Equal(t, first.Created, first.Requests, "a request counted that never left")
	counts, err := store.Count(context.Background(), c.StoreTarget())
	require.NoError(t, err)
	require.Zero(t, counts.Pending, "intents of requests never sent are left pending")
	require.Equal(t, first.Created, counts.Done)

	second, err := c.Run(context.Background(), items, BatchOptions{Concurrency: 2})
	require.NoError(t, err)
	require.Zero(t, second.Recovered)
	require.Equal(t, n-first.Created, second.Created)
	require.Equal(t, first.Created, second.Replayed)
	require.EqualValues(t, n, srv.Stats().Requests)
}

// Two lines of one key: the later line's claim made ahead is spoiled when
// the earlier line's deposit begins, and that deposit's own claim counts
// the row's second claim. The claim made ahead sent nothing, so the
// deposit sees no earlier attempt: a record it then finds existing is
// "existing", not "created" (it flaked so against versitygw, when the
// earlier line reached a worker after the later one was claimed ahead).
func TestAClaimMadeAheadForAnotherLineOfTheKeyIsNoEarlierAttempt(t *testing.T) {
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store})
	require.NoError(t, err)
	var on atomic.Bool
	on.Store(true)
	b := newClaimsAhead(c, &on)
	k := c.mustKey(t, `{"n":"twice"}`)
	later := []job{{k: &k}}
	b.claim(context.Background(), later)
	require.NotNil(t, later[0].ahead, "the later line claimed ahead")

	earlier := ahead{b: b}
	earlier.began(k.Key)
	ref := dedup.Ref{Target: c.StoreTarget(), Key: k.Key}
	got, err := c.claim(context.Background(), ref, nil, earlier, false)
	require.NoError(t, err)
	require.Equal(t, 1, got.Record.Attempts, "the claim made ahead is no attempt")
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), k.Key)
	require.NoError(t, err)
	require.Equal(t, 2, rec.Attempts, "the row keeps both claims: a crash now leaves it uncertain")

	_, ok := ahead{b: b, e: later[0].ahead}.take()
	require.False(t, ok, "a spoiled claim made ahead does not stand")
}
