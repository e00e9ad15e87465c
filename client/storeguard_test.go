package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
)

// outageStore is a store whose Begin fails while down says so: with a
// restart's error, or, frozen, by not answering until the call's context
// ends. Everything else is the embedded store's (nil: not called).
type outageStore struct {
	Store
	failures int // Begin calls that fail before it answers; -1: all
	frozen   bool
	calls    atomic.Int32
	deadline chan time.Time // the deadline of each Begin, when not nil
}

func (s *outageStore) Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error) {
	n := int(s.calls.Add(1))
	if s.deadline != nil {
		d, _ := ctx.Deadline()
		s.deadline <- d
	}
	if s.failures >= 0 && n > s.failures {
		return dedup.Record{Target: target, Key: key, State: dedup.StatePending, Attempts: 1}, nil
	}
	if s.frozen {
		<-ctx.Done()
		return dedup.Record{}, ctx.Err()
	}
	return dedup.Record{}, &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
}

func (s *outageStore) Renew(ctx context.Context, _ dedup.Lease, _ []dedup.Ref) ([]dedup.Ref, error) {
	return nil, nil
}

// guardedOver returns store through a guard with budget, for a lease of
// ttl, as New sets it up.
func guardedOver(store Store, ttl, budget time.Duration) *guarded {
	g := newStoreGuard(budget)
	s := &guarded{s: store, g: g}
	g.leases = newLeaseKeeper(s, ttl, slog.New(slog.DiscardHandler))
	return s
}

func TestAStoreOutageShorterThanTheBudgetIsRiddenOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &outageStore{failures: 5}
		s := guardedOver(store, 30*time.Second, 15*time.Second)
		rec, err := s.Begin(t.Context(), "t", "k", nil)
		require.NoError(t, err)
		require.Equal(t, dedup.StatePending, rec.State)
		require.Equal(t, int32(6), store.calls.Load(), "made again until the store answered")
	})
}

func TestAStoreOutagePastTheBudgetStopsTheRunWithTheWriteInDoubt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &outageStore{failures: -1}
		s := guardedOver(store, 30*time.Second, 15*time.Second)
		start := time.Now()
		_, err := s.Begin(t.Context(), "t", "k", nil)
		waited := time.Since(start) // the bubble's clock: exact
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.ErrorIs(t, err, ErrStopRun)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "the store's last error is kept")
		var outage *outageError
		require.ErrorAs(t, err, &outage)
		require.True(t, outage.inDoubt, "a write that met a broken connection may have been committed")
		require.Contains(t, err.Error(), "in doubt")
		require.GreaterOrEqual(t, waited, 15*time.Second)
		require.LessOrEqual(t, waited, 15*time.Second+outageMaxWait)
		require.Greater(t, store.calls.Load(), int32(5), "backoff is capped: calls go on through the outage")

		// Once a call gave up, the next gives up at once, without a call:
		// a stopped run does not wait the outage out again per call.
		before := store.calls.Load()
		start = time.Now()
		_, err = s.Begin(t.Context(), "t", "k2", nil)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.Equal(t, before, store.calls.Load(), "no call within a second of the last give-up")
		require.Zero(t, time.Since(start))

		// A second later, one call tries whether the store is back.
		time.Sleep(outageMaxWait)
		_, err = s.Begin(t.Context(), "t", "k4", nil)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.Equal(t, before+1, store.calls.Load(), "a second later, one call tries the store again")
	})
}

// A store frozen outright answers no call: once a call gave up on it,
// the calls a stopping run still makes (a release per deposit) end at
// once instead of each waiting out its deadline.
func TestCallsAfterAFrozenStoreWasGivenUpEndAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &outageStore{failures: -1, frozen: true}
		s := guardedOver(store, 4*time.Second, 2*time.Second)
		_, err := s.Begin(t.Context(), "t", "k", nil)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		start := time.Now()
		for i := range 256 {
			_, err := s.Begin(t.Context(), "t", fmt.Sprint("k", i), nil)
			require.ErrorIs(t, err, ErrStoreUnavailable)
		}
		require.Less(t, time.Since(start), 2*time.Second, "256 calls wait at most one deadline, not one each")
	})
}

func TestAStoreCallThatHangsIsCutAtItsDeadlineAndReportedInDoubt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 30 * time.Second
		store := &outageStore{failures: -1, frozen: true, deadline: make(chan time.Time, 100)}
		s := guardedOver(store, ttl, 15*time.Second)
		// A lease held since now lasts ttl: no call may outlast it, less
		// the margin.
		_, drop := s.g.leases.hold(t.Context(), dedup.Ref{Target: "t", Key: "held"})
		defer func() {
			drop()
			time.Sleep(ttl) // the renewer's next tick: it ends
		}()
		leaseEnds := time.Now().Add(ttl)
		_, err := s.Begin(t.Context(), "t", "k", nil)
		require.ErrorIs(t, err, ErrStoreUnavailable)
		require.ErrorIs(t, err, errCallDeadline)
		var outage *outageError
		require.ErrorAs(t, err, &outage)
		require.True(t, outage.inDoubt, "a write cut off by its deadline is in doubt, never \"not written\"")
		close(store.deadline)
		for d := range store.deadline {
			require.False(t, d.IsZero(), "every call has a deadline")
			require.LessOrEqual(t, d, leaseEnds.Add(-ttl/leaseMarginDiv))
		}
	})
}

func TestAReadCutOffIsNotInDoubtAndARefusalIsNotMadeAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		refused := &refusingStore{err: dedup.ErrSettingsMismatch}
		s := guardedOver(refused, 30*time.Second, 15*time.Second)
		err := s.CheckSettings(t.Context(), "t", dedup.Settings{})
		require.ErrorIs(t, err, dedup.ErrSettingsMismatch)
		require.Equal(t, int32(1), refused.calls.Load())

		lost := &refusingStore{err: &pgconn.PgError{Code: "08006"}}
		s = guardedOver(lost, 30*time.Second, time.Second)
		_, err = s.Lookup(t.Context(), "t", "k")
		var outage *outageError
		require.ErrorAs(t, err, &outage)
		require.False(t, outage.inDoubt, "a read changes nothing")
	})
}

func TestAnInterruptedBatchEndsTheWaitForTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &outageStore{failures: -1}
		s := guardedOver(store, 30*time.Second, time.Hour)
		batch, interrupt := context.WithCancel(t.Context())
		defer s.g.watch(batch)()
		done := make(chan error)
		go func() {
			// Made on a context of its own, as the calls that serve
			// several deposits are.
			_, err := s.Begin(context.Background(), "t", "k", nil)
			done <- err
		}()
		synctest.Wait() // the call is waiting to be made again
		start := time.Now()
		interrupt()
		err := <-done
		require.ErrorIs(t, err, ErrInterrupted)
		require.False(t, errors.Is(err, ErrStoreUnavailable))
		require.Zero(t, time.Since(start), "no wait for the store once interrupted")
	})
}

// refusingStore answers every CheckSettings and Lookup with err.
type refusingStore struct {
	Store
	err   error
	calls atomic.Int32
}

func (s *refusingStore) CheckSettings(context.Context, string, dedup.Settings) error {
	s.calls.Add(1)
	return s.err
}

func (s *refusingStore) Lookup(context.Context, string, string) (dedup.Record, error) {
	s.calls.Add(1)
	return dedup.Record{}, s.err
}
