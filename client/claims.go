package client

import (
	"context"
	"fmt"

	"github.com/depositkit/deposit/dedup"
)

// manyClaimer is a store that records a group of intents in one
// transaction; *dedup.SQLite and *dedup.Postgres are. With a store that is
// not, each deposit claims its key alone.
type manyClaimer interface {
	ClaimMany(ctx context.Context, lease dedup.Lease, intents []dedup.Intent) ([]dedup.Claimed, error)
}

// maxClaims bounds the intents of one ClaimMany.
const maxClaims = 256

// claims coalesces the claims of concurrent deposits into one ClaimMany
// (up to maxClaims). One commit then records the intents of every deposit
// about to send, which on PostgreSQL, where each commit waits for the log
// to reach the disk, is what bounds a fleet. Each lease a group takes is
// renewed from the group's commit: the deposit that led the group may
// carry later groups for a while before it gets to its own request.
type claims struct {
	store  manyClaimer
	leases *leaseKeeper
	group  coalescer[*claimCall]
}

type claimCall struct {
	in dedup.Intent
	// durable asks for a commit that survives power loss; the group's
	// commit is durable when any of its calls asks.
	durable bool
	got     dedup.Claimed
	err     error
	done    chan struct{}
}

func newClaims(store manyClaimer, leases *leaseKeeper) *claims {
	c := &claims{store: store, leases: leases}
	c.group = coalescer[*claimCall]{run: c.run, max: maxClaims}
	return c
}

// claim records the intent of ref, holding body, under c's lease, durably
// across power loss if durable. A caller
// waits for its group's commit even when its context ends first: once
// queued its claim may be written, and the deposit must know to release
// it. The claim runs on a context of its own, as it answers other callers
// too.
func (c *claims) claim(ref dedup.Ref, body []byte, durable bool) (dedup.Claimed, error) {
	call := &claimCall{in: dedup.Intent{Ref: ref, Body: body}, durable: durable, done: make(chan struct{})}
	if !c.group.add(call) {
		<-call.done
	}
	return call.got, call.err
}

// run claims the calls of group. A key is in flight once per process, so a
// group names each row once; should one come twice, it is claimed after
// the first, in a group of its own.
func (c *claims) run(group []*claimCall) {
	for len(group) > 0 {
		seen := make(map[dedup.Ref]bool, len(group))
		var now, later []*claimCall
		for _, call := range group {
			if seen[call.in.Ref] {
				later = append(later, call)
				continue
			}
			seen[call.in.Ref] = true
			now = append(now, call)
		}
		c.claimGroup(context.Background(), now)
		group = later
	}
}

// claimGroup claims a group that names each row once.
func (c *claims) claimGroup(ctx context.Context, group []*claimCall) {
	intents := make([]dedup.Intent, len(group))
	for i, call := range group {
		intents[i] = call.in
		if call.durable && !dedup.DurableCommit(ctx) {
			ctx = dedup.WithDurableCommit(ctx)
		}
	}
	got, err := c.store.ClaimMany(ctx, c.leases.lease, intents)
	if err == nil && len(got) != len(group) {
		err = fmt.Errorf("store claimed %d of %d keys", len(got), len(group))
	}
	for i, call := range group {
		if err != nil {
			call.err = err
		} else {
			call.got = got[i]
			if !got[i].Leased {
				// Renewed from now; its deposit holds it (leaseKeeper.hold).
				c.leases.claimed(call.in.Ref)
			}
		}
		close(call.done)
	}
}

// claim records the intent of a deposit's first request and takes its
// key's lease: the claim its batch made ahead if that may stand, else
// through the client's claim groups where the store has them (only those
// name the row's prior owner). A key another owner holds is returned with
// an error wrapping dedup.ErrLeased, as Store.Claim does. A lease taken is
// in the renewal set when claim returns; the deposit holds it at once. With durable (the
// deposit's primary step is one the server does not arbitrate), the claim
// commits durably across power loss (dedup.WithDurableCommit); a claim made
// ahead never is, and is only made for arbitrated steps.
func (c *Client) claim(ctx context.Context, ref dedup.Ref, body []byte, pre ahead, durable bool) (dedup.Claimed, error) {
	got, ok := pre.take()
	switch {
	case ok:
	case c.claims == nil:
		if durable {
			ctx = dedup.WithDurableCommit(ctx)
		}
		rec, err := c.store.Claim(ctx, ref.Target, ref.Key, body, c.leases.lease)
		if err == nil {
			c.leases.claimed(ref)
		}
		return dedup.Claimed{Record: rec}, err
	default:
		var err error
		if got, err = c.claims.claim(ref, body, durable); err != nil {
			return dedup.Claimed{}, err
		}
		if got.Err() == nil && got.Record.State == dedup.StatePending && got.Record.Attempts > 1 && pre.unsentAhead(ref.Key, got.Record.Attempts) {
			got.Record.Attempts-- // in this deposit's view; the row keeps its count
		}
	}
	got.PriorOwner = pre.priorOwner(ref.Key, got.PriorOwner)
	return got, got.Err()
}
