package client

import (
	"context"
	"errors"
	"sync"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// serials are the serial names (driver.Serializer) this client's deposits
// hold: a deposit that names one another deposit of this process holds
// waits for it to end, since the store's lease, which one owner holds for
// all its deposits, cannot tell them apart.
type serials struct {
	mu   sync.Mutex
	held map[dedup.Ref]chan struct{} // closed when let go
}

// lock takes ref in this process, waiting while another deposit holds it.
func (s *serials) lock(ctx context.Context, drain <-chan struct{}, ref dedup.Ref) (func(), error) {
	for {
		s.mu.Lock()
		if s.held == nil {
			s.held = map[dedup.Ref]chan struct{}{}
		}
		busy, taken := s.held[ref]
		if !taken {
			done := make(chan struct{})
			s.held[ref] = done
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.held, ref)
				s.mu.Unlock()
				close(done)
			}, nil
		}
		s.mu.Unlock()
		startsWaiting(ctx)
		select {
		case <-busy:
		case <-drain:
			return nil, ErrInterrupted
		case <-ctx.Done():
			return nil, ErrInterrupted
		}
	}
}

// serialize takes the serial name of the deposit of k, if its driver
// names one: this process's lock on it, then the store's lease on its
// row. It returns the context to run the deposit in (ended if that lease
// is lost) and the function that lets go of both; a lease another process
// holds is errLeasedElsewhere, with nothing held.
func (r *runDeposit) serialize(ctx context.Context, k canonical.Keyed) (context.Context, func(), error) {
	c := r.c
	sz, ok := c.target.(driver.Serializer)
	if !ok {
		return ctx, func() {}, nil
	}
	name := sz.Serial(k)
	if name == "" {
		return ctx, func() {}, nil
	}
	return c.holdShared(ctx, r.drain, dedup.Ref{Target: sz.SerialTarget(), Key: name})
}

// holdShared takes ref, a row that holds no outcome and names what
// deposits share (a serial name, an object): this process's lock on it,
// then the store's lease on the row. It returns the context to run in
// (ended if that lease is lost) and the function that lets go of both; a
// lease another process holds is errLeasedElsewhere, with nothing held.
func (c *Client) holdShared(ctx context.Context, drain <-chan struct{}, ref dedup.Ref) (context.Context, func(), error) {
	unlock, err := c.serials.lock(ctx, drain, ref)
	if err != nil {
		return ctx, nil, err
	}
	rec, err := c.store.Claim(ctx, ref.Target, ref.Key, nil, c.leases.lease)
	switch {
	case errors.Is(err, dedup.ErrLeased):
		unlock()
		return ctx, nil, errLeasedElsewhere{rec: rec}
	case err != nil:
		unlock()
		return ctx, nil, c.storeError(err)
	}
	c.leases.claimed(ref)
	held, drop := c.leases.hold(ctx, ref)
	return held, func() {
		drop()
		c.releaseSerial(context.WithoutCancel(ctx), ref, rec.Attempts)
		unlock()
	}, nil
}

// releaseSerial ends the lease on the serial row ref and removes the row,
// which holds no outcome. Each claim of it counted an attempt (attempts
// in all, one per owner that held it and died without letting go), and
// each release with nothing sent takes one back; the row goes with the
// last. Should another process claim the row meanwhile, the releases
// left find it not this owner's and change nothing.
func (c *Client) releaseSerial(ctx context.Context, ref dedup.Ref, attempts int) {
	for range max(attempts, 1) {
		if err := c.store.Release(ctx, c.leases.lease.Owner, ref, true); err != nil {
			c.leases.notReleased(err)
			return
		}
	}
}
