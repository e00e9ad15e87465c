package dedup

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/depositkit/deposit/internal/sqlitefile"
)

const driverName = "sqlite"

// pragmas are set on every pooled connection through the DSN. Besides the
// durability settings (WAL, synchronous=NORMAL: a power cut may lose the
// last commits, never corrupt the file; a durable write switches its
// transaction to FULL, see runTx), they size the store for millions
// of rows: an 8 MiB page cache per connection (and only read connections
// map the file, see readMap), and a checkpoint every 8000 pages (about 32
// MiB of log) rather than 1000, which halves the pages written per
// confirmed key when keys are random; the log is cut back to 64 MiB after
// a checkpoint.
const pragmas = "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)" +
	"&_pragma=cache_size(-8192)&_pragma=wal_autocheckpoint(8000)&_pragma=journal_size_limit(67108864)"

// readMap maps the first 32 MiB of the file into each read connection. A
// read of a page there takes neither a copy nor the page cache, whose one
// lock every connection of the process shares (modernc's SQLite is built
// with SQLITE_ENABLE_MEMORY_MANAGEMENT, which puts all caches in one group):
// the look-ahead's connections took it twice per page, about seven pages
// per key. Pages beyond the map, and pages still in the log, are read as
// before. The bound keeps what a connection's map adds to the resident set
// (file pages, shared with the OS cache, but counted for each map) at 32
// MB however large the store: a replay of 100,000 lines on 2 cores peaks
// at 98 MB instead of 70 (21 MB anonymous instead of 57, the connections'
// caches staying empty). A 256 MiB map on every connection made a 1M-line
// run peak at 342 MB.
const readMap = "_pragma=mmap_size(33554432)"

// maxBatch bounds how many queued writes share one transaction.
const maxBatch = 1024

// listPage is how many rows List reads per query.
const listPage = 512

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads the embedded SQLite migrations.
var loadMigrations = sync.OnceValue(func() []migration { return readMigrations(migrationFiles, "migrations") })

// readMigrations reads the migrations in dir of fsys, numbered 1, 2, ...
// by the prefix of their file names.
func readMigrations(fsys embed.FS, dir string) []migration {
	names, err := fs.Glob(fsys, dir+"/*.sql")
	if err != nil {
		panic(err) // the pattern is constant
	}
	slices.Sort(names)
	var ms []migration
	for i, name := range names {
		base := filepath.Base(name)
		n, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || n != i+1 {
			panic("dedup: migration " + base + " is out of sequence")
		}
		b, err := fsys.ReadFile(name)
		if err != nil {
			panic(err)
		}
		ms = append(ms, migration{version: n, name: base, sql: string(b)})
	}
	return ms
}

// SchemaVersion is the schema version this package writes: the SQLite
// user_version of every store it has opened for writing, and the one
// OpenReadOnly requires.
func SchemaVersion() int { return len(loadMigrations()) }

// Option configures Open.
type Option func(*options)

type options struct {
	now func() time.Time
	// beforeCommit, when set, runs in every write transaction just before
	// its commit (a test's view of the setting in force).
	beforeCommit func(tx *sql.Tx)
}

// WithClock sets the clock that stamps CreatedAt and UpdatedAt; the default
// is time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *options) { o.now = now }
}

// SQLite is the Store kept in one SQLite file. It is safe for concurrent use
// by multiple goroutines and by several processes opening the same file.
//
// Writes go through one writer goroutine that commits whatever is queued in
// one transaction (group commit); each caller still gets its own result.
// Transactions take the write lock at their start (BEGIN IMMEDIATE), so
// writers in other processes wait for each other (up to 10 s) instead of
// overwriting each other's results. Reads use a separate pool of read-only
// connections and see every write that has returned.
//
// Durability: a write that has returned survives the process dying at any
// moment. A write made under WithDurableCommit survives a power cut or a
// kernel crash too, with every write that returned before it; other writes
// are committed with synchronous=NORMAL, and a power cut may lose the last
// of them (the file stays sound, as it was a little earlier).
type SQLite struct {
	path         string
	now          func() time.Time
	beforeCommit func(tx *sql.Tx) // see options

	wdb *sql.DB // one connection: the writer
	rdb *sql.DB // read-only pool

	stInsert, stBegin, stConfirm, stComplete, stFail, stGet, stReset *sql.Stmt // on wdb
	stMarkDone, stClaimNew, stClaim                                  *sql.Stmt // on wdb
	stLookup, stLookupMany, stLookupDone                             *sql.Stmt // on rdb

	owners *ownerLocks // the claimers' locks, which tell a dead one (owner_lock.go)

	mu         sync.RWMutex // guards sending on queue against Close
	closed     bool
	isClosed   atomic.Bool
	queue      chan *op
	writerDone chan struct{}
}

// Open opens the deposit store at path, creating it if the file is missing
// or empty. The file is identified read-only first: a file that is not a
// deposit store (not SQLite, another program's database, truncated or
// corrupt) gives an error wrapping ErrNotDepositStore, and a store from a
// newer version of this package one wrapping ErrNewerSchema; in both cases
// the file is left exactly as it was. A read-only file or directory is an
// error too. Close the store when done.
func Open(path string, opts ...Option) (*SQLite, error) {
	o := options{now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" {
		return nil, fmt.Errorf("%w: empty store path", ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("dedup: store %s: %w", path, err)
	}
	if _, err := identify(abs); err != nil {
		return nil, err
	}
	if err := checkWritable(abs); err != nil {
		return nil, err
	}

	s := &SQLite{path: abs, now: o.now, beforeCommit: o.beforeCommit, queue: make(chan *op, maxBatch), writerDone: make(chan struct{})}
	if err := s.open(); err != nil {
		s.closeDBs()
		return nil, s.full(err)
	}
	s.owners = newOwnerLocks(abs)
	go s.writer()
	return s, nil
}

// journalMode opens the first writer connection, whose DSN switches the file
// to WAL, and reads the mode back. Switching needs a moment of exclusive
// access, and SQLite does not wait for it through the busy timeout: when
// several processes open one new store at once, some get SQLITE_BUSY here.
// They retry, boundedly, with growing waits (about 10 s in all, the busy
// timeout).
func (s *SQLite) journalMode(ctx context.Context) (string, error) {
	wait := 5 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		var mode string
		err := s.wdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
		if err == nil || !isBusy(err) || time.Now().Add(wait).After(deadline) {
			return mode, err
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (or an extended code
// of it).
func isBusy(err error) bool {
	var coded interface{ Code() int }
	return errors.As(err, &coded) && coded.Code()&0xff == 5
}

// open opens both pools, migrates the schema and prepares statements.
func (s *SQLite) open() error {
	var err error
	s.wdb, err = sql.Open(driverName, sqlitefile.URI(s.path, "_txlock=immediate&"+pragmas))
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", s.path, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	ctx := context.Background()

	mode, err := s.journalMode(ctx)
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("dedup: store %s: journal mode is %q, not wal (is the file system a network one?)", s.path, mode)
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}

	s.rdb, err = sql.Open(driverName, sqlitefile.URI(s.path, pragmas+"&_pragma=query_only(1)&"+readMap))
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", s.path, err)
	}
	n := max(4, 2*runtime.GOMAXPROCS(0))
	s.rdb.SetMaxOpenConns(n)
	s.rdb.SetMaxIdleConns(n)

	for _, p := range []struct {
		db   *sql.DB
		st   **sql.Stmt
		text string
	}{
		{s.wdb, &s.stInsert, sqlInsert},
		{s.wdb, &s.stBegin, sqlBegin},
		{s.wdb, &s.stConfirm, sqlConfirm},
		{s.wdb, &s.stMarkDone, sqlMarkDone},
		{s.wdb, &s.stComplete, sqlComplete},
		{s.wdb, &s.stFail, sqlFail},
		{s.wdb, &s.stGet, sqlGet},
		{s.wdb, &s.stReset, sqlReset},
		{s.wdb, &s.stClaimNew, sqlClaimNew},
		{s.wdb, &s.stClaim, sqlClaim},
		{s.rdb, &s.stLookup, sqlGet},
		{s.rdb, &s.stLookupMany, sqlGetMany},
		{s.rdb, &s.stLookupDone, sqlGetDone},
	} {
		if *p.st, err = p.db.PrepareContext(ctx, p.text); err != nil {
			return fmt.Errorf("dedup: store %s: %w", s.path, err)
		}
	}
	return nil
}

// migrate brings the schema to schemaVersion in one transaction, after
// checking again, under the write lock, what the file holds: another
// process may have created the store since identify looked.
func (s *SQLite) migrate(ctx context.Context) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", s.path, err)
	}
	defer tx.Rollback()
	var appID int64
	var version, objects int
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotDepositStore, s.path, err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotDepositStore, s.path, err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema").Scan(&objects); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotDepositStore, s.path, err)
	}
	ms := loadMigrations()
	from := 0
	switch {
	case appID == 0 && objects == 0:
		if _, err := tx.ExecContext(ctx, `CREATE TABLE schema_migrations (
			version    INTEGER NOT NULL PRIMARY KEY,
			name       TEXT    NOT NULL,
			applied_at INTEGER NOT NULL
		) STRICT`); err != nil {
			return fmt.Errorf("dedup: store %s: create schema: %w", s.path, err)
		}
	case uint32(appID) != applicationID:
		return fmt.Errorf("%w: %s is another program's SQLite database", ErrNotDepositStore, s.path)
	case version > len(ms):
		return fmt.Errorf("%w: %s has schema version %d, this program knows up to %d: use a newer deposit", ErrNewerSchema, s.path, version, len(ms))
	case version == len(ms):
		return nil
	default:
		from = version
	}
	renamed := 0
	for _, m := range ms[from:] {
		if renamesTargets(m) {
			if renamed, err = fillRenamedTargetsSQLite(ctx, tx); err != nil {
				return fmt.Errorf("dedup: store %s: migration %s: %w", s.path, m.name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("dedup: store %s: migration %s: %w", s.path, m.name, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, s.stamp()); err != nil {
			return fmt.Errorf("dedup: store %s: migration %s: %w", s.path, m.name, err)
		}
	}
	// PRAGMA takes no parameters; both values are integers of ours.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA application_id = %d", applicationID)); err != nil {
		return fmt.Errorf("dedup: store %s: %w", s.path, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", len(ms))); err != nil {
		return fmt.Errorf("dedup: store %s: %w", s.path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("dedup: store %s: create schema: %w", s.path, err)
	}
	if renamed > 0 {
		// The renamed rows' old pages may still be in the WAL: copy it
		// into the file and empty it. Best effort: a reader in another
		// process can keep it from finishing, and a later checkpoint
		// overwrites those frames.
		_, _ = s.wdb.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	}
	return nil
}

// Path returns the absolute path of the store file.
func (s *SQLite) Path() string { return s.path }

// Close waits for queued writes to commit, then closes the store. Calls after
// Close return ErrClosed; Close itself may be called more than once.
func (s *SQLite) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.isClosed.Store(true)
	close(s.queue)
	s.mu.Unlock()
	<-s.writerDone
	err := s.closeDBs()
	// Only now, when this handle can write nothing more, are its owners'
	// locks freed.
	s.owners.close()
	return err
}

func (s *SQLite) closeDBs() error {
	var errs []error
	for _, st := range []*sql.Stmt{s.stInsert, s.stBegin, s.stConfirm, s.stMarkDone, s.stComplete, s.stFail, s.stGet, s.stReset, s.stClaimNew, s.stClaim, s.stLookup, s.stLookupMany, s.stLookupDone} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	for _, db := range []*sql.DB{s.rdb, s.wdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dedup: close %s: %w", s.path, err)
	}
	return nil
}

// stamp is the current time in the stored form, unix microseconds.
func (s *SQLite) stamp() int64 { return s.now().UnixMicro() }

const recordCols = "target, key, state, outcome, identifier, status, problem, body, attempts, created_at, updated_at, lease_owner, lease_expires"

// lookupCols are recordCols with NULL for body: LookupMany does not read
// bodies, which are most of a row's bytes.
const lookupCols = "target, key, state, outcome, identifier, status, problem, NULL, attempts, created_at, updated_at, lease_owner, lease_expires"

const (
	sqlGet = "SELECT " + recordCols + " FROM records WHERE target = ?1 AND key = ?2"
	// sqlGetMany takes the keys as one JSON array.
	sqlGetMany = "SELECT " + lookupCols + " FROM records WHERE target = ?1 AND key IN (SELECT value FROM json_each(?2))"
	// sqlGetDone takes the keys as one JSON array and returns the index in
	// it of each key that is done. Walking the array and seeking each key
	// (CROSS JOIN fixes that order) costs a third less than key IN
	// (SELECT ...), which first builds a sorted temporary index of the keys,
	// and the index spares copying each key back.
	sqlGetDone = `SELECT j.key, r.outcome, r.identifier, r.status
		FROM json_each(?2) AS j CROSS JOIN records AS r ON r.target = ?1 AND r.key = j.value
		WHERE r.state = 'done'`
	sqlInsert = `INSERT INTO records (target, key, state, body, attempts, created_at, updated_at)
		VALUES (?1, ?2, 'pending', ?3, 1, ?4, ?4)
		ON CONFLICT (target, key) DO NOTHING`
	sqlBegin = `INSERT INTO records (target, key, state, body, attempts, created_at, updated_at)
		VALUES (?1, ?2, 'pending', ?3, 1, ?4, ?4)
		ON CONFLICT (target, key) DO UPDATE SET
			attempts = records.attempts + 1,
			body = coalesce(records.body, excluded.body),
			updated_at = excluded.updated_at
		WHERE records.state = 'pending'
		RETURNING ` + recordCols
	sqlConfirm = `UPDATE records SET state = 'done', outcome = ?3, identifier = ?4, status = ?5,
			problem = '', updated_at = ?6
		WHERE target = ?1 AND key = ?2 AND state <> 'done'
		RETURNING attempts, created_at, body`
	// sqlMarkDone is sqlConfirm reading nothing back: on a pending key the
	// RETURNING row is about half of a confirmation's time.
	sqlMarkDone = `UPDATE records SET state = 'done', outcome = ?3, identifier = ?4, status = ?5,
			problem = '', updated_at = ?6
		WHERE target = ?1 AND key = ?2 AND state <> 'done'`
	sqlComplete = `INSERT INTO records (target, key, state, outcome, identifier, status, attempts, created_at, updated_at)
		VALUES (?1, ?2, 'done', ?3, ?4, ?5, 0, ?6, ?6)
		ON CONFLICT (target, key) DO UPDATE SET
			state = 'done',
			outcome = excluded.outcome,
			identifier = excluded.identifier,
			status = excluded.status,
			problem = '',
			updated_at = excluded.updated_at
		WHERE records.state <> 'done'
		RETURNING ` + recordCols
	sqlFail = `INSERT INTO records (target, key, state, status, problem, attempts, created_at, updated_at)
		VALUES (?1, ?2, 'failed', ?3, ?4, 0, ?5, ?5)
		ON CONFLICT (target, key) DO UPDATE SET
			state = 'failed',
			status = excluded.status,
			problem = excluded.problem,
			updated_at = excluded.updated_at
		WHERE records.state <> 'done'
		RETURNING ` + recordCols
	sqlClaimNew = `INSERT INTO records (target, key, state, body, attempts, created_at, updated_at, lease_owner, lease_expires)
		VALUES (?1, ?2, 'pending', ?3, 1, ?4, ?4, ?5, ?6)
		ON CONFLICT (target, key) DO NOTHING`
	// sqlClaim takes the lease of an existing row unless another owner's
	// lease is live; only a pending row counts one more attempt. ?7, when
	// not NULL, is an owner proven dead, whose lease counts as expired.
	sqlClaim = `UPDATE records SET
			attempts = attempts + (state = 'pending'),
			body = CASE WHEN state = 'pending' THEN coalesce(body, ?3) ELSE body END,
			updated_at = CASE WHEN state = 'pending' THEN ?4 ELSE updated_at END,
			lease_owner = ?5, lease_expires = ?6
		WHERE target = ?1 AND key = ?2 AND (lease_owner = ?5 OR lease_expires <= ?4 OR lease_owner = ?7)
		RETURNING ` + recordCols
	sqlRenew = `UPDATE records SET lease_expires = ?4 WHERE target = ?1 AND key = ?2 AND lease_owner = ?3 AND lease_expires <> 0`
	// sqlRelease ends the lease but keeps its owner, the key's last
	// claimer, which tells a later deposit whether an uncertain row is its
	// own process's or another's.
	sqlRelease = `UPDATE records SET lease_expires = 0,
			attempts = attempts - (?4 AND state = 'pending')
		WHERE target = ?1 AND key = ?2 AND lease_owner = ?3`
	sqlDropUnsent = `DELETE FROM records WHERE target = ?1 AND key = ?2 AND state = 'pending' AND attempts <= 0`
	sqlReset      = `UPDATE records SET state = 'pending', status = 0, problem = '', updated_at = ?3
		WHERE target = ?1 AND key = ?2 AND state = 'failed'`
)

// scanRecord scans the columns of recordCols.
func scanRecord(row interface{ Scan(...any) error }) (Record, error) {
	var r Record
	var created, updated, expires int64
	err := row.Scan(&r.Target, &r.Key, &r.State, &r.Outcome, &r.Identifier, &r.Status, &r.Problem,
		&r.Body, &r.Attempts, &created, &updated, &r.LeaseOwner, &expires)
	r.CreatedAt = time.UnixMicro(created).UTC()
	r.UpdatedAt = time.UnixMicro(updated).UTC()
	if expires != 0 {
		r.LeaseExpires = time.UnixMicro(expires).UTC()
	}
	return r, err
}

func checkKey(target, key string) error {
	if target == "" {
		return fmt.Errorf("%w: empty target", ErrInvalidArgument)
	}
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	}
	return nil
}

func checkConfirmation(key string, c Confirmation) error {
	if c.Outcome != OutcomeCreated && c.Outcome != OutcomeExisting {
		return fmt.Errorf("%w: confirmation of key %s has outcome %q, want %q or %q", ErrInvalidArgument, key, c.Outcome, OutcomeCreated, OutcomeExisting)
	}
	if c.Identifier == "" {
		return fmt.Errorf("%w: confirmation of key %s has no identifier", ErrInvalidArgument, key)
	}
	return nil
}

// blob maps a nil body to SQL NULL.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

// CheckSettings records s for target on first use; later calls with other
// settings (Ignore compared as a set, Identity in order) return a
// *SettingsMismatchError, which wraps ErrSettingsMismatch and names both.
func (s *SQLite) CheckSettings(ctx context.Context, target string, set Settings) error {
	if target == "" {
		return fmt.Errorf("%w: empty target", ErrInvalidArgument)
	}
	ignore := slices.Compact(slices.Sorted(slices.Values(set.Ignore)))
	if ignore == nil {
		ignore = []string{}
	}
	ignoreJSON, err := json.Marshal(ignore)
	if err != nil {
		return fmt.Errorf("%w: ignore pointers: %v", ErrInvalidArgument, err)
	}
	identity := slices.Clip(set.Identity)
	if identity == nil {
		identity = []string{}
	}
	identityJSON, err := json.Marshal(identity)
	if err != nil {
		return fmt.Errorf("%w: identity pointers: %v", ErrInvalidArgument, err)
	}
	var mismatch error
	err = s.write(ctx, func(tx *sql.Tx) error {
		mismatch = nil
		var rec Settings
		var recIgnore, recIdentity string
		err := tx.QueryRow("SELECT form, ignore_pointers, secret_fingerprint, identity_pointers FROM settings WHERE target = ?", target).
			Scan(&rec.Form, &recIgnore, &rec.SecretFingerprint, &recIdentity)
		if errors.Is(err, sql.ErrNoRows) {
			_, err = tx.Exec("INSERT INTO settings (target, form, ignore_pointers, secret_fingerprint, identity_pointers, created_at) VALUES (?, ?, ?, ?, ?, ?)",
				target, set.Form, string(ignoreJSON), set.SecretFingerprint, string(identityJSON), s.stamp())
			return err
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(recIgnore), &rec.Ignore); err != nil {
			return fmt.Errorf("dedup: store %s: settings of target %s: %w", s.path, target, err)
		}
		if err := json.Unmarshal([]byte(recIdentity), &rec.Identity); err != nil {
			return fmt.Errorf("dedup: store %s: settings of target %s: %w", s.path, target, err)
		}
		if rec.Form != set.Form || !slices.Equal(rec.Ignore, ignore) || rec.SecretFingerprint != set.SecretFingerprint || !slices.Equal(rec.Identity, identity) {
			given := Settings{Form: set.Form, Ignore: ignore, SecretFingerprint: set.SecretFingerprint, Identity: set.Identity}
			if len(rec.Identity) == 0 {
				rec.Identity = nil
			}
			mismatch = &SettingsMismatchError{Target: target, Recorded: rec, Given: given}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return mismatch
}

// describe renders settings for an error message.
func describe(s Settings) string {
	secret := "none"
	if s.SecretFingerprint != "" {
		secret = "fingerprint " + s.SecretFingerprint
	}
	identity := "none"
	if len(s.Identity) > 0 {
		identity = fmt.Sprintf("%q", s.Identity)
	}
	return fmt.Sprintf("form %q, ignore %q, key secret %s, identity %s", s.Form, s.Ignore, secret, identity)
}

// Lookup returns the record of key, or ErrNotFound.
func (s *SQLite) Lookup(ctx context.Context, target, key string) (Record, error) {
	if s.isClosed.Load() {
		return Record{}, ErrClosed
	}
	r, err := scanRecord(s.stLookup.QueryRowContext(ctx, target, key))
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("dedup: lookup %s: %w", key, err)
	}
	return r, nil
}

// LookupMany returns the records of keys in one query; keys without a record
// are absent from the map. The records' Body is nil: a body is needed only
// to send a request, and Begin and Claim return it.
func (s *SQLite) LookupMany(ctx context.Context, target string, keys []string) (map[string]Record, error) {
	if s.isClosed.Load() {
		return nil, ErrClosed
	}
	out := make(map[string]Record, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := s.stLookupMany.QueryContext(ctx, target, jsonStrings(keys))
	if err != nil {
		return nil, fmt.Errorf("dedup: lookup: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("dedup: lookup: %w", err)
		}
		out[r.Key] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dedup: lookup: %w", err)
	}
	return out, nil
}

// jsonStrings is keys as a JSON array, the text the look-up queries read
// with json_each, in one allocation: a key of printable ASCII other than
// a quote or a backslash (a hex digest, say) is written as it is, any
// other is escaped by encoding/json.
func jsonStrings(keys []string) string {
	n := 2
	for _, k := range keys {
		n += len(k) + 3
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteByte('[')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		if !plainJSON(k) {
			q, _ := json.Marshal(k) // a string always encodes
			b.Write(q)
			continue
		}
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// plainJSON reports whether s is a JSON string's content as it is.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// LookupDone appends to dst one record for each of keys, in their order,
// and returns the extended slice: the key's record when it is done, with
// only Target, Key, State, Outcome, Identifier and Status set (what
// answering a finished key needs, a third of a row's columns), else the
// zero Record. It reads them in one query. Appending to a slice the caller
// keeps, rather than filling a map, spares a replay of many keys an
// allocation per key.
func (s *SQLite) LookupDone(ctx context.Context, target string, keys []string, dst []Record) ([]Record, error) {
	if s.isClosed.Load() {
		return dst, ErrClosed
	}
	if len(keys) == 0 {
		return dst, nil
	}
	rows, err := s.stLookupDone.QueryContext(ctx, target, jsonStrings(keys))
	if err != nil {
		return dst, fmt.Errorf("dedup: lookup: %w", err)
	}
	defer rows.Close()
	base := len(dst)
	dst = append(dst, make([]Record, len(keys))...)
	out := dst[base:]
	// Scanning into int64 and string is a plain assignment; an int or an
	// Outcome would go through reflection, an int through text. Declared
	// once, the four are allocated once, not for every row.
	var (
		i, status      int64
		outcome, ident string
	)
	for rows.Next() {
		if err := rows.Scan(&i, &outcome, &ident, &status); err != nil {
			return dst[:base], fmt.Errorf("dedup: lookup: %w", err)
		}
		if i < 0 || i >= int64(len(keys)) {
			return dst[:base], fmt.Errorf("dedup: lookup: key index %d of %d", i, len(keys))
		}
		out[i] = Record{Target: target, Key: keys[i], State: StateDone, Outcome: Outcome(outcome), Identifier: ident, Status: int(status)}
	}
	if err := rows.Err(); err != nil {
		return dst[:base], fmt.Errorf("dedup: lookup: %w", err)
	}
	return dst, nil
}

// Begin records the intent to send a request for key; see Store.
func (s *SQLite) Begin(ctx context.Context, target, key string, body []byte) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	var rec Record
	err := s.write(ctx, func(tx *sql.Tx) error {
		// The common case, a key never seen, is a plain insert whose row is
		// known without reading it back: scanning a RETURNING row costs
		// about as much as the insert itself.
		now := s.stamp()
		res, err := tx.Stmt(s.stInsert).Exec(target, key, blob(body), now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 1 {
			at := time.UnixMicro(now).UTC()
			rec = Record{Target: target, Key: key, State: StatePending, Body: body, Attempts: 1, CreatedAt: at, UpdatedAt: at}
			return nil
		}
		rec, err = scanRecord(tx.Stmt(s.stBegin).QueryRow(target, key, blob(body), now))
		if errors.Is(err, sql.ErrNoRows) { // done or failed: unchanged
			rec, err = scanRecord(tx.Stmt(s.stGet).QueryRow(target, key))
		}
		return err
	})
	if err != nil {
		return Record{}, fmt.Errorf("dedup: begin %s: %w", key, err)
	}
	return rec, nil
}

// complete runs one confirmation inside tx. It returns the record as stored
// and whether the key was already done with another identifier.
// stConfirm, stComplete and stGet are the store's statements bound to tx.
func (s *SQLite) complete(stConfirm, stComplete, stGet *sql.Stmt, target, key string, c Confirmation) (Record, bool, error) {
	// The common case, a pending key, is an update that returns only what
	// the caller does not already know: scanning a whole RETURNING row
	// costs about as much as the update itself.
	now := s.stamp()
	var (
		attempts int
		created  int64
		body     []byte
	)
	err := stConfirm.QueryRow(target, key, string(c.Outcome), c.Identifier, c.Status, now).Scan(&attempts, &created, &body)
	if err == nil {
		return Record{Target: target, Key: key, State: StateDone, Outcome: c.Outcome, Identifier: c.Identifier,
			Status: c.Status, Body: body, Attempts: attempts,
			CreatedAt: time.UnixMicro(created).UTC(), UpdatedAt: time.UnixMicro(now).UTC()}, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Record{}, false, err
	}
	return s.completeUnknown(stComplete, stGet, target, key, c, now)
}

// completeUnknown is complete for a key whose row, if it has one, is done
// already: it inserts the row done, or keeps the first result.
func (s *SQLite) completeUnknown(stComplete, stGet *sql.Stmt, target, key string, c Confirmation, now int64) (Record, bool, error) {
	rec, err := scanRecord(stComplete.QueryRow(target, key, string(c.Outcome), c.Identifier, c.Status, now))
	if err == nil {
		return rec, false, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return Record{}, false, err
	}
	// Already done: the first result stays.
	rec, err = scanRecord(stGet.QueryRow(target, key))
	if err != nil {
		return Record{}, false, err
	}
	return rec, rec.Identifier != c.Identifier, nil
}

// conflictError describes a confirmation that lost to an earlier one.
func conflictError(key, first string, c Confirmation) error {
	return fmt.Errorf("%w: key %s is done with %s, not %s", ErrConflict, key, first, c.Identifier)
}

// Complete records the server's confirmation of key; see Store.
func (s *SQLite) Complete(ctx context.Context, target, key string, c Confirmation) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	if err := checkConfirmation(key, c); err != nil {
		return Record{}, err
	}
	var rec Record
	var conflict bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		rec, conflict, err = s.complete(tx.Stmt(s.stConfirm), tx.Stmt(s.stComplete), tx.Stmt(s.stGet), target, key, c)
		return err
	})
	if err != nil {
		return Record{}, fmt.Errorf("dedup: complete %s: %w", key, err)
	}
	if conflict {
		return rec, conflictError(key, rec.Identifier, c)
	}
	return rec, nil
}

// CompleteMany completes many keys in one transaction; see Store.
func (s *SQLite) CompleteMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]Record, error) {
	keys, err := checkConfirmations(target, items)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Record, len(items))
	if len(items) == 0 {
		return out, nil
	}
	var conflicts []string
	err = s.write(ctx, func(tx *sql.Tx) error {
		conflicts = conflicts[:0]
		stConfirm, stComplete, stGet := tx.Stmt(s.stConfirm), tx.Stmt(s.stComplete), tx.Stmt(s.stGet)
		for _, k := range keys {
			rec, conflict, err := s.complete(stConfirm, stComplete, stGet, target, k, items[k])
			if err != nil {
				return err
			}
			out[k] = rec
			if conflict {
				conflicts = append(conflicts, k)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: complete %d keys: %w", len(keys), err)
	}
	return out, conflictsError(conflicts, firstIdentifiers(conflicts, out), items)
}

// ConfirmMany records many confirmations in one transaction, as
// CompleteMany does, but reads back none of the rows it marks done: a
// batch needs to know only which keys were done already with another
// identifier. It returns those keys, each with the identifier that stays,
// with an error wrapping ErrConflict when there are any.
func (s *SQLite) ConfirmMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]string, error) {
	keys, err := checkConfirmations(target, items)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, nil
	}
	var conflicts []string
	firsts := map[string]string{}
	err = s.write(ctx, func(tx *sql.Tx) error {
		conflicts = conflicts[:0]
		clear(firsts)
		markDone, stComplete, stGet := tx.Stmt(s.stMarkDone), tx.Stmt(s.stComplete), tx.Stmt(s.stGet)
		now := s.stamp()
		for _, k := range keys {
			c := items[k]
			res, err := markDone.Exec(target, k, string(c.Outcome), c.Identifier, c.Status, now)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 1 {
				continue
			}
			rec, conflict, err := s.completeUnknown(stComplete, stGet, target, k, c, now)
			if err != nil {
				return err
			}
			if conflict {
				conflicts = append(conflicts, k)
				firsts[k] = rec.Identifier
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: confirm %d keys: %w", len(keys), err)
	}
	return firsts, conflictsError(conflicts, firsts, items)
}

// firstIdentifiers maps each of keys to its identifier in recs.
func firstIdentifiers(keys []string, recs map[string]Record) map[string]string {
	firsts := make(map[string]string, len(keys))
	for _, k := range keys {
		firsts[k] = recs[k].Identifier
	}
	return firsts
}

// checkConfirmations checks the keys and confirmations of a CompleteMany
// and returns its keys in sorted order, the order they are written in.
func checkConfirmations(target string, items map[string]Confirmation) ([]string, error) {
	keys := slices.Sorted(maps.Keys(items))
	for _, k := range keys {
		if err := checkKey(target, k); err != nil {
			return nil, err
		}
		if err := checkConfirmation(k, items[k]); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// conflictsError describes the confirmations of a CompleteMany that lost to
// earlier ones (nil when none did); firsts holds the identifiers that stay.
func conflictsError(conflicts []string, firsts map[string]string, items map[string]Confirmation) error {
	switch len(conflicts) {
	case 0:
		return nil
	case 1:
		k := conflicts[0]
		return conflictError(k, firsts[k], items[k])
	default:
		k := conflicts[0]
		return fmt.Errorf("%w: %d keys, the first %s is done with %s, not %s", ErrConflict, len(conflicts), k, firsts[k], items[k].Identifier)
	}
}

// Fail records a terminal answer for key; see Store.
func (s *SQLite) Fail(ctx context.Context, target, key string, f Failure) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	var rec Record
	var invalid error
	err := s.write(ctx, func(tx *sql.Tx) error {
		invalid = nil
		var err error
		rec, err = scanRecord(tx.Stmt(s.stFail).QueryRow(target, key, f.Status, f.Problem, s.stamp()))
		if errors.Is(err, sql.ErrNoRows) { // done stays done
			rec, err = scanRecord(tx.Stmt(s.stGet).QueryRow(target, key))
			invalid = fmt.Errorf("%w: key %s is done with %s and cannot fail", ErrInvalidTransition, key, rec.Identifier)
		}
		return err
	})
	if err != nil {
		return Record{}, fmt.Errorf("dedup: fail %s: %w", key, err)
	}
	return rec, invalid
}

// ResetFailed turns a failed key back into pending; see Store.
func (s *SQLite) ResetFailed(ctx context.Context, target, key string) error {
	if err := checkKey(target, key); err != nil {
		return err
	}
	var missing bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		missing = false
		res, err := tx.Stmt(s.stReset).Exec(target, key, s.stamp())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		var one int
		err = tx.QueryRow("SELECT 1 FROM records WHERE target = ? AND key = ?", target, key).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			missing = true
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("dedup: reset %s: %w", key, err)
	}
	if missing {
		return fmt.Errorf("%w: key %s", ErrNotFound, key)
	}
	return nil
}

// Count counts the records of target ("" for all targets) in each state.
func (s *SQLite) Count(ctx context.Context, target string) (Counts, error) {
	if s.isClosed.Load() {
		return Counts{}, ErrClosed
	}
	// One statement, so one snapshot. Pending and failed rows are counted
	// in the partial index records_unsettled; done is the rest.
	all, unsettled, args := "", "", []any(nil)
	if target != "" {
		all, unsettled, args = " WHERE target = ?1", "target = ?1 AND ", []any{target}
	}
	q := "SELECT (SELECT count(*) FROM records" + all + ")," +
		" (SELECT count(*) FROM records INDEXED BY records_unsettled WHERE " + unsettled + "state <> 'done' AND state = 'pending')," +
		" (SELECT count(*) FROM records INDEXED BY records_unsettled WHERE " + unsettled + "state <> 'done' AND state = 'failed')"
	var total int
	var c Counts
	if err := s.rdb.QueryRowContext(ctx, q, args...).Scan(&total, &c.Pending, &c.Failed); err != nil {
		return Counts{}, fmt.Errorf("dedup: count: %w", err)
	}
	c.Done = total - c.Pending - c.Failed
	return c, nil
}

// List yields the records of target ("" for all) in state ("" for any),
// ordered by target and key. It reads a page of rows at a time and holds no
// transaction open between pages, so it never keeps the whole table in
// memory and never blocks writers; a row written while List runs may or may
// not be yielded.
func (s *SQLite) List(ctx context.Context, target string, state State) iter.Seq2[Record, error] {
	return list(target, state, listQuery, s.isClosed.Load, func(q, afterTarget, afterKey string) ([]Record, error) {
		return readPage(ctx, s.rdb, q, afterTarget, afterKey)
	})
}

// list is List over any database: query returns the database's paged
// query, closed reports whether the store was closed, page reads one page
// of the query q after the given row.
func list(target string, state State, query func(target string, state State) (string, error), closed func() bool, page func(q, afterTarget, afterKey string) ([]Record, error)) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		if closed() {
			yield(Record{}, ErrClosed)
			return
		}
		q, err := query(target, state)
		if err != nil {
			yield(Record{}, err)
			return
		}
		afterTarget, afterKey := target, ""
		for {
			rows, err := page(q, afterTarget, afterKey)
			if err != nil {
				yield(Record{}, fmt.Errorf("dedup: list: %w", err))
				return
			}
			for _, r := range rows {
				if !yield(r, nil) {
					return
				}
			}
			if len(rows) < listPage {
				return
			}
			afterTarget, afterKey = rows[len(rows)-1].Target, rows[len(rows)-1].Key
		}
	}
}

// listQuery returns the keyset-paged query of List: ?1 and ?2 are the
// target and key of the last row of the previous page. Pending and failed
// rows are read through the partial index records_unsettled, ordered as it
// is (target, state, key); the state, one of ours, is written into the
// query so that the index applies.
func listQuery(target string, state State) (string, error) {
	cols := "SELECT " + recordCols + " FROM "
	page := " LIMIT " + strconv.Itoa(listPage)
	switch state {
	case "", StateDone:
		where := "(target, key) > (?1, ?2)"
		if target != "" {
			where = "target = ?1 AND key > ?2"
		}
		if state == StateDone {
			where += " AND state = 'done'"
		}
		return cols + "records WHERE " + where + " ORDER BY target, key" + page, nil
	case StatePending, StateFailed:
		// Across targets, the state test is written +state so that the
		// planner walks the index in order instead of sorting each page.
		st := "'" + string(state) + "'"
		where := "(target, state, key) > (?1, " + st + ", ?2) AND state <> 'done' AND +state = " + st
		if target != "" {
			where = "target = ?1 AND key > ?2 AND state <> 'done' AND state = " + st
		}
		return cols + "records INDEXED BY records_unsettled WHERE " + where + " ORDER BY target, state, key" + page, nil
	default:
		return "", fmt.Errorf("%w: unknown state %q", ErrInvalidArgument, state)
	}
}

// readPage reads one page of a List query from db.
func readPage(ctx context.Context, db *sql.DB, q, afterTarget, afterKey string) ([]Record, error) {
	rows, err := db.QueryContext(ctx, q, afterTarget, afterKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	page := make([]Record, 0, listPage)
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		page = append(page, r)
	}
	return page, rows.Err()
}
