package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Upload is an upload in parts a step began on the server: its id, when
// it was journaled, and the tags of the parts the server confirmed, by
// part number.
type Upload struct {
	ID        string
	CreatedAt time.Time
	Tags      map[int]string
}

func checkUpload(target, key, id string) error {
	if err := checkKey(target, key); err != nil {
		return err
	}
	if id == "" {
		return fmt.Errorf("%w: empty upload id", ErrInvalidArgument)
	}
	return nil
}

// LookupUpload returns the upload journaled under (target, key) with its
// confirmed parts, or an error wrapping ErrNotFound.
func (s *SQLite) LookupUpload(ctx context.Context, target, key string) (Upload, error) {
	if s.isClosed.Load() {
		return Upload{}, ErrClosed
	}
	u := Upload{Tags: map[int]string{}}
	var created int64
	err := s.rdb.QueryRowContext(ctx, "SELECT upload, created_at FROM uploads WHERE target = ?1 AND key = ?2", target, key).Scan(&u.ID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Upload{}, fmt.Errorf("%w: upload %s", ErrNotFound, key)
	}
	if err != nil {
		return Upload{}, fmt.Errorf("dedup: lookup upload %s: %w", key, err)
	}
	u.CreatedAt = microTime(created)
	rows, err := s.rdb.QueryContext(ctx, "SELECT part, tag FROM upload_parts WHERE target = ?1 AND key = ?2", target, key)
	if err != nil {
		return Upload{}, fmt.Errorf("dedup: lookup upload %s: %w", key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int
		var tag string
		if err := rows.Scan(&n, &tag); err != nil {
			return Upload{}, fmt.Errorf("dedup: lookup upload %s: %w", key, err)
		}
		u.Tags[n] = tag
	}
	if err := rows.Err(); err != nil {
		return Upload{}, fmt.Errorf("dedup: lookup upload %s: %w", key, err)
	}
	return u, nil
}

// BeginUpload journals upload id under (target, key), in place of any
// upload journaled there before (whose parts are forgotten).
func (s *SQLite) BeginUpload(ctx context.Context, target, key, id string) error {
	if err := checkUpload(target, key, id); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec("DELETE FROM uploads WHERE target = ?1 AND key = ?2", target, key); err != nil {
			return err
		}
		_, err := tx.Exec("INSERT INTO uploads (target, key, upload, created_at) VALUES (?1, ?2, ?3, ?4)", target, key, id, s.stamp())
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: begin upload %s: %w", key, err)
	}
	return nil
}

// RecordPart records part n of upload id, confirmed with tag; an error
// wrapping ErrNotFound when (target, key) journals no upload id.
func (s *SQLite) RecordPart(ctx context.Context, target, key, id string, n int, tag string) error {
	if err := checkUpload(target, key, id); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.Exec(`INSERT INTO upload_parts (target, key, part, tag)
			SELECT target, key, ?4, ?5 FROM uploads WHERE target = ?1 AND key = ?2 AND upload = ?3
			ON CONFLICT (target, key, part) DO UPDATE SET tag = excluded.tag`, target, key, id, n, tag)
		if err != nil {
			return err
		}
		if got, err := res.RowsAffected(); err == nil && got == 0 {
			return fmt.Errorf("%w: upload %s", ErrNotFound, id)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: record part %d of upload %s: %w", n, key, err)
	}
	return nil
}

// EndUpload forgets upload id of (target, key) and its parts, once it
// is completed or aborted; another upload journaled there is kept.
func (s *SQLite) EndUpload(ctx context.Context, target, key, id string) error {
	if err := checkUpload(target, key, id); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec("DELETE FROM uploads WHERE target = ?1 AND key = ?2 AND upload = ?3", target, key, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: end upload %s: %w", key, err)
	}
	return nil
}

// pgUploadQueries are the statements of the uploads in parts.
type pgUploadQueries struct {
	get, parts, drop, begin, part, end string
}

func newPGUploadQueries(x func(string) string) pgUploadQueries {
	return pgUploadQueries{
		get:   x("SELECT upload, created_at FROM {s}.uploads WHERE target = $1 AND key = $2"),
		parts: x("SELECT part, tag FROM {s}.upload_parts WHERE target = $1 AND key = $2"),
		// drop, then begin, replace an earlier upload of the step, its
		// parts with it.
		drop:  x("DELETE FROM {s}.uploads WHERE target = $1 AND key = $2"),
		begin: x("INSERT INTO {s}.uploads (target, key, upload, created_at) VALUES ($1, $2, $3, now())"),
		part: x(`INSERT INTO {s}.upload_parts (target, key, part, tag)
			SELECT target, key, $4, $5 FROM {s}.uploads WHERE target = $1 AND key = $2 AND upload = $3
			ON CONFLICT (target, key, part) DO UPDATE SET tag = excluded.tag`),
		end: x("DELETE FROM {s}.uploads WHERE target = $1 AND key = $2 AND upload = $3"),
	}
}

// LookupUpload returns the upload journaled under (target, key); see
// SQLite.LookupUpload.
func (p *Postgres) LookupUpload(ctx context.Context, target, key string) (Upload, error) {
	if p.isClosed.Load() {
		return Upload{}, ErrClosed
	}
	u := Upload{Tags: map[int]string{}}
	err := p.pool.QueryRow(ctx, p.q.uploads.get, target, key).Scan(&u.ID, &u.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Upload{}, fmt.Errorf("%w: upload %s", ErrNotFound, key)
	}
	if err != nil {
		return Upload{}, p.fail("lookup upload "+key, err)
	}
	u.CreatedAt = u.CreatedAt.UTC()
	rows, err := p.pool.Query(ctx, p.q.uploads.parts, target, key)
	if err != nil {
		return Upload{}, p.fail("lookup upload "+key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int
		var tag string
		if err := rows.Scan(&n, &tag); err != nil {
			return Upload{}, p.fail("lookup upload "+key, err)
		}
		u.Tags[n] = tag
	}
	if err := rows.Err(); err != nil {
		return Upload{}, p.fail("lookup upload "+key, err)
	}
	return u, nil
}

// BeginUpload journals upload id under (target, key); see
// SQLite.BeginUpload.
func (p *Postgres) BeginUpload(ctx context.Context, target, key, id string) error {
	if err := checkUpload(target, key, id); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	err := pgx.BeginFunc(ctx, p.w(ctx), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, p.q.uploads.drop, target, key); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, p.q.uploads.begin, target, key, id)
		return err
	})
	if err != nil {
		return p.fail("begin upload "+key, err)
	}
	return nil
}

// RecordPart records part n of upload id; see SQLite.RecordPart.
func (p *Postgres) RecordPart(ctx context.Context, target, key, id string, n int, tag string) error {
	if err := checkUpload(target, key, id); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	tagged, err := p.w(ctx).Exec(ctx, p.q.uploads.part, target, key, id, n, tag)
	if err != nil {
		return p.fail(fmt.Sprintf("record part %d of upload %s", n, key), err)
	}
	if tagged.RowsAffected() == 0 {
		return fmt.Errorf("dedup: record part %d of upload %s: %w: upload %s", n, key, ErrNotFound, id)
	}
	return nil
}

// EndUpload forgets upload id of (target, key); see SQLite.EndUpload.
func (p *Postgres) EndUpload(ctx context.Context, target, key, id string) error {
	if err := checkUpload(target, key, id); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	if _, err := p.w(ctx).Exec(ctx, p.q.uploads.end, target, key, id); err != nil {
		return p.fail("end upload "+key, err)
	}
	return nil
}
