package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/depositkit/deposit/dedup"
)

// ErrStoreUnavailable wraps ErrStopRun: the store did not answer, or
// answered only with errors that may clear by themselves (a restart, a
// broken connection, a call past its deadline), for longer than
// Config.StoreOutage. Nothing was sent for an intent the store had not
// confirmed; the items left are unresolved, and a later run settles them
// safely once the store is back.
var ErrStoreUnavailable = fmt.Errorf("%w: the store is unavailable", ErrStopRun)

// The deadline of one store call is the time left on the leases it
// protects less leaseMargin of the lease, at most callCap of the lease
// (and maxCallCap), at least callFloor of it.
const (
	leaseMarginDiv = 10 // margin: a tenth of the lease
	callCapDiv     = 3  // cap: a third of the lease
	callFloorDiv   = 20 // floor: a twentieth of the lease
	maxCallCap     = 30 * time.Second

	outageFirstWait = 20 * time.Millisecond
	outageMaxWait   = time.Second
)

// outageError is a store call given up: the store did not answer within
// the outage budget, or the batch was interrupted while the call waited to
// be made again. It wraps ErrStoreUnavailable (or ErrInterrupted) and the
// store's last error.
type outageError struct {
	op          string
	waited      time.Duration
	inDoubt     bool // a write that may have been committed
	interrupted bool
	last        error
}

func (e *outageError) Error() string {
	what := fmt.Sprintf("no answer for %s", e.waited.Round(time.Millisecond))
	if e.interrupted {
		what = fmt.Sprintf("interrupted while waiting %s for the store", e.waited.Round(time.Millisecond))
	}
	doubt := ""
	if e.inDoubt {
		doubt = "; in doubt: the store may hold it, and nothing depending on it was sent"
	}
	return fmt.Sprintf("%s (%s%s): %v", what, e.op, doubt, e.last)
}

func (e *outageError) Unwrap() []error {
	if e.interrupted {
		return []error{ErrInterrupted, e.last}
	}
	return []error{ErrStoreUnavailable, e.last}
}

// errStoreDown is a store call not made: an earlier call gave up on the
// store, and another tried it less than a second ago.
var errStoreDown = errors.New("the store is still down (an earlier call gave up on it)")

// errCallDeadline is a store call cut off by its own deadline: the store
// did not answer in time. A write so cut off is in doubt.
var errCallDeadline = errors.New("the store did not answer before the call's deadline")

// storeGuard makes every store call of a client with a deadline and rides
// out outages shorter than its budget: a call that fails with an error the
// store classifies as transient (dedup.IsTransient), or that passes its
// deadline, is made again with capped, jittered backoff. A write made
// again re-reads its row, so a commit in doubt is settled by what the
// store then says before anything depending on it is sent. Safe for
// concurrent use.
type storeGuard struct {
	budget time.Duration // <= 0: no call is made again
	leases *leaseKeeper

	// down is set once a call gave up, until one succeeds: meanwhile a
	// call that fails as the store is still down gives up at once, so a
	// run the outage stopped ends without waiting it out again for each
	// call in flight.
	down atomic.Bool
	// probed is when a call last gave up on the store (unix nanoseconds):
	// while it is down, one call a second may find out whether it is back;
	// the others give up without a call, so a stopping run does not wait
	// a call's deadline per call (a frozen server answers none).
	probed atomic.Int64

	mu   sync.Mutex
	intr chan struct{} // closed when a watched batch is interrupted
}

func newStoreGuard(budget time.Duration) *storeGuard {
	return &storeGuard{budget: budget, intr: make(chan struct{})}
}

// watch ends the waits of store calls once ctx ends (a batch
// interrupted), until unwatched or another batch is watched.
func (g *storeGuard) watch(ctx context.Context) (unwatch func() bool) {
	g.mu.Lock()
	select {
	case <-g.intr:
		g.intr = make(chan struct{})
	default:
	}
	g.mu.Unlock()
	return context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-g.intr:
		default:
			close(g.intr)
		}
	})
}

func (g *storeGuard) interrupted() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.intr
}

// deadline is how long one call may take: the time left on the leases
// this process holds less a margin, within a cap and a floor.
func (g *storeGuard) deadline() time.Duration {
	ttl := g.leases.lease.TTL
	d := min(ttl/callCapDiv, maxCallCap)
	if left, held := g.leases.left(); held {
		d = min(d, left-ttl/leaseMarginDiv)
	}
	return max(d, ttl/callFloorDiv)
}

// call runs f with a deadline until it succeeds, fails for good, or the
// outage budget is spent. write says f may commit: cut off, it is in
// doubt. An error of ctx's own is returned as f gave it.
func (g *storeGuard) call(ctx context.Context, op string, write bool, f func(context.Context) error) error {
	var (
		first   time.Time
		inDoubt bool
		intr    = g.interrupted()
	)
	if g.down.Load() {
		now, last := time.Now().UnixNano(), g.probed.Load()
		if now-last < int64(outageMaxWait) || !g.probed.CompareAndSwap(last, now) {
			return &outageError{op: op, last: errStoreDown}
		}
	}
	for n := 0; ; n++ {
		d := g.deadline()
		if !first.IsZero() {
			d = min(d, max(g.budget-time.Since(first), g.leases.lease.TTL/callFloorDiv))
		}
		cctx, cancel := context.WithTimeoutCause(ctx, d, errCallDeadline)
		err := f(cctx)
		cut := err != nil && ctx.Err() == nil && errors.Is(context.Cause(cctx), errCallDeadline)
		cancel()
		switch {
		case err == nil:
			if g.down.Load() {
				g.down.Store(false)
			}
			return nil
		case ctx.Err() != nil:
			return err
		case cut:
			inDoubt = inDoubt || write
			err = fmt.Errorf("%w (%s): %w", errCallDeadline, d.Round(time.Millisecond), err)
		case dedup.IsTransient(err):
			inDoubt = inDoubt || write
		default:
			return err
		}
		if first.IsZero() {
			first = time.Now()
		}
		waited := time.Since(first)
		if waited >= g.budget || g.down.Load() {
			g.down.Store(true)
			// The next try is a second after this one gave up, however long
			// its deadline kept it.
			g.probed.Store(time.Now().UnixNano())
			return &outageError{op: op, waited: waited, inDoubt: inDoubt, last: err}
		}
		wait := min(outageFirstWait<<min(n, 10), outageMaxWait, g.budget-waited)
		// Jittered, and never so short that the budget is not spent.
		wait = max(wait/2+rand.N(wait/2+1), time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-intr:
			t.Stop()
			return &outageError{op: op, waited: time.Since(first), inDoubt: inDoubt, interrupted: true, last: err}
		}
	}
}

// guarded is a Store whose every call goes through a storeGuard. It has
// the methods of every optional interface a client looks for; storeAs
// finds which the store underneath really has.
type guarded struct {
	s Store
	g *storeGuard
}

// storeAs returns s as T when the store underneath (for a guarded one)
// implements T.
func storeAs[T any](s Store) (T, bool) {
	if g, ok := s.(*guarded); ok {
		if _, ok := g.s.(T); !ok {
			var zero T
			return zero, false
		}
	}
	t, ok := s.(T)
	return t, ok
}

func guardCall[T any](g *storeGuard, ctx context.Context, op string, write bool, f func(context.Context) (T, error)) (T, error) {
	var out T
	err := g.call(ctx, op, write, func(ctx context.Context) error {
		var err error
		out, err = f(ctx)
		return err
	})
	return out, err
}

func (s *guarded) CheckSettings(ctx context.Context, target string, set dedup.Settings) error {
	return s.g.call(ctx, "check key settings", true, func(ctx context.Context) error {
		return s.s.CheckSettings(ctx, target, set)
	})
}

func (s *guarded) Lookup(ctx context.Context, target, key string) (dedup.Record, error) {
	return guardCall(s.g, ctx, "look up a key", false, func(ctx context.Context) (dedup.Record, error) {
		return s.s.Lookup(ctx, target, key)
	})
}

func (s *guarded) LookupMany(ctx context.Context, target string, keys []string) (map[string]dedup.Record, error) {
	return guardCall(s.g, ctx, fmt.Sprintf("look up %d keys", len(keys)), false, func(ctx context.Context) (map[string]dedup.Record, error) {
		return s.s.LookupMany(ctx, target, keys)
	})
}

func (s *guarded) Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error) {
	return guardCall(s.g, ctx, "record an intent", true, func(ctx context.Context) (dedup.Record, error) {
		return s.s.Begin(ctx, target, key, body)
	})
}

func (s *guarded) Complete(ctx context.Context, target, key string, c dedup.Confirmation) (dedup.Record, error) {
	return guardCall(s.g, ctx, "record a confirmation", true, func(ctx context.Context) (dedup.Record, error) {
		return s.s.Complete(ctx, target, key, c)
	})
}

func (s *guarded) Fail(ctx context.Context, target, key string, f dedup.Failure) (dedup.Record, error) {
	return guardCall(s.g, ctx, "record a failure", true, func(ctx context.Context) (dedup.Record, error) {
		return s.s.Fail(ctx, target, key, f)
	})
}

func (s *guarded) ResetFailed(ctx context.Context, target, key string) error {
	return s.g.call(ctx, "reset a failure", true, func(ctx context.Context) error {
		return s.s.ResetFailed(ctx, target, key)
	})
}

// Claim made again after a commit in doubt finds the row as that commit
// left it, leased by this owner already: the claim stands, and the row
// says whether anything may have been sent.
func (s *guarded) Claim(ctx context.Context, target, key string, body []byte, lease dedup.Lease) (dedup.Record, error) {
	return guardCall(s.g, ctx, "claim a key", true, func(ctx context.Context) (dedup.Record, error) {
		return s.s.Claim(ctx, target, key, body, lease)
	})
}

// Renew is made once, under the lease keeper's own deadline: the keeper
// tries again at its next tick, and ends the deposits whose leases it
// could not renew in time.
func (s *guarded) Renew(ctx context.Context, lease dedup.Lease, refs []dedup.Ref) ([]dedup.Ref, error) {
	return s.s.Renew(ctx, lease, refs)
}

func (s *guarded) Release(ctx context.Context, owner string, ref dedup.Ref, unsent bool) error {
	return s.g.call(ctx, "release a lease", true, func(ctx context.Context) error {
		return s.s.Release(ctx, owner, ref, unsent)
	})
}

func (s *guarded) ClaimMany(ctx context.Context, lease dedup.Lease, intents []dedup.Intent) ([]dedup.Claimed, error) {
	return guardCall(s.g, ctx, fmt.Sprintf("claim %d keys", len(intents)), true, func(ctx context.Context) ([]dedup.Claimed, error) {
		return s.s.(manyClaimer).ClaimMany(ctx, lease, intents)
	})
}

func (s *guarded) ConfirmMany(ctx context.Context, target string, items map[string]dedup.Confirmation) (map[string]string, error) {
	return guardCall(s.g, ctx, fmt.Sprintf("record %d confirmations", len(items)), true, func(ctx context.Context) (map[string]string, error) {
		return s.s.(manyConfirmer).ConfirmMany(ctx, target, items)
	})
}

func (s *guarded) LookupDone(ctx context.Context, target string, keys []string, dst []dedup.Record) ([]dedup.Record, error) {
	n := len(dst)
	return guardCall(s.g, ctx, fmt.Sprintf("look up %d keys", len(keys)), false, func(ctx context.Context) ([]dedup.Record, error) {
		return s.s.(doneLooker).LookupDone(ctx, target, keys, dst[:n])
	})
}

func (s *guarded) ClaimScan(ctx context.Context, target string, lease dedup.Lease) (bool, error) {
	return guardCall(s.g, ctx, "claim the scan", true, func(ctx context.Context) (bool, error) {
		return s.s.(scanStore).ClaimScan(ctx, target, lease)
	})
}

func (s *guarded) FinishScan(ctx context.Context, target string, found []dedup.Found) error {
	return s.g.call(ctx, "record the scan", true, func(ctx context.Context) error {
		return s.s.(scanStore).FinishScan(ctx, target, found)
	})
}

func (s *guarded) ReleaseScan(ctx context.Context, target, owner string) error {
	return s.g.call(ctx, "release the scan", true, func(ctx context.Context) error {
		return s.s.(scanStore).ReleaseScan(ctx, target, owner)
	})
}

func (s *guarded) ScanFound(ctx context.Context, target, marker string) ([]dedup.Found, error) {
	return guardCall(s.g, ctx, "read the scan", false, func(ctx context.Context) ([]dedup.Found, error) {
		return s.s.(scanStore).ScanFound(ctx, target, marker)
	})
}
