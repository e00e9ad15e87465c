package dedup

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgObjectQueries are the statements of the store of objects, written for
// the store's schema.
type pgObjectQueries struct {
	get, lock, version, begin, applyNew, applyHeld string
	fail, settle, reset, stale                     string
	count, countAll, listAll, listTarget           string
}

// pgApplySet is what ApplyVersion sets on a stored object o: $3 is the
// version, $4 its tag, $5 its order. Applying the version held keeps its
// applied_at and counts no update; a pending update of this version is
// settled, one of another stays.
const pgApplySet = `
				updates = o.updates + CASE WHEN o.version <> $3 THEN 1 ELSE 0 END,
				applied_at = CASE WHEN o.version = $3 THEN o.applied_at ELSE now() END,
				version = $3, tag = $4, ord = $5,
				pending = CASE WHEN o.pending = $3 THEN '' ELSE o.pending END,
				pending_ord = CASE WHEN o.pending = $3 THEN '' ELSE o.pending_ord END,
				pending_since = CASE WHEN o.pending = $3 THEN NULL ELSE o.pending_since END,
				updated_at = now()`

// pgApplyDone ends both apply statements: the version applied joins the
// history as done, in the same statement as the object row, which a
// failed version turns done and a done one keeps as it is.
const pgApplyDone = `),
			done AS (
				INSERT INTO {s}.object_versions AS v (target, object, version, state, ord, at)
				SELECT target, key, version, 'done', ord, updated_at FROM applied
				ON CONFLICT (target, object, version) DO UPDATE SET state = 'done', status = 0, problem = '',
					ord = excluded.ord, at = excluded.at
				WHERE v.state <> 'done')
			SELECT ` + objectCols + ` FROM applied`

// newPGObjectQueries writes the statements of the store of objects with x,
// which puts the schema in place of {s}.
func newPGObjectQueries(x func(string) string) pgObjectQueries {
	objects := func(where string) string {
		return x(`SELECT
			(SELECT count(*) FROM {s}.objects WHERE ` + where + `),
			(SELECT coalesce(sum(updates), 0) FROM {s}.objects WHERE ` + where + `),
			(SELECT count(*) FROM {s}.objects WHERE ` + where + ` AND pending <> ''),
			(SELECT coalesce(sum(stale), 0) FROM {s}.objects WHERE ` + where + `),
			(SELECT count(*) FROM {s}.object_versions WHERE ` + where + ` AND state = 'done'),
			(SELECT count(*) FROM {s}.object_versions WHERE ` + where + ` AND state = 'failed')`)
	}
	return pgObjectQueries{
		get:     x("SELECT " + objectCols + " FROM {s}.objects WHERE target = $1 AND key = $2"),
		lock:    x("SELECT " + objectCols + " FROM {s}.objects WHERE target = $1 AND key = $2 FOR UPDATE"),
		version: x("SELECT version, state, ord, status, problem, at FROM {s}.object_versions WHERE target = $1 AND object = $2 AND version = $3"),
		// begin keeps pending_since while the same update stays pending.
		begin: x(`UPDATE {s}.objects SET
				pending = $3, pending_ord = $4,
				pending_since = CASE WHEN pending = $3 THEN pending_since ELSE now() END,
				updated_at = now()
			WHERE target = $1 AND key = $2
			RETURNING ` + objectCols),
		// applyNew stores the object with the identifier $6 or updates it;
		// applyHeld, without an identifier, updates it only.
		applyNew: x(`WITH applied AS (
				INSERT INTO {s}.objects AS o (target, key, identifier, version, tag, ord, applied_at, created_at, updated_at)
				VALUES ($1, $2, $6, $3, $4, $5, now(), now(), now())
				ON CONFLICT (target, key) DO UPDATE SET identifier = $6,` + pgApplySet + `
				RETURNING ` + objectCols + pgApplyDone),
		applyHeld: x(`WITH applied AS (
				UPDATE {s}.objects AS o SET` + pgApplySet + `
				WHERE o.target = $1 AND o.key = $2
				RETURNING ` + objectCols + pgApplyDone),
		fail: x(`INSERT INTO {s}.object_versions AS v (target, object, version, state, status, problem, at)
			VALUES ($1, $2, $3, 'failed', $4, $5, now())
			ON CONFLICT (target, object, version) DO UPDATE SET state = 'failed', status = excluded.status, problem = excluded.problem, at = excluded.at
			WHERE v.state <> 'done'`),
		settle: x(`UPDATE {s}.objects SET pending = '', pending_ord = '', pending_since = NULL, updated_at = now()
			WHERE target = $1 AND key = $2 AND pending = $3
			RETURNING ` + objectCols),
		reset:    x("DELETE FROM {s}.object_versions WHERE target = $1 AND object = $2 AND version = $3 AND state = 'failed'"),
		stale:    x("UPDATE {s}.objects SET stale = stale + 1 WHERE target = $1 AND key = $2"),
		count:    objects("target = $1"),
		countAll: objects("true"),
		// The lists are keyset-paged: $1 and $2 are the target and key of
		// the last row of the previous page.
		listAll:    x("SELECT " + objectCols + " FROM {s}.objects WHERE (target, key) > ($1, $2) ORDER BY target, key LIMIT " + objectPageSize),
		listTarget: x("SELECT " + objectCols + " FROM {s}.objects WHERE target = $1 AND key > $2 ORDER BY key LIMIT " + objectPageSize),
	}
}

// scanPGObject scans the columns of objectCols.
func scanPGObject(row pgx.Row) (Object, error) {
	var o Object
	var since *time.Time
	err := row.Scan(&o.Target, &o.Key, &o.Identifier, &o.Version, &o.Tag, &o.Order, &o.AppliedAt,
		&o.Pending, &o.PendingOrder, &since, &o.Updates, &o.Stale, &o.CreatedAt, &o.UpdatedAt)
	o.AppliedAt, o.CreatedAt, o.UpdatedAt = o.AppliedAt.UTC(), o.CreatedAt.UTC(), o.UpdatedAt.UTC()
	if since != nil {
		o.PendingSince = since.UTC()
	}
	return o, err
}

// LookupObject returns the object key of target, or an error wrapping
// ErrNotFound; see SQLite.LookupObject.
func (p *Postgres) LookupObject(ctx context.Context, target, key string) (Object, error) {
	if p.isClosed.Load() {
		return Object{}, ErrClosed
	}
	o, err := scanPGObject(p.pool.QueryRow(ctx, p.q.objects.get, target, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Object{}, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return Object{}, p.fail("lookup object "+key, err)
	}
	return o, nil
}

// LookupVersion returns what the store holds of version of object key;
// see SQLite.LookupVersion.
func (p *Postgres) LookupVersion(ctx context.Context, target, key, version string) (Version, error) {
	if p.isClosed.Load() {
		return Version{}, ErrClosed
	}
	var v Version
	err := p.pool.QueryRow(ctx, p.q.objects.version, target, key, version).Scan(&v.Version, &v.State, &v.Order, &v.Status, &v.Problem, &v.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Version{}, fmt.Errorf("%w: version %s of object %s", ErrNotFound, version, key)
	}
	if err != nil {
		return Version{}, p.fail("lookup version of object "+key, err)
	}
	v.At = v.At.UTC()
	return v, nil
}

// BeginUpdate records the intent of an update of object key to version;
// see SQLite.BeginUpdate.
func (p *Postgres) BeginUpdate(ctx context.Context, target, key, version, order string) (Object, error) {
	if err := checkObject(target, key, version); err != nil {
		return Object{}, err
	}
	if p.isClosed.Load() {
		return Object{}, ErrClosed
	}
	o, err := scanPGObject(p.w(ctx).QueryRow(ctx, p.q.objects.begin, target, key, version, order))
	if errors.Is(err, pgx.ErrNoRows) {
		return Object{}, fmt.Errorf("%w: object %s", ErrNotFound, key)
	}
	if err != nil {
		return Object{}, p.fail("begin update of object "+key, err)
	}
	return o, nil
}

// ApplyVersion records a version of object key the server confirmed, in
// one statement; see SQLite.ApplyVersion.
func (p *Postgres) ApplyVersion(ctx context.Context, target, key string, a Applied) (Object, error) {
	if err := checkObject(target, key, a.Version); err != nil {
		return Object{}, err
	}
	if p.isClosed.Load() {
		return Object{}, ErrClosed
	}
	var row pgx.Row
	if a.Identifier != "" {
		row = p.w(ctx).QueryRow(ctx, p.q.objects.applyNew, target, key, a.Version, a.Tag, a.Order, a.Identifier)
	} else {
		row = p.w(ctx).QueryRow(ctx, p.q.objects.applyHeld, target, key, a.Version, a.Tag, a.Order)
	}
	o, err := scanPGObject(row)
	if errors.Is(err, pgx.ErrNoRows) { // not stored, and no identifier to store it with
		err = fmt.Errorf("%w: object %s has no identifier", ErrInvalidArgument, key)
	}
	if err != nil {
		return Object{}, p.fail("apply version of object "+key, err)
	}
	return o, nil
}

// FailVersion records the server's terminal answer to an update of object
// key to version; see SQLite.FailVersion. It holds the object's row
// locked from its first read, so the object it returns is the one it
// wrote. An object not stored is left so: nothing is recorded and the
// zero Object returned, as SQLite does.
func (p *Postgres) FailVersion(ctx context.Context, target, key, version string, f Failure) (Object, error) {
	if err := checkObject(target, key, version); err != nil {
		return Object{}, err
	}
	if p.isClosed.Load() {
		return Object{}, ErrClosed
	}
	var o Object
	err := pgx.BeginFunc(ctx, p.w(ctx), func(tx pgx.Tx) error {
		var err error
		o, err = scanPGObject(tx.QueryRow(ctx, p.q.objects.lock, target, key))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.q.objects.fail, target, key, version, f.Status, f.Problem); err != nil {
			return err
		}
		if o.Pending != version {
			return nil
		}
		o, err = scanPGObject(tx.QueryRow(ctx, p.q.objects.settle, target, key, version))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Object{}, nil
	}
	if err != nil {
		return Object{}, p.fail("fail version of object "+key, err)
	}
	return o, nil
}

// ResetVersion forgets a failed version of object key; see
// SQLite.ResetVersion.
func (p *Postgres) ResetVersion(ctx context.Context, target, key, version string) error {
	if err := checkObject(target, key, version); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	if _, err := p.w(ctx).Exec(ctx, p.q.objects.reset, target, key, version); err != nil {
		return p.fail("reset version of object "+key, err)
	}
	return nil
}

// NoteStale counts a line refused as older than the version object key
// holds.
func (p *Postgres) NoteStale(ctx context.Context, target, key string) error {
	if err := checkKey(target, key); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	if _, err := p.w(ctx).Exec(ctx, p.q.objects.stale, target, key); err != nil {
		return p.fail("note a stale line of object "+key, err)
	}
	return nil
}

// CountObjects counts the objects of target ("" for all targets) and their
// versions in one statement, so one snapshot; a blank schema has none.
func (d *pgdb) CountObjects(ctx context.Context, target string) (ObjectCounts, error) {
	if d.isClosed.Load() {
		return ObjectCounts{}, ErrClosed
	}
	if d.blank {
		return ObjectCounts{}, nil
	}
	var row pgx.Row
	if target == "" {
		row = d.pool.QueryRow(ctx, d.q.objects.countAll)
	} else {
		row = d.pool.QueryRow(ctx, d.q.objects.count, target)
	}
	var c ObjectCounts
	if err := row.Scan(&c.Objects, &c.Updates, &c.Pending, &c.Stale, &c.Versions, &c.Failed); err != nil {
		return ObjectCounts{}, d.fail("count objects", err)
	}
	return c, nil
}

// ListObjects yields the objects of target ("" for all), ordered by
// target and key (in byte order), a page at a time, as
// SQLite.ListObjects does.
func (d *pgdb) ListObjects(ctx context.Context, target string) iter.Seq2[Object, error] {
	return listObjects(d.isClosed.Load, func(afterTarget, afterKey string) ([]Object, error) {
		if d.blank {
			return nil, nil
		}
		q, args := d.q.objects.listAll, []any{afterTarget, afterKey}
		if target != "" {
			q, args = d.q.objects.listTarget, []any{target, afterKey}
		}
		rows, err := d.pool.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Object, error) { return scanPGObject(row) })
	})
}
