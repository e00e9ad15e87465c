package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// leasedError describes a claim refused because of another owner's lease.
func leasedError(key string, rec Record) error {
	return fmt.Errorf("%w: key %s until %s", ErrLeased, key, rec.LeaseExpires.Format(time.RFC3339Nano))
}

// Claim records the intent to send the first request of a deposit, as
// Begin does, and takes lease on the key in the same transaction. A done or
// failed row keeps its state but is leased all the same: the deposit's
// later steps run under that lease. When another owner's lease has not
// expired by the store's clock, nothing changes and the record is returned
// with an error wrapping ErrLeased.
func (s *SQLite) Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	if err := checkLease(lease); err != nil {
		return Record{}, err
	}
	var rec Record
	var leased bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		leased = false
		now := s.stamp()
		expires := now + lease.TTL.Microseconds()
		res, err := tx.Stmt(s.stClaimNew).Exec(target, key, blob(body), now, lease.Owner, expires)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			at := time.UnixMicro(now).UTC()
			rec = Record{Target: target, Key: key, State: StatePending, Body: body, Attempts: 1, CreatedAt: at, UpdatedAt: at,
				LeaseOwner: lease.Owner, LeaseExpires: time.UnixMicro(expires).UTC()}
			return nil
		}
		rec, err = scanRecord(tx.Stmt(s.stClaim).QueryRow(target, key, blob(body), now, lease.Owner, expires))
		if errors.Is(err, sql.ErrNoRows) { // another owner's live lease
			leased = true
			rec, err = scanRecord(tx.Stmt(s.stGet).QueryRow(target, key))
		}
		return err
	})
	if err != nil {
		return Record{}, fmt.Errorf("dedup: claim %s: %w", key, err)
	}
	if leased {
		return rec, leasedError(key, rec)
	}
	return rec, nil
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
