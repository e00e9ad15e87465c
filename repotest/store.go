package repotest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "modernc.org/sqlite" // SQLite driver for Config.DBPath

	"github.com/depositkit/deposit/internal/sqlitefile"
)

// ErrNotServerStore is returned by NewHandler and NewServer when Config.DBPath names
// a file that is not a store of this package (another program's database, or no
// SQLite file at all). The file is left untouched.
var ErrNotServerStore = errors.New("repotest: not a repotest store")

// applicationID marks SQLite files written by this package ("dkrt").
const applicationID = 0x646b7274

const schema = `
CREATE TABLE records (
	seq        INTEGER PRIMARY KEY,
	key        TEXT NOT NULL,
	path       TEXT NOT NULL,
	identifier TEXT NOT NULL UNIQUE,
	body       BLOB NOT NULL,
	created_ns INTEGER NOT NULL
);`

// diskStore persists records in a SQLite file. The handler keeps every record in
// memory as well and serializes writes, so the file is written only on create,
// update and delete.
type diskStore struct {
	db *sql.DB
}

// openDisk opens or creates the store at path. It identifies the file read-only
// before opening it for writing, so a file that is not ours is never written to.
func openDisk(path string) (*diskStore, error) {
	fresh, err := identify(path)
	if err != nil {
		return nil, err
	}
	dsn := sqlitefile.URI(path, "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("repotest: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if fresh {
		tx, err := db.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, schema+fmt.Sprintf("PRAGMA application_id = %d;", applicationID))
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
		}
		if err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("repotest: create store %s: %w", path, err)
		}
	}
	return &diskStore{db: db}, nil
}

// identify reports whether path is a new store (absent, empty, or a SQLite file with
// no application id and an empty schema) and refuses anything that is not ours.
func identify(path string) (fresh bool, err error) {
	f, err := sqlitefile.Identify(path, applicationID)
	switch {
	case errors.Is(err, sqlitefile.ErrNotDatabase):
		return false, fmt.Errorf("%w: %s is not a SQLite file (%v)", ErrNotServerStore, path, err)
	case err != nil:
		return false, fmt.Errorf("repotest: open %s: %w", path, err)
	case f.Blank():
		return true, nil
	case f.ApplicationID == applicationID:
		return false, nil
	case f.ApplicationID == 0:
		return false, fmt.Errorf("%w: %s belongs to another program", ErrNotServerStore, path)
	default:
		return false, fmt.Errorf("%w: %s has application id %#x", ErrNotServerStore, path, f.ApplicationID)
	}
}

// load returns every stored record in creation order, and the last
// sequence number given (0 for none), which a deleted record may hold.
func (d *diskStore) load() ([]Record, int64, error) {
	var last int64
	if err := d.db.QueryRow(`SELECT COALESCE(MAX(seq), 0) FROM records`).Scan(&last); err != nil {
		return nil, 0, fmt.Errorf("repotest: load records: %w", err)
	}
	rows, err := d.db.Query(`SELECT key, path, identifier, body, created_ns FROM records WHERE path <> '' ORDER BY seq`)
	if err != nil {
		return nil, 0, fmt.Errorf("repotest: load records: %w", err)
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		var r Record
		var ns int64
		if err := rows.Scan(&r.Key, &r.Path, &r.Identifier, &r.Body, &ns); err != nil {
			return nil, 0, fmt.Errorf("repotest: load records: %w", err)
		}
		r.Created = time.Unix(0, ns).UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("repotest: load records: %w", err)
	}
	return out, last, nil
}

// insert persists one record; seq is its number in creation order (1-based).
func (d *diskStore) insert(seq int64, r Record) error {
	_, err := d.db.Exec(`INSERT INTO records (seq, key, path, identifier, body, created_ns) VALUES (?, ?, ?, ?, ?, ?)`,
		seq, r.Key, r.Path, r.Identifier, r.Body, r.Created.UnixNano())
	if err != nil {
		return fmt.Errorf("repotest: store record: %w", err)
	}
	return nil
}

// remove deletes every record of key. Each row stays, emptied, with no
// path (which every record has), so that its sequence number and
// identifier are never given again.
func (d *diskStore) remove(key string) error {
	if _, err := d.db.Exec(`UPDATE records SET key = '', path = '', body = X'' WHERE key = ? AND path <> ''`, key); err != nil {
		return fmt.Errorf("repotest: delete record: %w", err)
	}
	return nil
}

// replace persists an update: the body of the live record of key.
func (d *diskStore) replace(key string, body []byte) error {
	if _, err := d.db.Exec(`UPDATE records SET body = ? WHERE key = ? AND path <> ''`, body, key); err != nil {
		return fmt.Errorf("repotest: update record: %w", err)
	}
	return nil
}

func (d *diskStore) close() error { return d.db.Close() }
