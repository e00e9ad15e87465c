package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/depositkit/deposit/dedup"
)

// aheadGroup is the most intents a batch's look-ahead claims at once.
const aheadGroup = 64

// claimsAhead claims the intents of a batch's one-step deposits in groups,
// in the look-ahead, before the items reach a worker. A worker claims its
// item as it frees up, so the claims of a batch bound by its request slots
// come one or two at a time; claimed ahead, 64 intents cost one commit.
//
// A claim made ahead is used by its own item's deposit only while it can
// still stand for a claim made there and then:
//   - its lease is still held: renewed from the claim, as every lease is,
//     and not given up meanwhile (a claim that found another owner's
//     lease, which says nothing of that lease's later state, stands only
//     while younger than a quarter of the lease's TTL);
//   - no other deposit of the key began in this process meanwhile, which
//     may have settled the row since (such a deposit spoils it);
//   - a key in flight in this process is not claimed ahead at all.
//
// Otherwise the deposit claims its key as it would have. Against a slow
// server, items wait longer between the look-ahead and their request, and
// their claims hold leases that other processes would wait for. So the
// claims made ahead and not yet taken are bounded by what the batch takes
// in an eighth of the lease, at the rate its deposits have been taking
// their claims (groupSize); up to aheadGroup per group.
//
// A claim made ahead and never taken, because the batch stopped first, is
// released as unsent (forget). One that a crash leaves behind stays as a
// claim does, pending until its lease ends: nothing was sent for it, and
// the next deposit of the key sends it (and counts it recovered, which may
// over-report, never under).
type claimsAhead struct {
	c      *Client
	on     *atomic.Bool // the batch's endpoint has accepted a deposit
	maxAge time.Duration

	mu   sync.Mutex
	keys map[string]*claimAhead
	// tookOver names, for each key claimed ahead from another owner (a
	// key another process or an earlier run had claimed), that owner,
	// until a deposit of the key claims: should the claim made ahead not
	// stand (its lease given up, or spoiled by another line of the key), the deposit
	// claims again and finds this process the row's last claimer.
	tookOver map[string]string
	waiting  int           // claims made ahead and not yet taken
	lastTake time.Time     // when a deposit of the batch last took its claim
	interval time.Duration // between deposits taking their claims, averaged
}

// claimAhead is one key's claim made ahead, for one item.
type claimAhead struct {
	key     string
	got     dedup.Claimed
	at      time.Time
	made    bool // the claim committed
	spoiled bool // another deposit of the key began meanwhile
	// ref and held are the lease the claim took, renewed until the
	// item's deposit takes it over or the claim is given up.
	ref  dedup.Ref
	held *heldLease
}

// ahead is what a deposit knows of its batch's claims made ahead: the
// batch's (nil outside a batch that makes them) and its own, if any.
type ahead struct {
	b *claimsAhead
	e *claimAhead
}

func newClaimsAhead(c *Client, on *atomic.Bool) *claimsAhead {
	return &claimsAhead{c: c, on: on, maxAge: c.leases.lease.TTL / 4, keys: map[string]*claimAhead{}, tookOver: map[string]string{}}
}

// active reports whether claims are made ahead now: only once the endpoint
// has accepted a deposit, so that a batch its first answers stop has begun
// no more than its slots.
func (b *claimsAhead) active() bool { return b != nil && b.on.Load() }

// groupSize is how many intents the next group may claim ahead: as many as
// keep the claims waiting to be taken within what the batch takes in half
// of maxAge, so that the last of them is taken in time. Before the rate is
// known, one.
func (b *claimsAhead) groupSize() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.room()
}

// room is groupSize, with b.mu held.
func (b *claimsAhead) room() int {
	room := 1
	if b.interval > 0 {
		room = int(min(b.maxAge/2/b.interval, 2*aheadGroup))
	}
	return min(max(room-b.waiting, 0), aheadGroup)
}

// reserve takes room for up to n claims made ahead and returns how many;
// unreserve gives back what a group did not claim.
func (b *claimsAhead) reserve(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, b.room())
	b.waiting += n
	return n
}

func (b *claimsAhead) unreserve(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting -= n
}

// tookClaim notes that a deposit of the batch took its claim now, whether
// made ahead or not: the batch's rate of taking them. b.mu is held.
func (b *claimsAhead) tookClaim(now time.Time) {
	if !b.lastTake.IsZero() {
		d := now.Sub(b.lastTake)
		if b.interval == 0 {
			b.interval = d
		} else {
			b.interval += (d - b.interval) / 8
		}
	}
	b.lastTake = now
}

// claim claims ahead the intents of those of jobs whose deposit is one
// step the server arbitrates (so that a claim's answer, stale or not, can
// at worst cost a request that the server answers "exists"), and notes
// each claim in its job. A failed ClaimMany notes nothing: the deposits
// claim their keys themselves, and meet the store's error there.
func (b *claimsAhead) claim(ctx context.Context, jobs []job) {
	c := b.c
	var intents []dedup.Intent
	var mine []*claimAhead
	size := b.reserve(len(jobs))
	for i := range jobs {
		j := &jobs[i]
		if len(intents) == size {
			break
		}
		if j.k == nil {
			continue
		}
		steps, err := c.stepsOf(*j.k, source{})
		if err != nil || !claimsFirst(steps) || !steps[0].Arbitrated {
			continue
		}
		s := steps[0]
		e := &claimAhead{key: s.Key}
		b.mu.Lock()
		_, taken := b.keys[s.Key]
		if !taken {
			b.keys[s.Key] = e
		}
		b.mu.Unlock()
		// The key is noted before flights are asked, and a deposit joins
		// its flight before it looks here: one of the two sees the other.
		if taken || c.flights.has(s.Key) {
			if !taken {
				b.forget(ctx, e)
			}
			continue
		}
		var body []byte
		if s.KeepBody {
			body = j.k.Body
		}
		intents = append(intents, dedup.Intent{Ref: dedup.Ref{Target: s.Target, Key: s.Key}, Body: body})
		mine = append(mine, e)
		j.ahead = e
	}
	if len(intents) < size {
		b.unreserve(size - len(intents))
	}
	if len(intents) == 0 {
		return
	}
	at := time.Now()
	got, err := c.claims.store.ClaimMany(context.WithoutCancel(ctx), c.leases.lease, intents)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil || len(got) != len(mine) {
		b.waiting -= len(mine)
		return
	}
	for i, e := range mine {
		e.got, e.at, e.made, e.ref = got[i], at, true, intents[i].Ref
		if !got[i].Leased {
			e.held = c.leases.claimed(e.ref)
		}
		if p := got[i].PriorOwner; !got[i].Leased && p != "" && p != c.leases.lease.Owner {
			b.tookOver[e.key] = p
		}
	}
}

// priorOwner is what a deposit's claim of key learns of the row's last
// claimer before it, prior, corrected for a claim this batch made ahead
// from another owner (see tookOver).
func (a ahead) priorOwner(key, prior string) string {
	if a.b == nil {
		return prior
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	p, ok := a.b.tookOver[key]
	if !ok {
		return prior
	}
	delete(a.b.tookOver, key)
	if prior == a.b.c.leases.lease.Owner {
		return p
	}
	return prior
}

// began tells b that a deposit of key begins (it leads key's flight); a
// claim made ahead for another item of the key is spoiled.
func (a ahead) began(key string) {
	if a.b == nil {
		return
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	if e := a.b.keys[key]; e != nil && e != a.e {
		e.spoiled = true
	}
}

// unsentAhead reports whether the last claim of key before a deposit's
// own, which found the row at attempts, was a claim made ahead here for
// another item of the key, which this deposit spoiled and which no
// deposit took: it sent nothing, so it is no earlier attempt (the deposit
// would otherwise report "created" for a record it found existing).
func (a ahead) unsentAhead(key string, attempts int) bool {
	if a.b == nil {
		return false
	}
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	e := a.b.keys[key]
	return e != nil && e != a.e && e.made && e.spoiled && !e.got.Leased && e.got.Record.Attempts == attempts-1
}

// take returns the deposit's claim made ahead, if it may stand for its
// claim, and gives it up either way: a claim that stands hands its lease
// over to the deposit (which holds it at once), one that does not lets go
// of it, and the deposit claims again.
func (a ahead) take() (dedup.Claimed, bool) {
	if a.b == nil {
		return dedup.Claimed{}, false
	}
	got, ok, held := a.takeClaim()
	if ok && !got.Leased && !a.b.c.leases.holds(held) {
		ok = false // given up while it waited: the deposit claims again
	}
	if !ok && held != nil {
		a.b.c.leases.letGo(a.e.ref, held)
	}
	return got, ok
}

// takeClaim is take, under the batch's lock; the lease the claim took, if
// any, is returned for a claim that may not stand.
func (a ahead) takeClaim() (dedup.Claimed, bool, *heldLease) {
	a.b.mu.Lock()
	defer a.b.mu.Unlock()
	now := time.Now()
	a.b.tookClaim(now)
	e := a.e
	if e == nil {
		return dedup.Claimed{}, false, nil
	}
	if a.b.keys[e.key] == e {
		delete(a.b.keys, e.key)
	}
	ok := e.made && !e.spoiled && (!e.got.Leased || now.Sub(e.at) < a.b.maxAge)
	if e.made {
		a.b.waiting--
	}
	e.made = false // taken once
	held := e.held
	e.held = nil
	return e.got, ok, held
}

// forget gives up e, whether or not its deposit took it. A claim that was
// made and never used, for a key no other deposit here began since, stands
// for a request never sent (the batch stopped before the item's deposit
// took it): it is released as unsent, which takes its attempt back and
// ends its lease, so that the next deposit of the key neither counts it
// recovered nor, in another process, waits for the lease to run out.
func (b *claimsAhead) forget(ctx context.Context, e *claimAhead) {
	if b == nil || e == nil {
		return
	}
	b.mu.Lock()
	if b.keys[e.key] == e {
		delete(b.keys, e.key)
	}
	unused := e.made && !e.spoiled && !e.got.Leased
	if e.made {
		b.waiting--
	}
	e.made = false
	held := e.held
	e.held = nil
	b.mu.Unlock()
	c := b.c
	// Out of the renewal set before the release: a renewal that found the
	// lease released would count it lost.
	c.leases.letGo(e.ref, held)
	if !unused {
		return
	}
	if err := c.store.Release(context.WithoutCancel(ctx), c.leases.lease.Owner, e.ref, true); err != nil {
		c.leases.notReleased(err) // reported once, at the end of the batch
	}
}

// claimsInGroups reports whether a batch recording its outcomes with outs
// claims its deposits' keys in groups, where one-step deposits claim
// without a look-up first (claimsFirst) and may be claimed ahead. A
// deliberate retry of failures looks first, to clear them.
func (c *Client) claimsInGroups(outs *outcomes) bool {
	return outs != nil && c.claims != nil && !c.retryFailed
}

// claimsFirst reports whether a batch deposit of steps claims its key
// without looking it up first: a deposit of one durable step.
func claimsFirst(steps []step) bool {
	return len(steps) == 1 && steps[0].Primary && steps[0].Durable
}
