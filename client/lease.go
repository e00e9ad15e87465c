package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/depositkit/deposit/dedup"
)

// DefaultLease is how long a claim on a key lasts unless renewed, when
// Config.Lease is zero. It is renewed every tenth of that, so a process
// that stalls for a few renewals (a busy machine, a slow store) keeps it.
const DefaultLease = 30 * time.Second

// ErrLeaseLost wraps ErrUnresolved: this process stopped sending a deposit
// because it could no longer renew its lease on the key (another process
// took it over, or the store stopped answering). The intent stays pending;
// whoever holds the lease settles it.
var ErrLeaseLost = fmt.Errorf("%w: lease on the key lost", ErrUnresolved)

// errLeasedElsewhere says that another live process holds the key's lease:
// the deposit is parked and tried again once that lease may have ended.
type errLeasedElsewhere struct{ rec dedup.Record }

func (e errLeasedElsewhere) Error() string {
	return fmt.Sprintf("key %s is leased by another process until %s", e.rec.Key, e.rec.LeaseExpires.Format(time.RFC3339))
}

// ownerProver is a store that can prove a lease's owner dead
// (*dedup.SQLite, by a lock the owner held until it died): its claims take
// such an owner's keys over at once, before their leases end.
type ownerProver interface{ OwnerGone(owner string) bool }

// ownerGone reports whether the store proves owner dead.
func (c *Client) ownerGone(owner string) bool {
	return c.owners != nil && c.owners.OwnerGone(owner)
}

// leaseKeeper renews the leases of the deposits running in this client. Its
// goroutine runs only while it holds a lease, so a Client still needs no
// closing.
type leaseKeeper struct {
	store Store
	lease dedup.Lease
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	held    map[dedup.Ref]*heldLease
	running bool

	lost atomic.Int64 // leases lost while their deposits ran
	// renewedAt is when the last renewal that succeeded was sent (or the
	// keeper started), in Unix nanoseconds: every held lease lasts until
	// at least a lease after it.
	renewedAt atomic.Int64
}

func newLeaseKeeper(store Store, ttl time.Duration, log *slog.Logger) *leaseKeeper {
	return &leaseKeeper{
		store: store,
		lease: dedup.Lease{Owner: newOwner(), TTL: ttl},
		every: ttl / 10,
		log:   log,
		held:  make(map[dedup.Ref]*heldLease),
	}
}

// heldLease is one deposit's hold on its key's lease.
type heldLease struct{ cancel context.CancelCauseFunc }

// newOwner names this process in the leases it takes: random, so that two
// processes (or two clients in one) never share a name.
func newOwner() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// hold keeps the lease on ref renewed until drop is called, and returns a
// context that ends, with cause ErrLeaseLost, if the lease is lost first.
func (k *leaseKeeper) hold(ctx context.Context, ref dedup.Ref) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	h := &heldLease{cancel: cancel}
	k.mu.Lock()
	k.held[ref] = h
	if !k.running {
		k.running = true
		k.renewedAt.Store(time.Now().UnixNano())
		go k.renew()
	}
	k.mu.Unlock()
	return ctx, func() {
		k.mu.Lock()
		if k.held[ref] == h {
			delete(k.held, ref)
		}
		k.mu.Unlock()
		cancel(nil)
	}
}

// left returns the time left on the leases held, by this machine's clock,
// and whether any is held.
func (k *leaseKeeper) left() (time.Duration, bool) {
	k.mu.Lock()
	held := len(k.held) > 0
	k.mu.Unlock()
	if !held {
		return 0, false
	}
	return time.Until(time.Unix(0, k.renewedAt.Load()).Add(k.lease.TTL)), true
}

// renew renews every held lease each interval until none is held. A lease
// the store says is no longer ours ends its deposit; when renewals fail for
// half the lease, every deposit is ended, since another process may take
// their keys over once the leases expire.
func (k *leaseKeeper) renew() {
	tick := time.NewTicker(k.every)
	defer tick.Stop()
	for range tick.C {
		k.mu.Lock()
		if len(k.held) == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		// The holds renewed: a key released and claimed again meanwhile
		// (a later line of the same key) is a new hold, which a renewal
		// that saw the release must not end.
		renewed := maps.Clone(k.held)
		refs := slices.Collect(maps.Keys(renewed))
		k.mu.Unlock()

		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), k.lease.TTL/2)
		lost, err := k.store.Renew(ctx, k.lease, refs)
		cancel()
		if err != nil {
			if time.Since(time.Unix(0, k.renewedAt.Load())) < k.lease.TTL/2 {
				k.log.Warn("could not renew leases; trying again", "error", err)
				continue
			}
			k.log.Error("could not renew leases for half their duration: stopping the deposits that hold them", "error", err)
			lost = refs
		} else {
			k.renewedAt.Store(sent.UnixNano())
		}
		k.mu.Lock()
		for _, r := range lost {
			if h := k.held[r]; h != nil && h == renewed[r] {
				delete(k.held, r)
				h.cancel(ErrLeaseLost)
				k.lost.Add(1)
			}
		}
		k.mu.Unlock()
	}
}

// park waits before a deposit whose key another process holds is tried
// again: a growing, jittered interval, never past the lease's end. It
// returns an error when the batch stops or ctx ends meanwhile.
func (c *Client) park(ctx context.Context, drain <-chan struct{}, n int, until time.Time) error {
	wait := min(100*time.Millisecond<<min(n, 5), c.leases.lease.TTL/4, 2*time.Second)
	if d := time.Until(until); d > 0 && d < wait {
		wait = d
	}
	wait = wait/2 + rand.N(wait/2+1)
	startsWaiting(ctx)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-drain:
		return ErrInterrupted
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
	}
}

// LeasesLost counts the leases this client lost while their deposits ran:
// each such deposit stopped and is settled by the process that took over.
func (c *Client) LeasesLost() int64 { return c.leases.lost.Load() }

// leaseError is err, or ErrLeaseLost when ctx ended because the lease was.
func leaseError(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return err
}
