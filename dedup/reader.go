package dedup

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/depositkit/deposit/internal/sqlitefile"
)

// Reader reads a deposit store without ever writing to it: it never creates
// the file, never sets a pragma, never migrates, and takes no write lock, so
// a report on a store cannot change it, and runs beside the processes
// writing it without holding them up. It is safe for concurrent use by
// multiple goroutines.
//
// A store that no process has open (no -wal file beside it) is read as an
// immutable file, which creates no -wal or -shm file either; once a writer
// opens it, Reader reads again through the write-ahead log, as a store that
// a process had open from the start is read, using that writer's -wal and
// -shm files (SQLite creates the -shm file if a writer that crashed left
// none). The main file is never written.
type Reader struct {
	path     string
	db       *sqlitefile.DB // nil for a blank file, which holds no records
	isClosed atomic.Bool
}

// TargetCounts is the number of records of one target in each state.
type TargetCounts struct {
	Target string
	Counts
}

// OpenReadOnly opens the deposit store at path for reading. The file is
// identified read-only as Open does, with the same errors (wrapping
// ErrNotDepositStore or ErrNewerSchema) for a file that is not a store this
// package can read. Unlike Open it creates nothing: a missing file is an
// error wrapping fs.ErrNotExist, and a store whose schema is older than this
// package's gives an error wrapping ErrOlderSchema (Open would migrate it).
// An empty file, which Open would make a new store, reads as a store with no
// records. Close the Reader when done.
func OpenReadOnly(path string) (*Reader, error) { return openReadOnly(path, SchemaVersion()) }

// openReadOnly is OpenReadOnly for a package whose schema version is want,
// so that tests can open a store as one written by an older version.
func openReadOnly(path string, want int) (*Reader, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty store path", ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("dedup: store %s: %w", path, err)
	}
	f, err := identify(abs)
	switch {
	case err != nil:
		return nil, err
	case !f.Exists:
		return nil, fmt.Errorf("dedup: store %s: %w", abs, fs.ErrNotExist)
	case f.Blank():
		return &Reader{path: abs}, nil
	case f.UserVersion < want:
		return nil, fmt.Errorf("%w: %s has schema version %d, this program writes %d: open it for writing once to migrate it", ErrOlderSchema, abs, f.UserVersion, want)
	}
	db, err := sqlitefile.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("dedup: store %s: %w", abs, err)
	}
	return &Reader{path: abs, db: db}, nil
}

// Path returns the absolute path of the store file.
func (r *Reader) Path() string { return r.path }

// Close releases the store. Calls after Close return ErrClosed; Close itself
// may be called more than once.
func (r *Reader) Close() error {
	if r.isClosed.Swap(true) || r.db == nil {
		return nil
	}
	if err := r.db.Close(); err != nil {
		return fmt.Errorf("dedup: close %s: %w", r.path, err)
	}
	return nil
}

// sqlCountByTarget counts, in one statement and so one snapshot, every
// record per target (a walk of the primary key index, which holds no
// bodies) and the pending and failed ones per target (a walk of the partial
// index records_unsettled); done is the rest, the great majority in a
// settled store, and is never walked on its own.
const sqlCountByTarget = `SELECT target, '', count(*) FROM records GROUP BY target
	UNION ALL
	SELECT target, state, count(*) FROM records INDEXED BY records_unsettled WHERE state <> 'done' GROUP BY target, state`

// CountByTarget counts the records of each target in each state, in SQL
// from the store's indexes, without reading a record. Targets are ordered
// as List orders them; a store with no records gives none.
func (r *Reader) CountByTarget(ctx context.Context) ([]TargetCounts, error) {
	if r.isClosed.Load() {
		return nil, ErrClosed
	}
	if r.db == nil {
		return nil, nil
	}
	var out []TargetCounts
	err := r.db.Read(func(db *sql.DB) error {
		out = out[:0]
		rows, err := db.QueryContext(ctx, sqlCountByTarget)
		if err != nil {
			return err
		}
		defer rows.Close()
		byTarget := map[string]*Counts{}
		total := map[string]int{}
		for rows.Next() {
			var target, state string
			var n int
			if err := rows.Scan(&target, &state, &n); err != nil {
				return err
			}
			c := byTarget[target]
			if c == nil {
				c = &Counts{}
				byTarget[target] = c
			}
			switch State(state) {
			case "":
				total[target] = n
			case StatePending:
				c.Pending = n
			case StateFailed:
				c.Failed = n
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for target, c := range byTarget {
			c.Done = total[target] - c.Pending - c.Failed
			out = append(out, TargetCounts{Target: target, Counts: *c})
		}
		slices.SortFunc(out, func(a, b TargetCounts) int { return strings.Compare(a.Target, b.Target) })
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: count %s: %w", r.path, err)
	}
	return out, nil
}

// List yields the records of target ("" for all) in state ("" for any),
// ordered by target and key, a page at a time, as SQLite.List does.
func (r *Reader) List(ctx context.Context, target string, state State) iter.Seq2[Record, error] {
	return list(target, state, listQuery, r.isClosed.Load, func(q, afterTarget, afterKey string) ([]Record, error) {
		if r.db == nil {
			return nil, nil
		}
		var page []Record
		err := r.db.Read(func(db *sql.DB) error {
			var err error
			page, err = readPage(ctx, db, q, afterTarget, afterKey)
			return err
		})
		return page, err
	})
}

// CountObjects counts the objects of target ("" for all targets) and their
// versions, as SQLite.CountObjects does; a blank file has none.
func (r *Reader) CountObjects(ctx context.Context, target string) (ObjectCounts, error) {
	if r.isClosed.Load() {
		return ObjectCounts{}, ErrClosed
	}
	if r.db == nil {
		return ObjectCounts{}, nil
	}
	var c ObjectCounts
	err := r.db.Read(func(db *sql.DB) error {
		var err error
		c, err = countObjects(db.QueryRowContext(ctx, sqlCountObjects, target))
		return err
	})
	if err != nil {
		return ObjectCounts{}, fmt.Errorf("dedup: %s: %w", r.path, err)
	}
	return c, nil
}

// ListObjects yields the objects of target ("" for all), ordered by
// target and key, a page at a time, as SQLite.ListObjects does.
func (r *Reader) ListObjects(ctx context.Context, target string) iter.Seq2[Object, error] {
	return listObjects(r.isClosed.Load, func(afterTarget, afterKey string) ([]Object, error) {
		if r.db == nil {
			return nil, nil
		}
		var page []Object
		err := r.db.Read(func(db *sql.DB) error {
			var err error
			page, err = readObjects(ctx, db, target, afterTarget, afterKey)
			return err
		})
		return page, err
	})
}
