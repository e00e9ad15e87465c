package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// checkLease refuses a lease that could not protect anything.
func checkLease(l Lease) error {
	if l.Owner == "" {
		return fmt.Errorf("%w: lease without an owner", ErrInvalidArgument)
	}
	if l.TTL <= 0 {
		return fmt.Errorf("%w: lease of %s", ErrInvalidArgument, l.TTL)
	}
	return nil
}

// Claim records the intent to send the first request of a deposit, as
// Begin does, and takes lease on the key in the same transaction. A done or
// failed row keeps its state but is leased all the same: the deposit's
// later steps run under that lease. When another owner's lease has not
// expired by the store's clock, nothing changes and the record is returned
// with an error wrapping ErrLeased, unless that owner is proven dead (see
// OwnerGone): its lease then counts as expired.
//
// The first claim of an owner through this handle takes the owner's lock
// (a file in the folder <store path>-owners, held until Close), which tells
// other processes that the owner lives.
func (s *SQLite) Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error) {
	intents := []Intent{{Ref: Ref{Target: target, Key: key}, Body: body}}
	if err := checkIntents(lease, intents); err != nil {
		return Record{}, err
	}
	got, err := s.claimMany(ctx, lease, intents)
	if err != nil {
		return Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	return got[0].Record, got[0].Err()
}

// ClaimMany is Claim for many keys in one transaction: the intents of a
// group of deposits cost one commit. It returns what became of each intent,
// in their order; a key leased by another owner is reported Leased, not as
// an error. A key named twice is refused.
func (s *SQLite) ClaimMany(ctx context.Context, lease Lease, intents []Intent) ([]Claimed, error) {
	if err := checkIntents(lease, intents); err != nil {
		return nil, err
	}
	out, err := s.claimMany(ctx, lease, intents)
	if err != nil {
		return nil, fmt.Errorf("dedup: claim %d keys: %w", len(intents), err)
	}
	return out, nil
}

func (s *SQLite) claimMany(ctx context.Context, lease Lease, intents []Intent) ([]Claimed, error) {
	if s.isClosed.Load() {
		return nil, ErrClosed
	}
	if err := s.owners.hold(lease.Owner); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return nil, &diskFullError{where: s.path, err: err}
		}
		return nil, err
	}
	out := make([]Claimed, len(intents))
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		expires := now + lease.TTL.Microseconds()
		insert, claim, get := tx.Stmt(s.stClaimNew), tx.Stmt(s.stClaim), tx.Stmt(s.stGet)
		gone := s.goneIn()
		for i, in := range intents {
			c, err := claimOne(insert, claim, get, gone, in, lease.Owner, now, expires)
			if err != nil {
				return err
			}
			out[i] = c
		}
		return nil
	})
	return out, err
}

// goneIn returns the test of a claim transaction for a lease's owner being
// dead: OwnerGone, asked once per owner in the transaction.
func (s *SQLite) goneIn() func(owner string) bool {
	seen := map[string]bool{}
	return func(owner string) bool {
		dead, ok := seen[owner]
		if !ok {
			dead = s.owners.gone(owner)
			seen[owner] = dead
		}
		return dead
	}
}

// OwnerGone reports whether owner, which claimed keys in this store, is
// proven dead: its lock file is in place and no process holds its lock, so
// the operating system freed it when the owner's process ended. A claim
// takes such an owner's leases over at once, as if they had expired, and
// removes its file. It is false while the owner lives, and whenever its
// death cannot be told: no lock file (an older version of this package,
// an owner that closed its store), a system without flock, a closed store.
// The proof needs a local file system: a store on a network one, where
// flock may not reach other machines, is unsupported. An owner once proven
// dead is remembered until Close; owner names must never be used again.
func (s *SQLite) OwnerGone(owner string) bool {
	return !s.isClosed.Load() && s.owners.gone(owner)
}

// claimOne runs one claim inside a transaction; insert, claim and get are
// the store's statements bound to it, gone the transaction's test for a
// dead owner.
func claimOne(insert, claim, get *sql.Stmt, gone func(string) bool, in Intent, owner string, now, expires int64) (Claimed, error) {
	// The common case, a key never seen, is a plain insert whose row is
	// known without reading it back.
	res, err := insert.Exec(in.Target, in.Key, blob(in.Body), now, owner, expires)
	if err != nil {
		return Claimed{}, err
	}
	if n, err := res.RowsAffected(); err == nil && n == 1 {
		at := time.UnixMicro(now).UTC()
		return Claimed{Record: Record{Target: in.Target, Key: in.Key, State: StatePending, Body: in.Body, Attempts: 1,
			CreatedAt: at, UpdatedAt: at, LeaseOwner: owner, LeaseExpires: time.UnixMicro(expires).UTC()}}, nil
	}
	// The row as it stands names its last claimer, which the update
	// replaces.
	prior, err := scanRecord(get.QueryRow(in.Target, in.Key))
	if err != nil {
		return Claimed{}, err
	}
	// Another owner's live lease is tested for its owner's death only
	// here, under the write lock: a takeover is atomic with what it read.
	var dead any // NULL: no owner proven dead
	if o := prior.LeaseOwner; o != owner && prior.LeaseExpires.UnixMicro() > now && gone(o) {
		dead = o
	}
	rec, err := scanRecord(claim.QueryRow(in.Target, in.Key, blob(in.Body), now, owner, expires, dead))
	if errors.Is(err, sql.ErrNoRows) { // another owner's live lease
		return Claimed{Record: prior, Leased: true, PriorOwner: prior.LeaseOwner}, nil
	}
	return Claimed{Record: rec, PriorOwner: prior.LeaseOwner}, err
}

// checkIntents refuses a ClaimMany that could not be carried out as asked.
func checkIntents(lease Lease, intents []Intent) error {
	if err := checkLease(lease); err != nil {
		return err
	}
	seen := make(map[Ref]bool, len(intents))
	for _, in := range intents {
		if err := checkKey(in.Target, in.Key); err != nil {
			return err
		}
		if seen[in.Ref] {
			return fmt.Errorf("%w: key %s claimed twice", ErrInvalidArgument, in.Key)
		}
		seen[in.Ref] = true
	}
	return nil
}

// Renew extends lease.Owner's leases on refs to lease.TTL from now, in one
// transaction, and returns the refs it no longer holds: released, or taken
// over by another owner after they expired.
func (s *SQLite) Renew(ctx context.Context, lease Lease, refs []Ref) ([]Ref, error) {
	if err := checkLease(lease); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, nil
	}
	var lost []Ref
	err := s.write(ctx, func(tx *sql.Tx) error {
		lost = lost[:0]
		expires := s.stamp() + lease.TTL.Microseconds()
		st, err := tx.Prepare(sqlRenew)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, r := range refs {
			res, err := st.Exec(r.Target, r.Key, lease.Owner, expires)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				lost = append(lost, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: renew %d leases: %w", len(refs), err)
	}
	return lost, nil
}

// Release ends owner's lease on ref, if owner still holds it; the row keeps
// owner as its last claimer. With
// unsent, the deposit sent nothing that could have taken effect (the server
// answered that nothing was created, or no connection was made): the
// attempt that Claim counted is taken back, and a pending row with no
// attempt left is removed, so that the key does not look uncertain.
func (s *SQLite) Release(ctx context.Context, owner string, ref Ref, unsent bool) error {
	if err := checkKey(ref.Target, ref.Key); err != nil {
		return err
	}
	if owner == "" {
		return fmt.Errorf("%w: release without an owner", ErrInvalidArgument)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.Exec(sqlRelease, ref.Target, ref.Key, owner, unsent)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 || !unsent {
			return err
		}
		_, err = tx.Exec(sqlDropUnsent, ref.Target, ref.Key)
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: release %s: %w", ref.Key, err)
	}
	return nil
}
