package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"time"
)

const objectCols = "target, key, identifier, version, tag, ord, applied_at, pending, pending_ord, pending_since, updates, stale, created_at, updated_at"

// scanObject scans the columns of objectCols.
func scanObject(row interface{ Scan(...any) error }) (Object, error) {
	var o Object
	var applied, since, created, updated int64
	err := row.Scan(&o.Target, &o.Key, &o.Identifier, &o.Version, &o.Tag, &o.Order, &applied,
		&o.Pending, &o.PendingOrder, &since, &o.Updates, &o.Stale, &created, &updated)
	o.AppliedAt, o.PendingSince = microTime(applied), microTime(since)
	o.CreatedAt, o.UpdatedAt = microTime(created), microTime(updated)
	return o, err
}

// microTime is unix microseconds as a UTC time, zero for 0.
func microTime(us int64) time.Time {
	if us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(us).UTC()
}

// LookupObject returns the object key of target, or an error wrapping
// ErrNotFound.
func (s *SQLite) LookupObject(ctx context.Context, target, key string) (Object, error) {
	if s.isClosed.Load() {
		return Object{}, ErrClosed
	}
	o, err := scanObject(s.rdb.QueryRowContext(ctx, "SELECT "+objectCols+" FROM objects WHERE target = ?1 AND key = ?2", target, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Object{}, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return Object{}, fmt.Errorf("dedup: lookup object %s: %w", key, err)
	}
	return o, nil
}

// LookupVersion returns what the store holds of version of object key:
// done when the server confirmed it, failed when it refused it; an error
// wrapping ErrNotFound when the object was never given it.
func (s *SQLite) LookupVersion(ctx context.Context, target, key, version string) (Version, error) {
	if s.isClosed.Load() {
		return Version{}, ErrClosed
	}
	var v Version
	var at int64
	err := s.rdb.QueryRowContext(ctx, "SELECT version, state, ord, status, problem, at FROM object_versions WHERE target = ?1 AND object = ?2 AND version = ?3",
		target, key, version).Scan(&v.Version, &v.State, &v.Order, &v.Status, &v.Problem, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Version{}, fmt.Errorf("%w: version %s of object %s", ErrNotFound, version, key)
	}
	if err != nil {
		return Version{}, fmt.Errorf("dedup: lookup version of object %s: %w", key, err)
	}
	v.At = microTime(at)
	return v, nil
}

// BeginUpdate records the intent of an update of object key to version
// (with its order) before its first request: the object's pending update.
// The object must be stored (ErrNotFound otherwise).
func (s *SQLite) BeginUpdate(ctx context.Context, target, key, version, order string) (Object, error) {
	if err := checkObject(target, key, version); err != nil {
		return Object{}, err
	}
	var o Object
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		var err error
		o, err = scanObject(tx.QueryRow(`UPDATE objects SET
				pending = ?3, pending_ord = ?4,
				pending_since = CASE WHEN pending = ?3 THEN pending_since ELSE ?5 END,
				updated_at = ?5
			WHERE target = ?1 AND key = ?2
			RETURNING `+objectCols, target, key, version, order, now))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return Object{}, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return Object{}, fmt.Errorf("dedup: begin update of object %s: %w", key, err)
	}
	return o, nil
}

// ApplyVersion records a version of object key the server confirmed: the
// version the object holds now, with its tag, and one of its history. An
// object not stored yet is stored with it (a.Identifier required then); a
// pending update of this version is settled; one of another version stays
// pending. Applying the version the object holds already only takes its
// tag (and identifier, when given).
func (s *SQLite) ApplyVersion(ctx context.Context, target, key string, a Applied) (Object, error) {
	if err := checkObject(target, key, a.Version); err != nil {
		return Object{}, err
	}
	var o Object
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		var err error
		o, err = scanObject(tx.QueryRow(`INSERT INTO objects (target, key, identifier, version, tag, ord, applied_at, created_at, updated_at)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?7)
			ON CONFLICT (target, key) DO UPDATE SET
				identifier = CASE WHEN excluded.identifier <> '' THEN excluded.identifier ELSE objects.identifier END,
				updates = objects.updates + (objects.version <> '' AND objects.version <> excluded.version),
				applied_at = CASE WHEN objects.version = excluded.version THEN objects.applied_at ELSE excluded.applied_at END,
				version = excluded.version, tag = excluded.tag, ord = excluded.ord,
				pending = CASE WHEN objects.pending = excluded.version THEN '' ELSE objects.pending END,
				pending_ord = CASE WHEN objects.pending = excluded.version THEN '' ELSE objects.pending_ord END,
				pending_since = CASE WHEN objects.pending = excluded.version THEN 0 ELSE objects.pending_since END,
				updated_at = excluded.updated_at
			RETURNING `+objectCols, target, key, a.Identifier, a.Version, a.Tag, a.Order, now))
		if err != nil {
			return err
		}
		if o.Identifier == "" {
			return fmt.Errorf("%w: object %s has no identifier", ErrInvalidArgument, key)
		}
		_, err = tx.Exec(`INSERT INTO object_versions (target, object, version, state, ord, at) VALUES (?1, ?2, ?3, 'done', ?4, ?5)
			ON CONFLICT (target, object, version) DO UPDATE SET state = 'done', status = 0, problem = '',
				ord = excluded.ord, at = excluded.at
			WHERE object_versions.state <> 'done'`, target, key, a.Version, a.Order, now)
		return err
	})
	if err != nil {
		return Object{}, fmt.Errorf("dedup: apply version of object %s: %w", key, err)
	}
	return o, nil
}

// FailVersion records the server's terminal answer to an update of object
// key to version: the version is failed (not sent again unless reset) and
// the object's pending update of it, if any, ends.
func (s *SQLite) FailVersion(ctx context.Context, target, key, version string, f Failure) (Object, error) {
	if err := checkObject(target, key, version); err != nil {
		return Object{}, err
	}
	var o Object
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.stamp()
		_, err := tx.Exec(`INSERT INTO object_versions (target, object, version, state, status, problem, at) VALUES (?1, ?2, ?3, 'failed', ?4, ?5, ?6)
			ON CONFLICT (target, object, version) DO UPDATE SET state = 'failed', status = excluded.status, problem = excluded.problem, at = excluded.at
			WHERE object_versions.state <> 'done'`, target, key, version, f.Status, f.Problem, now)
		if err != nil {
			return err
		}
		o, err = scanObject(tx.QueryRow(`UPDATE objects SET pending = '', pending_ord = '', pending_since = 0, updated_at = ?4
			WHERE target = ?1 AND key = ?2 AND pending = ?3 RETURNING `+objectCols, target, key, version, now))
		if errors.Is(err, sql.ErrNoRows) {
			o, err = scanObject(tx.QueryRow("SELECT "+objectCols+" FROM objects WHERE target = ?1 AND key = ?2", target, key))
		}
		return err
	})
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return Object{}, fmt.Errorf("dedup: fail version of object %s: %w", key, err)
	}
	return o, nil
}

// ResetVersion forgets a failed version of object key, for a deliberate
// retry; a done version stays.
func (s *SQLite) ResetVersion(ctx context.Context, target, key, version string) error {
	if err := checkObject(target, key, version); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec("DELETE FROM object_versions WHERE target = ?1 AND object = ?2 AND version = ?3 AND state = 'failed'", target, key, version)
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: reset version of object %s: %w", key, err)
	}
	return nil
}

// NoteStale counts a line refused as older than the version object key
// holds.
func (s *SQLite) NoteStale(ctx context.Context, target, key string) error {
	if err := checkKey(target, key); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec("UPDATE objects SET stale = stale + 1 WHERE target = ?1 AND key = ?2", target, key)
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: note a stale line of object %s: %w", key, err)
	}
	return nil
}

// sqlCountObjects counts a target's objects ("" for every target) in one
// statement, so one snapshot.
const sqlCountObjects = `SELECT
	(SELECT count(*) FROM objects WHERE ?1 = '' OR target = ?1),
	(SELECT coalesce(sum(updates), 0) FROM objects WHERE ?1 = '' OR target = ?1),
	(SELECT count(*) FROM objects WHERE (?1 = '' OR target = ?1) AND pending <> ''),
	(SELECT coalesce(sum(stale), 0) FROM objects WHERE ?1 = '' OR target = ?1),
	(SELECT count(*) FROM object_versions WHERE (?1 = '' OR target = ?1) AND state = 'done'),
	(SELECT count(*) FROM object_versions WHERE (?1 = '' OR target = ?1) AND state = 'failed')`

// CountObjects counts the objects of target ("" for all targets) and their
// versions.
func (s *SQLite) CountObjects(ctx context.Context, target string) (ObjectCounts, error) {
	if s.isClosed.Load() {
		return ObjectCounts{}, ErrClosed
	}
	return countObjects(s.rdb.QueryRowContext(ctx, sqlCountObjects, target))
}

func countObjects(row *sql.Row) (ObjectCounts, error) {
	var c ObjectCounts
	if err := row.Scan(&c.Objects, &c.Updates, &c.Pending, &c.Stale, &c.Versions, &c.Failed); err != nil {
		return ObjectCounts{}, fmt.Errorf("dedup: count objects: %w", err)
	}
	return c, nil
}

// ListObjects yields the objects of target ("" for all), ordered by
// target and key.
func (s *SQLite) ListObjects(ctx context.Context, target string) iter.Seq2[Object, error] {
	return listObjects(s.isClosed.Load, func(afterTarget, afterKey string) ([]Object, error) {
		return readObjects(ctx, s.rdb, target, afterTarget, afterKey)
	})
}

// sqlListObjects is the keyset-paged query of ListObjects: ?1 the target
// ("" for all), ?2 and ?3 the target and key of the last row of the
// previous page.
var sqlListObjects = "SELECT " + objectCols + ` FROM objects
	WHERE (?1 = '' OR target = ?1) AND (target, key) > (?2, ?3)
	ORDER BY target, key LIMIT ` + objectPageSize

// readObjects reads the page of ListObjects after (afterTarget, afterKey).
func readObjects(ctx context.Context, db *sql.DB, target, afterTarget, afterKey string) ([]Object, error) {
	rows, err := db.QueryContext(ctx, sqlListObjects, target, afterTarget, afterKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var page []Object
	for rows.Next() {
		o, err := scanObject(rows)
		if err != nil {
			return nil, err
		}
		page = append(page, o)
	}
	return page, rows.Err()
}
