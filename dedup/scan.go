package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A target that arbitrates nothing (InvenioRDM) is recovered after its
// store was lost from a scan of what its server holds: every record that
// carries a deposit's marker. The scan is kept once per store and scan
// target, its findings with its mark in one transaction, so that a scan
// interrupted keeps nothing and every later run, batch and shard on the
// store finds the same records. While one process scans, it holds the
// scan's lease; the others wait for the mark.

// Found is one record a scan of a server found carrying a deposit's marker.
type Found struct {
	Marker    string // the marker, as the record carries it
	ID        string // the record's id on the server
	PID       string // the identifier it was published with; "" if none
	Published bool   // published, or else a draft
}

// checkScanTarget refuses a scan call without a target.
func checkScanTarget(target string) error {
	if target == "" {
		return fmt.Errorf("%w: empty scan target", ErrInvalidArgument)
	}
	return nil
}

// leasedScanError is the error of a scan another owner holds.
func leasedScanError(target string, expires time.Time) error {
	return fmt.Errorf("%w: scan of %s until %s", ErrLeased, target, expires.Format(time.RFC3339Nano))
}

const (
	// sqlScanClaim takes (or renews) the scan's lease unless the scan is
	// kept or another owner's lease is live.
	sqlScanClaim = `INSERT INTO scans (target, lease_owner, lease_expires) VALUES (?1, ?2, ?3)
		ON CONFLICT (target) DO UPDATE SET lease_owner = excluded.lease_owner, lease_expires = excluded.lease_expires
		WHERE scans.scanned_at = 0 AND (scans.lease_owner = excluded.lease_owner OR scans.lease_expires <= ?4)`
	sqlScanGet     = `SELECT scanned_at, lease_owner, lease_expires FROM scans WHERE target = ?1`
	sqlScanFound   = `INSERT INTO scan_found (target, marker, record_id, published, pid) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING`
	sqlScanMark    = `INSERT INTO scans (target, scanned_at) VALUES (?1, ?2) ON CONFLICT (target) DO UPDATE SET scanned_at = excluded.scanned_at, lease_owner = '', lease_expires = 0`
	sqlScanRelease = `UPDATE scans SET lease_owner = '', lease_expires = 0 WHERE target = ?1 AND lease_owner = ?2 AND scanned_at = 0`
	sqlScanLookup  = `SELECT marker, record_id, pid, published FROM scan_found WHERE target = ?1 AND marker = ?2 ORDER BY record_id`
)

// ClaimScan reports whether the scan of target is kept (FinishScan). If
// it is not, ClaimScan takes lease on the scan, or renews it when
// lease.Owner holds it already; while another owner's lease is live by
// the store's clock it changes nothing and returns an error wrapping
// ErrLeased.
func (s *SQLite) ClaimScan(ctx context.Context, target string, lease Lease) (scanned bool, err error) {
	if err := checkScanTarget(target); err != nil {
		return false, err
	}
	if err := checkLease(lease); err != nil {
		return false, err
	}
	var (
		at, expires int64
		owner       string
	)
	err = s.write(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		if _, err := tx.Exec(sqlScanClaim, target, lease.Owner, now+lease.TTL.Microseconds(), now); err != nil {
			return err
		}
		return tx.QueryRow(sqlScanGet, target).Scan(&at, &owner, &expires)
	})
	switch {
	case err != nil:
		return false, fmt.Errorf("dedup: claim the scan of %s: %w", target, err)
	case at != 0:
		return true, nil
	case owner != lease.Owner:
		return false, leasedScanError(target, time.UnixMicro(expires).UTC())
	}
	return false, nil
}

// FinishScan keeps what a scan of target found and marks the scan kept,
// in one transaction, ending its lease. A scan that is kept already is
// left as it is: any complete scan will do, and the first one stands.
func (s *SQLite) FinishScan(ctx context.Context, target string, found []Found) error {
	if err := checkScanTarget(target); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var at, expires int64
		var owner string
		switch err := tx.QueryRow(sqlScanGet, target).Scan(&at, &owner, &expires); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		case at != 0:
			return nil
		}
		st, err := tx.Prepare(sqlScanFound)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, f := range found {
			if _, err := st.Exec(target, f.Marker, f.ID, f.Published, f.PID); err != nil {
				return err
			}
		}
		_, err = tx.Exec(sqlScanMark, target, s.stamp())
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: keep the scan of %s: %w", target, err)
	}
	return nil
}

// ReleaseScan ends owner's lease on the scan of target, if it holds it,
// keeping nothing: a scan that failed, so that another process need not
// wait for the lease to expire.
func (s *SQLite) ReleaseScan(ctx context.Context, target, owner string) error {
	if err := checkScanTarget(target); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(sqlScanRelease, target, owner)
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: release the scan of %s: %w", target, err)
	}
	return nil
}

// ScanFound returns the records the kept scan of target found carrying
// marker, ordered by record id; none when the scan found none, or is not
// kept.
func (s *SQLite) ScanFound(ctx context.Context, target, marker string) ([]Found, error) {
	if s.isClosed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.rdb.QueryContext(ctx, sqlScanLookup, target, marker)
	if err != nil {
		return nil, fmt.Errorf("dedup: scan found %s: %w", marker, err)
	}
	defer rows.Close()
	found, err := readFound(rows)
	if err != nil {
		return nil, fmt.Errorf("dedup: scan found %s: %w", marker, err)
	}
	return found, nil
}

// readFound reads rows of (marker, record id, pid, published).
func readFound(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}) ([]Found, error) {
	var found []Found
	for rows.Next() {
		var f Found
		if err := rows.Scan(&f.Marker, &f.ID, &f.PID, &f.Published); err != nil {
			return nil, err
		}
		found = append(found, f)
	}
	return found, rows.Err()
}

// pgScan holds the scan's statements, written for one schema.
type pgScan struct {
	claim, get, ensure, found, mark, release, lookup string
}

// pgScanQueries writes the scan's statements for the schema quoted.
func pgScanQueries(quoted string) pgScan {
	x := func(q string) string { return strings.ReplaceAll(q, "{s}", quoted) }
	return pgScan{
		claim: x(`INSERT INTO {s}.scans AS c (target, lease_owner, lease_expires)
			VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond')
			ON CONFLICT (target) DO UPDATE SET lease_owner = excluded.lease_owner, lease_expires = excluded.lease_expires
			WHERE c.scanned_at IS NULL AND (c.lease_owner = excluded.lease_owner OR c.lease_expires IS NULL OR c.lease_expires <= now())`),
		get:    x(`SELECT scanned_at IS NOT NULL, lease_owner, coalesce(lease_expires, now()) FROM {s}.scans WHERE target = $1 FOR UPDATE`),
		ensure: x(`INSERT INTO {s}.scans (target) VALUES ($1) ON CONFLICT DO NOTHING`),
		found: x(`INSERT INTO {s}.scan_found (target, marker, record_id, published, pid)
			SELECT $1, u.marker, u.id, u.published, u.pid
			FROM unnest($2::text[], $3::text[], $4::boolean[], $5::text[]) AS u(marker, id, published, pid)
			ON CONFLICT DO NOTHING`),
		mark:    x(`UPDATE {s}.scans SET scanned_at = now(), lease_owner = '', lease_expires = NULL WHERE target = $1`),
		release: x(`UPDATE {s}.scans SET lease_owner = '', lease_expires = NULL WHERE target = $1 AND lease_owner = $2 AND scanned_at IS NULL`),
		lookup:  x(`SELECT marker, record_id, pid, published FROM {s}.scan_found WHERE target = $1 AND marker = $2 ORDER BY record_id`),
	}
}

// ClaimScan is SQLite.ClaimScan, by the database server's clock.
func (p *Postgres) ClaimScan(ctx context.Context, target string, lease Lease) (scanned bool, err error) {
	if err := checkScanTarget(target); err != nil {
		return false, err
	}
	if err := checkLease(lease); err != nil {
		return false, err
	}
	if p.isClosed.Load() {
		return false, ErrClosed
	}
	q := pgScanQueries(pgx.Identifier{p.schema}.Sanitize())
	var (
		owner   string
		expires time.Time
	)
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, q.claim, target, lease.Owner, lease.TTL.Microseconds()); err != nil {
			return err
		}
		return tx.QueryRow(ctx, q.get, target).Scan(&scanned, &owner, &expires)
	})
	switch {
	case err != nil:
		return false, p.fail("claim the scan of "+target, err)
	case scanned:
		return true, nil
	case owner != lease.Owner:
		return false, leasedScanError(target, expires.UTC())
	}
	return false, nil
}

// FinishScan is SQLite.FinishScan.
func (p *Postgres) FinishScan(ctx context.Context, target string, found []Found) error {
	if err := checkScanTarget(target); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	q := pgScanQueries(pgx.Identifier{p.schema}.Sanitize())
	markers, ids, pids := make([]string, len(found)), make([]string, len(found)), make([]string, len(found))
	published := make([]bool, len(found))
	for i, f := range found {
		markers[i], ids[i], published[i], pids[i] = f.Marker, f.ID, f.Published, f.PID
	}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		// The mark's row first, locked: two processes keeping a scan at
		// once keep it once.
		if _, err := tx.Exec(ctx, q.ensure, target); err != nil {
			return err
		}
		var (
			scanned bool
			owner   string
			expires time.Time
		)
		if err := tx.QueryRow(ctx, q.get, target).Scan(&scanned, &owner, &expires); err != nil {
			return err
		}
		if scanned {
			return nil
		}
		if _, err := tx.Exec(ctx, q.found, target, markers, ids, published, pids); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, q.mark, target)
		return err
	})
	if err != nil {
		return p.fail("keep the scan of "+target, err)
	}
	return nil
}

// ReleaseScan is SQLite.ReleaseScan.
func (p *Postgres) ReleaseScan(ctx context.Context, target, owner string) error {
	if err := checkScanTarget(target); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	q := pgScanQueries(pgx.Identifier{p.schema}.Sanitize())
	if _, err := p.pool.Exec(ctx, q.release, target, owner); err != nil {
		return p.fail("release the scan of "+target, err)
	}
	return nil
}

// ScanFound is SQLite.ScanFound.
func (p *Postgres) ScanFound(ctx context.Context, target, marker string) ([]Found, error) {
	if p.isClosed.Load() {
		return nil, ErrClosed
	}
	q := pgScanQueries(pgx.Identifier{p.schema}.Sanitize())
	rows, err := p.pool.Query(ctx, q.lookup, target, marker)
	if err != nil {
		return nil, p.fail("scan found "+marker, err)
	}
	defer rows.Close()
	found, err := readFound(rows)
	if err != nil {
		return nil, p.fail("scan found "+marker, err)
	}
	return found, nil
}
