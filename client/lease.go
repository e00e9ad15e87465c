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

// leaseKeeper renews the leases this client holds, each from the moment
// its claim returns, whoever carries it then (a coalesced claim's leader
// still running other callers' claims, the batch's look-ahead), until
// every claim of it was let go: its deposit ended, or a claim made ahead
// was given up. Its goroutine runs only while it holds a lease, so a
// Client still needs no closing.
type leaseKeeper struct {
	store Store
	lease dedup.Lease
	every time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	held    map[dedup.Ref]*heldLease
	running bool
	// extended is when a claim or a renewal last ended, which may have
	// extended a lease: each lease of this owner ends at most a lease
	// after it.
	extended   time.Time
	unreleased unreleased

	lost atomic.Int64 // leases given up: not renewed in time, or taken over
	// renewedAt is when the last renewal that succeeded was sent (or the
	// keeper started), in Unix nanoseconds: every held lease lasts until
	// at least a lease after it.
	renewedAt atomic.Int64
}

// unreleased counts the leases whose release failed since it was last
// reported, with the last error.
type unreleased struct {
	n    int
	last error
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

// heldLease is one key's lease in the renewal set. A key is claimed once
// at a time by its deposit, but a claim made ahead for one line may wait
// while another line's deposit claims the key again: claims counts the
// claims not yet let go, and the lease is renewed until none is left.
type heldLease struct {
	claims  int
	holders []*leaseHolder // deposits running under the lease
	lost    bool           // given up: no longer renewed
}

// leaseHolder is a deposit running under a lease: its context ends, with
// cause ErrLeaseLost, when the lease is given up.
type leaseHolder struct{ cancel context.CancelCauseFunc }

// newOwner names this process in the leases it takes: random, so that two
// processes (or two clients in one) never share a name.
func newOwner() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// claimed puts the lease on ref, which a claim of this owner has just
// taken, in the renewal set, and returns it for letGo. A lease given up
// before is replaced: the claim took the key again.
func (k *leaseKeeper) claimed(ref dedup.Ref) *heldLease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.claimedLocked(ref)
}

func (k *leaseKeeper) claimedLocked(ref dedup.Ref) *heldLease {
	k.extended = time.Now()
	h := k.held[ref]
	if h == nil || h.lost {
		h = &heldLease{}
		k.held[ref] = h
	}
	h.claims++
	if !k.running {
		k.running = true
		k.renewedAt.Store(time.Now().UnixNano())
		go k.renew()
	}
	return h
}

// holds reports whether h, a lease a claim of this owner took, is still in
// the renewal set: not given up.
func (k *leaseKeeper) holds(h *heldLease) bool {
	if h == nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return !h.lost
}

// letGo lets go of one claim of h, the lease on ref; the lease leaves the
// renewal set with its last claim.
func (k *leaseKeeper) letGo(ref dedup.Ref, h *heldLease) {
	if h == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	h.claims--
	if h.claims <= 0 && k.held[ref] == h {
		delete(k.held, ref)
	}
}

// hold runs a deposit under the lease on ref, which its claim has just
// taken (and put in the renewal set), until drop is called, which lets go
// of the claim. The context returned ends, with cause ErrLeaseLost, if the
// lease is given up first, or was already.
func (k *leaseKeeper) hold(ctx context.Context, ref dedup.Ref) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	holder := &leaseHolder{cancel: cancel}
	k.mu.Lock()
	h := k.held[ref]
	if h == nil {
		h = k.claimedLocked(ref) // a claim that was not put in the set
	}
	h.holders = append(h.holders, holder)
	if h.lost {
		cancel(ErrLeaseLost)
	}
	k.mu.Unlock()
	return ctx, func() {
		k.mu.Lock()
		h.holders = slices.DeleteFunc(h.holders, func(x *leaseHolder) bool { return x == holder })
		k.mu.Unlock()
		k.letGo(ref, h)
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

// renewing returns the leases to renew now, and false once none is held
// (the keeper's goroutine then ends).
func (k *leaseKeeper) renewing() (map[dedup.Ref]*heldLease, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.held) == 0 {
		k.running = false
		return nil, false
	}
	live := make(map[dedup.Ref]*heldLease, len(k.held))
	for ref, h := range k.held {
		if !h.lost {
			live[ref] = h
		}
	}
	return live, true
}

// renew renews every held lease each interval until none is held. A lease
// the store says is no longer ours is given up; when renewals fail for
// half the lease, every lease is, since another process may take their
// keys over once they expire. A lease given up ends the deposits under it
// and is counted in LeasesLost.
func (k *leaseKeeper) renew() {
	tick := time.NewTicker(k.every)
	defer tick.Stop()
	for range tick.C {
		// The leases renewed: a key let go of and claimed again meanwhile
		// (a later line of the same key) is a new lease, which a renewal
		// that saw the release must not give up.
		renewed, ok := k.renewing()
		if !ok {
			return
		}
		if len(renewed) == 0 {
			continue // only leases given up, whose deposits are ending
		}
		refs := slices.Collect(maps.Keys(renewed))
		sent := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), k.lease.TTL/2)
		lost, err := k.store.Renew(ctx, k.lease, refs)
		if err == nil || ctx.Err() != nil || dedup.IsTransient(err) {
			// A renewal cut off, or broken by a transient error, may
			// have committed.
			k.mu.Lock()
			k.extended = time.Now()
			k.mu.Unlock()
		}
		cancel()
		switch {
		case err != nil && time.Since(time.Unix(0, k.renewedAt.Load())) < k.lease.TTL/2:
			k.log.Warn("could not renew leases; trying again", "error", err)
		case err != nil:
			if n := k.giveUp(renewed, refs); n > 0 {
				k.log.Error(fmt.Sprintf("could not renew leases for half their duration: gave up %s, stopping the deposits that hold them", leases(n)),
					"leases", n, "error", err)
			}
		default:
			k.renewedAt.Store(sent.UnixNano())
			if n := k.giveUp(renewed, lost); n > 0 {
				k.log.Warn(fmt.Sprintf("%s taken over by another process (not renewed in time): stopping the deposits that hold them", leases(n)),
					"leases", n)
			}
		}
	}
}

// giveUp gives up the leases on refs that are still those renewed, and
// returns how many it gave up.
func (k *leaseKeeper) giveUp(renewed map[dedup.Ref]*heldLease, refs []dedup.Ref) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, r := range refs {
		h := k.held[r]
		if h == nil || h != renewed[r] || h.lost {
			continue
		}
		h.lost = true
		for _, holder := range h.holders {
			holder.cancel(ErrLeaseLost)
		}
		n++
	}
	k.lost.Add(int64(n))
	return n
}

// notReleased notes a lease whose release failed: it expires by itself.
func (k *leaseKeeper) notReleased(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.unreleased.n++
	k.unreleased.last = err
}

// reportUnreleased logs, in one line, how many leases could not be
// released since the last report, and by when they expire by this
// machine's clock; nothing when every release went through.
func (k *leaseKeeper) reportUnreleased() {
	k.mu.Lock()
	left, by := k.unreleased, k.extended.Add(k.lease.TTL)
	k.unreleased = unreleased{}
	k.mu.Unlock()
	if left.n == 0 {
		return
	}
	why := "store error"
	switch {
	case errors.Is(left.last, ErrStoreUnavailable):
		why = "store unavailable"
	case errors.Is(left.last, dedup.ErrClosed):
		why = "store closed"
	}
	it := pick(left.n, "it expires", "they expire")
	k.log.Warn(fmt.Sprintf("%s could not be released (%s); %s by %s", leases(left.n), why, it, by.Format(time.TimeOnly)),
		"leases", left.n, "expire_by", by, "error", left.last)
}

// inBatch reports whether ctx is that of a batch's deposit (Client.Run).
func inBatch(ctx context.Context) bool {
	_, ok := ctx.Value(waitKey{}).(func())
	return ok
}

// leases is "1 lease" or "n leases".
func leases(n int) string {
	if n == 1 {
		return "1 lease"
	}
	return fmt.Sprintf("%d leases", n)
}

// pick is one when n is 1, else many.
func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
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

// LeasesLost counts the leases this client gave up: taken over by another
// process, or not renewed for half their duration (the store did not
// answer). The deposits under them stopped, unresolved; whoever holds the
// key next settles it. Each is logged when given up.
func (c *Client) LeasesLost() int64 { return c.leases.lost.Load() }

// leaseError is err, or ErrLeaseLost when ctx ended because the lease was.
func leaseError(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
		return fmt.Errorf("%w: %w", ErrLeaseLost, err)
	}
	return err
}
