package dedup

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations_postgres/*.sql
var pgMigrationFiles embed.FS

// loadPGMigrations reads the embedded PostgreSQL migrations. Their version
// numbers are the PostgreSQL store's own, apart from SQLite's.
var loadPGMigrations = sync.OnceValue(func() []migration { return readMigrations(pgMigrationFiles, "migrations_postgres") })

// DefaultPostgresSchema is the schema a PostgreSQL store lives in unless
// its URL names another.
const DefaultPostgresSchema = "deposit"

// pgMarker is the one row of a store's deposit_store table.
const pgMarker = "deposit dedup store"

// pgLockClass is the first key of the advisory lock that migrations take
// ("DPSK"); the second is the hash of the schema name.
const pgLockClass = 0x4450534B

// schemaPattern is what a schema= parameter may name: an identifier that
// needs no quoting to be typed, so that what a user sees in psql is what
// the store uses.
var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Postgres is the Store kept in a schema of a PostgreSQL database, for
// processes on several machines that share one store. It is safe for
// concurrent use by multiple goroutines and by any number of processes
// opening the same database and schema: each transition is one statement
// (an INSERT ... ON CONFLICT or a conditional UPDATE), or a transaction
// that holds the row's lock, so it is atomic across all of them.
//
// Its states, transitions and errors are exactly those of SQLite. Times
// (CreatedAt, UpdatedAt and the leases' expiries) are the database
// server's clock, never a client's, so processes whose clocks disagree
// still agree on when a lease has ended.
//
// Durability: a write that has returned is committed. Whether a commit
// waits for the disk is the session's synchronous_commit, which the
// server, the database, the role or the URL (synchronous_commit=off) may
// set off, trading the last commits before a crash of the server for
// speed; a write made under WithDurableCommit runs with it on whatever
// they set, and survives a crash or power cut of the server.
type Postgres struct {
	pgdb
}

// PostgresReader reads a PostgreSQL store without ever writing to it, for
// reports: it creates no schema, migrates nothing, and its sessions are
// read-only (default_transaction_read_only), so the server itself refuses
// any write. It is safe for concurrent use by multiple goroutines.
type PostgresReader struct {
	pgdb
}

// pgdb is what a Postgres and a PostgresReader share: the pool and the
// store's queries, written for its schema.
type pgdb struct {
	pool     *pgxpool.Pool
	name     string // the URL without its password, for messages
	schema   string
	blank    bool // a reader of a schema that holds nothing: no records
	q        pgQueries
	isClosed atomic.Bool
	// probe, when set, is given the synchronous_commit in force in each
	// write's transaction before it commits (a test's view; see w).
	probe func(setting string)
}

// OpenPostgres opens the deposit store in a PostgreSQL database, creating
// its schema if there is none. rawURL is a postgres:// or postgresql://
// URL as pgx reads it (a libpq connection URI):
//
//	postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=verify-full&schema=NAME
//
// The store lives in the schema NAME, "deposit" by default; schema= is the
// store's own parameter, removed before pgx reads the URL. NAME is a
// lower-case identifier (letters, digits and _), so it needs no quoting.
// Every other parameter is pgx's: TLS through sslmode (disable, allow,
// prefer, which is the default, require, verify-ca, verify-full),
// sslrootcert, sslcert, sslkey; the pool's size through pool_max_conns
// (by default the larger of 4 and the number of CPUs); how long making a
// connection may take through connect_timeout (in seconds, by default 10,
// where libpq waits forever); opening the store, up to its first answers,
// may take twice as long, then it fails rather than wait on a server that
// took the connection and answers nothing. The password may
// also come from PGPASSWORD or a .pgpass file, as with libpq, and is then
// not in the URL at all. The password is never in an error: errors name
// the URL with it replaced by xxxxx.
//
// The schema is identified, read-only, before anything is written: a
// missing or empty schema becomes a new store; a schema that holds
// anything without the store's marker table (deposit_store) gives an error
// wrapping ErrNotDepositStore, and a store from a newer version of this
// package one wrapping ErrNewerSchema, and in both cases nothing is
// changed. Creating or migrating the schema is one transaction under an
// advisory lock, so processes opening a new store at once create it once.
// Close the store when done.
func OpenPostgres(ctx context.Context, rawURL string) (*Postgres, error) {
	p := &Postgres{}
	if err := p.open(ctx, rawURL, false); err != nil {
		return nil, err
	}
	return p, nil
}

// OpenPostgresReadOnly opens the deposit store in a PostgreSQL database for
// reading; rawURL is read as OpenPostgres reads it. The schema is
// identified as OpenPostgres does, with the same errors. Unlike
// OpenPostgres it creates nothing: a missing schema gives an error wrapping
// fs.ErrNotExist, and a store whose schema is older than this package's one
// wrapping ErrOlderSchema (OpenPostgres would migrate it). An empty schema
// reads as a store with no records. Close the reader when done.
func OpenPostgresReadOnly(ctx context.Context, rawURL string) (*PostgresReader, error) {
	r := &PostgresReader{}
	if err := r.open(ctx, rawURL, true); err != nil {
		return nil, err
	}
	return r, nil
}

// pgURL is a store URL taken apart.
type pgURL struct {
	conn    string   // what pgx parses: the URL without schema=
	schema  string   // the store's schema
	name    string   // the URL without its passwords, for messages
	secrets []string // the passwords, to be kept out of errors
}

// parsePostgresURL reads a store URL. Its errors never quote the URL.
func parsePostgresURL(raw string) (pgURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL, which may hold a password
		}
		return pgURL{}, fmt.Errorf("%w: PostgreSQL URL: %v", ErrInvalidArgument, err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return pgURL{}, fmt.Errorf("%w: PostgreSQL URL: scheme %q, want postgres or postgresql", ErrInvalidArgument, u.Scheme)
	}
	var p pgURL
	if pw, ok := u.User.Password(); ok && pw != "" {
		p.secrets = append(p.secrets, pw, url.QueryEscape(pw), url.PathEscape(pw))
	}
	q := u.Query()
	p.schema = DefaultPostgresSchema
	if q.Has("schema") {
		p.schema = q.Get("schema")
		q.Del("schema")
		if !schemaPattern.MatchString(p.schema) || strings.HasPrefix(p.schema, "pg_") {
			return pgURL{}, fmt.Errorf("%w: PostgreSQL URL: schema=%q: want a lower-case name of letters, digits and _ (at most 63, not starting with a digit or pg_)", ErrInvalidArgument, p.schema)
		}
	}
	conn := *u
	conn.RawQuery = q.Encode()
	p.conn = conn.String()

	shown := *u
	sq := shown.Query()
	for _, k := range []string{"password", "sslpassword"} {
		if v := sq.Get(k); v != "" {
			p.secrets = append(p.secrets, v, url.QueryEscape(v))
			sq.Set(k, "xxxxx")
		}
	}
	shown.RawQuery = sq.Encode()
	p.name = shown.Redacted()
	return p, nil
}

// scrubbed is an error whose text has the URL's passwords replaced.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// scrub returns err with every secret in its text replaced by xxxxx.
func scrub(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return &scrubbed{msg: msg, err: err}
}

// open connects, identifies the schema and, unless readOnly, creates or
// migrates it.
func (d *pgdb) open(ctx context.Context, rawURL string, readOnly bool) error {
	u, err := parsePostgresURL(rawURL)
	if err != nil {
		return err
	}
	d.name, d.schema = u.name, u.schema
	if err := d.connect(ctx, u, readOnly); err != nil {
		return scrub(err, u.secrets)
	}
	return nil
}

func (d *pgdb) connect(ctx context.Context, u pgURL, readOnly bool) error {
	cfg, err := pgxpool.ParseConfig(u.conn)
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", d.name, err)
	}
	if readOnly {
		cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A server that takes the connection and never answers (frozen)
		// would hold the opening forever: libpq's default, no timeout.
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	d.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", d.name, err)
	}
	found, err := d.firstLook(ctx, 2*cfg.ConnConfig.ConnectTimeout)
	if err == nil {
		err = d.prepare(ctx, found, readOnly)
	}
	if err != nil {
		closePool(d.pool)
		return err
	}
	return nil
}

// errNoAnswer is the cause of a first look at the store that the server
// did not answer in time.
var errNoAnswer = errors.New("the server took the connection but did not answer")

// firstLook pings the server and identifies the schema within wait (twice
// connect_timeout: making the connection, then its first answers): a
// server that takes connections and then answers nothing (frozen, or a
// proxy in front of a server that is gone) would otherwise hold the
// opening forever, since these first queries have no other deadline.
// The migration that may follow is not bounded: rewriting a large store
// may take longer, and it runs under a lock other openers wait for.
func (d *pgdb) firstLook(ctx context.Context, wait time.Duration) (pgSchema, error) {
	lctx, cancel := context.WithTimeoutCause(ctx, wait, errNoAnswer)
	defer cancel()
	noAnswer := func(err error) error {
		if ctx.Err() == nil && errors.Is(context.Cause(lctx), errNoAnswer) {
			return fmt.Errorf("dedup: store %s: %w within %v (twice connect_timeout)", d.name, errNoAnswer, wait)
		}
		return err
	}
	if err := d.pool.Ping(lctx); err != nil {
		return pgSchema{}, noAnswer(fmt.Errorf("dedup: store %s: %w", d.name, err))
	}
	d.q = newPGQueries(pgx.Identifier{d.schema}.Sanitize())
	found, err := d.identify(lctx, d.pool)
	return found, noAnswer(err)
}

// prepare checks what identify found against what this package writes,
// and, for a store opened for writing, creates or migrates it.
func (d *pgdb) prepare(ctx context.Context, found pgSchema, readOnly bool) error {
	want := len(loadPGMigrations())
	switch {
	case readOnly && !found.exists:
		return fmt.Errorf("dedup: store %s: schema %s: %w", d.name, d.schema, fs.ErrNotExist)
	case readOnly && found.blank():
		d.blank = true
		return nil
	case readOnly && found.version < want:
		return fmt.Errorf("%w: %s, schema %s, has schema version %d, this program writes %d: open it for writing once to migrate it", ErrOlderSchema, d.name, d.schema, found.version, want)
	case found.version == want:
		return nil
	}
	return d.migrate(ctx)
}

// pgSchema is what identify found in the store's schema.
type pgSchema struct {
	exists  bool
	objects int // relations, functions and types in it
	version int // 0 unless it is a deposit store
}

// blank reports whether the schema is missing or holds nothing at all.
func (s pgSchema) blank() bool { return !s.exists || s.objects == 0 }

// querier is a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// sqlSchemaObjects reads, from the catalogs only, whether the schema $1
// exists, how much it holds (relations, functions, and types other than
// tables' row types and arrays), and its tables' names.
const sqlSchemaObjects = `SELECT
	(SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid) +
	(SELECT count(*) FROM pg_proc p WHERE p.pronamespace = n.oid) +
	(SELECT count(*) FROM pg_type t WHERE t.typnamespace = n.oid AND t.typtype <> 'c' AND t.typcategory <> 'A'),
	array(SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p') ORDER BY c.relname)
	FROM pg_namespace n WHERE n.nspname = $1`

// identify finds out, reading only, whether the store's schema is blank or
// a deposit store this package can open, and returns what it found;
// otherwise an error wrapping ErrNotDepositStore or ErrNewerSchema.
func (d *pgdb) identify(ctx context.Context, q querier) (pgSchema, error) {
	var s pgSchema
	var tables []string
	err := q.QueryRow(ctx, sqlSchemaObjects, d.schema).Scan(&s.objects, &tables)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("dedup: store %s: schema %s: %w", d.name, d.schema, err)
	}
	s.exists = true
	if s.objects == 0 {
		return s, nil
	}
	if _, ok := slices.BinarySearch(tables, "deposit_store"); !ok {
		return s, fmt.Errorf("%w: %s: schema %s holds %d tables and other objects (%d in all) but no deposit_store marker: another program's; name another with schema=", ErrNotDepositStore, d.name, d.schema, len(tables), s.objects)
	}
	for _, t := range []string{"schema_migrations", "settings", "records"} {
		if _, ok := slices.BinarySearch(tables, t); !ok {
			return s, fmt.Errorf("%w: %s: schema %s is missing its %s table", ErrNotDepositStore, d.name, d.schema, t)
		}
	}
	var marker string
	if err := q.QueryRow(ctx, d.q.marker).Scan(&marker); err != nil || marker != pgMarker {
		return s, fmt.Errorf("%w: %s: schema %s: its deposit_store table does not mark a deposit store (%q, %v)", ErrNotDepositStore, d.name, d.schema, marker, err)
	}
	if err := q.QueryRow(ctx, d.q.version).Scan(&s.version); err != nil {
		return s, fmt.Errorf("dedup: store %s: schema %s: %w", d.name, d.schema, err)
	}
	if known := len(loadPGMigrations()); s.version > known {
		return s, fmt.Errorf("%w: %s: schema %s has version %d, this program knows up to %d: use a newer deposit", ErrNewerSchema, d.name, d.schema, s.version, known)
	}
	if s.version < 1 {
		return s, fmt.Errorf("%w: %s: schema %s has the deposit marker but no schema version", ErrNotDepositStore, d.name, d.schema)
	}
	return s, nil
}

// migrate creates the schema or brings it to this package's version in
// one transaction, under an advisory lock that every opener takes, after
// identifying the schema again under that lock: another process may have
// created the store since identify looked.
func (d *pgdb) migrate(ctx context.Context) error {
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", d.name, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", pgLockClass, d.schema); err != nil {
		return fmt.Errorf("dedup: store %s: lock schema %s: %w", d.name, d.schema, err)
	}
	found, err := d.identify(ctx, tx)
	if err != nil {
		return err
	}
	ms := loadPGMigrations()
	if found.version == len(ms) {
		return nil
	}
	quoted := pgx.Identifier{d.schema}.Sanitize()
	if !found.exists {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
			return fmt.Errorf("dedup: store %s: create schema %s: %w", d.name, d.schema, err)
		}
	}
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+quoted); err != nil {
		return fmt.Errorf("dedup: store %s: %w", d.name, err)
	}
	for _, m := range ms[found.version:] {
		if renamesTargets(m) {
			if err := fillRenamedTargetsPostgres(ctx, tx); err != nil {
				return fmt.Errorf("dedup: store %s: migration %s: %w", d.name, m.name, err)
			}
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("dedup: store %s: migration %s: %w", d.name, m.name, err)
		}
		if _, err := tx.Exec(ctx, d.q.migrated, m.version, m.name); err != nil {
			return fmt.Errorf("dedup: store %s: migration %s: %w", d.name, m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("dedup: store %s: create schema %s: %w", d.name, d.schema, err)
	}
	return nil
}

// Name returns the store's URL without its password.
func (d *pgdb) Name() string { return d.name }

// Schema returns the name of the store's schema.
func (d *pgdb) Schema() string { return d.schema }

// Close closes the store's connections. Calls after Close return
// ErrClosed; Close itself may be called more than once. It waits at most
// closeWait for the connections to close: see closePool.
func (d *pgdb) Close() error {
	if d.isClosed.Swap(true) {
		return nil
	}
	closePool(d.pool)
	return nil
}

// defaultConnectTimeout bounds a connection's making (TCP, TLS, login)
// when the URL sets no connect_timeout.
const defaultConnectTimeout = 10 * time.Second

// closeWait bounds how long closing a pool waits for its connections to
// close. A healthy server takes milliseconds.
const closeWait = time.Second

// closePool closes pool, waiting at most closeWait. pgx closes each
// connection by telling the server and waiting for it to hang up, and one
// that a deadline broke by sending a cancel request on a new connection
// first: up to 15 s each (pgxpool's destructor, pgconn's asyncClose), all
// of it spent when the server does not answer (frozen, or cut off by the
// network). Past closeWait the close goes on in the background, within
// pgx's own bounds, and nothing of the store is used again: a process
// that gave up on its store ends without waiting for it.
func closePool(pool *pgxpool.Pool) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		pool.Close()
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
	}
}

// fail wraps err from an operation on the store, as ErrClosed when the
// store was closed while it ran.
func (d *pgdb) fail(what string, err error) error {
	if d.isClosed.Load() {
		return ErrClosed
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53100" { // disk_full
		err = &diskFullError{where: d.name, err: err}
	}
	return fmt.Errorf("dedup: %s: %w", what, err)
}

const pgRecordCols = "target, key, state, outcome, identifier, status, problem, body, attempts, created_at, updated_at, lease_owner, lease_expires"

// pgLookupCols are pgRecordCols with NULL for body, for LookupMany.
const pgLookupCols = "target, key, state, outcome, identifier, status, problem, NULL::bytea, attempts, created_at, updated_at, lease_owner, lease_expires"

// pgClaimConflict ends the claim statements: an existing row takes the
// claimer's lease unless another owner's lease is live by the server's
// clock, and only a pending row counts one more attempt.
const pgClaimConflict = `
			ON CONFLICT (target, key) DO UPDATE SET
				attempts = r.attempts + CASE WHEN r.state = 'pending' THEN 1 ELSE 0 END,
				body = CASE WHEN r.state = 'pending' THEN coalesce(r.body, excluded.body) ELSE r.body END,
				updated_at = CASE WHEN r.state = 'pending' THEN excluded.updated_at ELSE r.updated_at END,
				lease_owner = excluded.lease_owner, lease_expires = excluded.lease_expires
			WHERE r.lease_expires IS NULL OR r.lease_owner = excluded.lease_owner OR r.lease_expires <= now()
			RETURNING ` + pgRecordCols

// pgQueries are the store's statements, written for its schema.
type pgQueries struct {
	marker, version, migrated                                     string
	get, getMany, lookupMany, begin, complete, completeMany, fail string
	reset, claim, claimMany, renew, release, dropUnsent           string
	settingsInsert, settingsGet, count, countAll, byTarget        string
	listAll, listAllDone, listTarget, listTargetDone              string
	listAllUnsettled, listTargetUnsettled                         string
	objects                                                       pgObjectQueries
	uploads                                                       pgUploadQueries
}

// newPGQueries writes the store's statements for the schema quoted (a
// quoted identifier): {s} in each text stands for it. Every transition is
// one statement; a RETURNING with no row means its condition refused the
// row as it stands.
func newPGQueries(quoted string) pgQueries {
	x := func(q string) string { return strings.ReplaceAll(q, "{s}", quoted) }
	return pgQueries{
		marker:     x("SELECT format FROM {s}.deposit_store"),
		version:    x("SELECT coalesce(max(version), 0) FROM {s}.schema_migrations"),
		migrated:   x("INSERT INTO {s}.schema_migrations (version, name) VALUES ($1, $2)"),
		get:        x("SELECT " + pgRecordCols + " FROM {s}.records WHERE target = $1 AND key = $2"),
		getMany:    x("SELECT " + pgRecordCols + " FROM {s}.records WHERE target = $1 AND key = ANY($2::text[])"),
		lookupMany: x("SELECT " + pgLookupCols + " FROM {s}.records WHERE target = $1 AND key = ANY($2::text[])"),
		begin: x(`INSERT INTO {s}.records AS r (target, key, state, body, attempts, created_at, updated_at)
			VALUES ($1, $2, 'pending', $3, 1, now(), now())
			ON CONFLICT (target, key) DO UPDATE SET
				attempts = r.attempts + 1,
				body = coalesce(r.body, excluded.body),
				updated_at = excluded.updated_at
			WHERE r.state = 'pending'
			RETURNING ` + pgRecordCols),
		complete: x(`INSERT INTO {s}.records AS r (target, key, state, outcome, identifier, status, attempts, created_at, updated_at)
			VALUES ($1, $2, 'done', $3, $4, $5, 0, now(), now())
			ON CONFLICT (target, key) DO UPDATE SET
				state = 'done', outcome = excluded.outcome, identifier = excluded.identifier,
				status = excluded.status, problem = '', updated_at = excluded.updated_at
			WHERE r.state <> 'done'
			RETURNING ` + pgRecordCols),
		// completeMany is complete for the keys $2 with the outcomes $3,
		// identifiers $4 and statuses $5, in the order given.
		completeMany: x(`INSERT INTO {s}.records AS r (target, key, state, outcome, identifier, status, attempts, created_at, updated_at)
			SELECT $1, u.key, 'done', u.outcome, u.identifier, u.status, 0, now(), now()
			FROM unnest($2::text[], $3::text[], $4::text[], $5::integer[]) WITH ORDINALITY AS u(key, outcome, identifier, status, n)
			ORDER BY u.n
			ON CONFLICT (target, key) DO UPDATE SET
				state = 'done', outcome = excluded.outcome, identifier = excluded.identifier,
				status = excluded.status, problem = '', updated_at = excluded.updated_at
			WHERE r.state <> 'done'
			RETURNING ` + pgRecordCols),
		fail: x(`INSERT INTO {s}.records AS r (target, key, state, status, problem, attempts, created_at, updated_at)
			VALUES ($1, $2, 'failed', $3, $4, 0, now(), now())
			ON CONFLICT (target, key) DO UPDATE SET
				state = 'failed', status = excluded.status, problem = excluded.problem,
				updated_at = excluded.updated_at
			WHERE r.state <> 'done'
			RETURNING ` + pgRecordCols),
		// reset tells, in one snapshot, whether the row exists.
		reset: x(`WITH u AS (
				UPDATE {s}.records SET state = 'pending', status = 0, problem = '', updated_at = now()
				WHERE target = $1 AND key = $2 AND state = 'failed'
				RETURNING 1)
			SELECT EXISTS (SELECT 1 FROM u) OR EXISTS (SELECT 1 FROM {s}.records WHERE target = $1 AND key = $2)`),
		// claim inserts a new key or takes the lease of an existing row
		// unless another owner's lease is live by the server's clock; only
		// a pending row counts one more attempt. $5 is the TTL in
		// microseconds.
		claim: x(`INSERT INTO {s}.records AS r (target, key, state, body, attempts, created_at, updated_at, lease_owner, lease_expires)
			VALUES ($1, $2, 'pending', $3, 1, now(), now(), $4, now() + $5::bigint * interval '1 microsecond')` + pgClaimConflict),
		// claimMany is claim for the rows ($1, $2) with the bodies $5, in
		// the order given; $3 is the owner, $4 the TTL in microseconds.
		// Each claimed row comes with its last claimer before the claim,
		// as the statement's snapshot shows it ('' for a row it does not
		// hold: new, or inserted meanwhile by another process).
		claimMany: x(`WITH u AS (
				SELECT * FROM unnest($1::text[], $2::text[], $5::bytea[]) WITH ORDINALITY AS u(target, key, body, n)),
			prior AS (
				SELECT p.target, p.key, p.lease_owner FROM {s}.records AS p
				JOIN u ON p.target = u.target AND p.key = u.key),
			claimed AS (
				INSERT INTO {s}.records AS r (target, key, state, body, attempts, created_at, updated_at, lease_owner, lease_expires)
				SELECT u.target, u.key, 'pending', u.body, 1, now(), now(), $3, now() + $4::bigint * interval '1 microsecond'
				FROM u ORDER BY u.n` + pgClaimConflict + `)
			SELECT c.*, coalesce(prior.lease_owner, '') FROM claimed AS c
			LEFT JOIN prior ON prior.target = c.target AND prior.key = c.key`),
		// renew locks the rows in key order, the order every statement
		// that writes many rows takes them in, so that two processes'
		// writes never wait for each other in a cycle.
		renew: x(`WITH held AS (
				SELECT r.target, r.key FROM {s}.records AS r
				JOIN unnest($1::text[], $2::text[]) AS u(target, key) ON r.target = u.target AND r.key = u.key
				WHERE r.lease_owner = $3 AND r.lease_expires IS NOT NULL
				ORDER BY r.target, r.key
				FOR UPDATE OF r)
			UPDATE {s}.records AS r SET lease_expires = now() + $4::bigint * interval '1 microsecond'
			FROM held
			WHERE r.target = held.target AND r.key = held.key
			RETURNING r.target, r.key`),
		// release ends the lease but keeps its owner, the key's last
		// claimer.
		release: x(`UPDATE {s}.records SET lease_expires = NULL,
				attempts = attempts - CASE WHEN $4 AND state = 'pending' THEN 1 ELSE 0 END
			WHERE target = $1 AND key = $2 AND lease_owner = $3`),
		// dropUnsent removes a row that an unsent release would leave
		// pending with no attempt.
		dropUnsent:     x(`DELETE FROM {s}.records WHERE target = $1 AND key = $2 AND lease_owner = $3 AND state = 'pending' AND attempts <= 1`),
		settingsInsert: x(`INSERT INTO {s}.settings (target, form, ignore_pointers, secret_fingerprint, identity_pointers, created_at) VALUES ($1, $2, $3, $4, $5, now()) ON CONFLICT (target) DO NOTHING`),
		settingsGet:    x(`SELECT form, ignore_pointers, secret_fingerprint, identity_pointers FROM {s}.settings WHERE target = $1`),
		count: x(`SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'failed')
			FROM {s}.records WHERE target = $1`),
		countAll: x(`SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'failed')
			FROM {s}.records`),
		byTarget: x(`SELECT target, count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'failed')
			FROM {s}.records GROUP BY target ORDER BY target`),
		listAll:        x("SELECT " + pgRecordCols + " FROM {s}.records WHERE (target, key) > ($1, $2) ORDER BY target, key LIMIT " + strconv.Itoa(listPage)),
		listAllDone:    x("SELECT " + pgRecordCols + " FROM {s}.records WHERE (target, key) > ($1, $2) AND state = 'done' ORDER BY target, key LIMIT " + strconv.Itoa(listPage)),
		listTarget:     x("SELECT " + pgRecordCols + " FROM {s}.records WHERE target = $1 AND key > $2 ORDER BY key LIMIT " + strconv.Itoa(listPage)),
		listTargetDone: x("SELECT " + pgRecordCols + " FROM {s}.records WHERE target = $1 AND key > $2 AND state = 'done' ORDER BY key LIMIT " + strconv.Itoa(listPage)),
		// The unsettled lists walk records_unsettled; $3 is the state.
		listAllUnsettled:    x("SELECT " + pgRecordCols + " FROM {s}.records WHERE (target, state, key) > ($1, $3, $2) AND state = $3 AND state <> 'done' ORDER BY target, state, key LIMIT " + strconv.Itoa(listPage)),
		listTargetUnsettled: x("SELECT " + pgRecordCols + " FROM {s}.records WHERE target = $1 AND state = $3 AND key > $2 AND state <> 'done' ORDER BY state, key LIMIT " + strconv.Itoa(listPage)),
		objects:             newPGObjectQueries(x),
		uploads:             newPGUploadQueries(x),
	}
}

// scanPGRecord scans the columns of pgRecordCols, then into more.
func scanPGRecord(row pgx.Row, more ...any) (Record, error) {
	var r Record
	var expires *time.Time
	err := row.Scan(append([]any{&r.Target, &r.Key, &r.State, &r.Outcome, &r.Identifier, &r.Status, &r.Problem,
		&r.Body, &r.Attempts, &r.CreatedAt, &r.UpdatedAt, &r.LeaseOwner, &expires}, more...)...)
	r.CreatedAt = r.CreatedAt.UTC()
	r.UpdatedAt = r.UpdatedAt.UTC()
	if expires != nil {
		r.LeaseExpires = expires.UTC()
	}
	return r, err
}

// upsert runs the transition q for (target, key) and returns the row it
// wrote. When q's condition refuses the row as it stands (no row
// returned), q runs again in a transaction: an ON CONFLICT DO UPDATE locks
// the row even when its WHERE refuses it, so the row then read is the one
// q refused, or q now writes it. wrote reports whether q wrote the row.
func (d *pgdb) upsert(ctx context.Context, q, target, key string, args ...any) (rec Record, wrote bool, err error) {
	rec, err = scanPGRecord(d.w(ctx).QueryRow(ctx, q, args...))
	if !errors.Is(err, pgx.ErrNoRows) {
		return rec, err == nil, err
	}
	err = pgx.BeginFunc(ctx, d.w(ctx), func(tx pgx.Tx) error {
		rec, err = scanPGRecord(tx.QueryRow(ctx, q, args...))
		if err == nil {
			wrote = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		rec, err = scanPGRecord(tx.QueryRow(ctx, d.q.get, target, key))
		return err
	})
	return rec, wrote, err
}

// CheckSettings records s for target on first use; later calls with other
// settings (Ignore compared as a set, Identity in order) return an error
// wrapping ErrSettingsMismatch that names both: a *SettingsMismatchError,
// as SQLite's.
func (p *Postgres) CheckSettings(ctx context.Context, target string, set Settings) error {
	if target == "" {
		return fmt.Errorf("%w: empty target", ErrInvalidArgument)
	}
	if p.isClosed.Load() {
		return ErrClosed
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
	tag, err := p.w(ctx).Exec(ctx, p.q.settingsInsert, target, set.Form, string(ignoreJSON), set.SecretFingerprint, string(identityJSON))
	if err != nil {
		return p.fail("settings of "+target, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	// Settings are never changed once recorded: this read sees the row
	// that the insert met.
	var rec Settings
	var recIgnore, recIdentity string
	if err := p.pool.QueryRow(ctx, p.q.settingsGet, target).Scan(&rec.Form, &recIgnore, &rec.SecretFingerprint, &recIdentity); err != nil {
		return p.fail("settings of "+target, err)
	}
	if err := json.Unmarshal([]byte(recIgnore), &rec.Ignore); err != nil {
		return fmt.Errorf("dedup: store %s: settings of target %s: %w", p.name, target, err)
	}
	if err := json.Unmarshal([]byte(recIdentity), &rec.Identity); err != nil {
		return fmt.Errorf("dedup: store %s: settings of target %s: %w", p.name, target, err)
	}
	if rec.Form != set.Form || !slices.Equal(rec.Ignore, ignore) || rec.SecretFingerprint != set.SecretFingerprint || !slices.Equal(rec.Identity, identity) {
		given := Settings{Form: set.Form, Ignore: ignore, SecretFingerprint: set.SecretFingerprint, Identity: set.Identity}
		if len(rec.Identity) == 0 {
			rec.Identity = nil
		}
		return &SettingsMismatchError{Target: target, Recorded: rec, Given: given}
	}
	return nil
}

// Lookup returns the record of key, or ErrNotFound.
func (p *Postgres) Lookup(ctx context.Context, target, key string) (Record, error) {
	if p.isClosed.Load() {
		return Record{}, ErrClosed
	}
	r, err := scanPGRecord(p.pool.QueryRow(ctx, p.q.get, target, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, p.fail("lookup "+key, err)
	}
	return r, nil
}

// LookupMany returns the records of keys in one query; keys without a record
// are absent from the map. The records' Body is nil, as SQLite.LookupMany's.
func (p *Postgres) LookupMany(ctx context.Context, target string, keys []string) (map[string]Record, error) {
	if p.isClosed.Load() {
		return nil, ErrClosed
	}
	out := make(map[string]Record, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if err := p.readRecords(ctx, p.q.lookupMany, out, target, keys); err != nil {
		return nil, p.fail("lookup", err)
	}
	return out, nil
}

// readRecords adds the records of keys to out, read with q (getMany or
// lookupMany).
func (d *pgdb) readRecords(ctx context.Context, q string, out map[string]Record, target string, keys []string) error {
	rows, err := d.pool.Query(ctx, q, target, keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanPGRecord(rows)
		if err != nil {
			return err
		}
		out[r.Key] = r
	}
	return rows.Err()
}

// Begin records the intent to send a request for key; see Store.
func (p *Postgres) Begin(ctx context.Context, target, key string, body []byte) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	if p.isClosed.Load() {
		return Record{}, ErrClosed
	}
	rec, _, err := p.upsert(ctx, p.q.begin, target, key, target, key, body)
	if err != nil {
		return Record{}, p.fail("begin "+key, err)
	}
	return rec, nil
}

// Complete records the server's confirmation of key; see Store.
func (p *Postgres) Complete(ctx context.Context, target, key string, c Confirmation) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	if err := checkConfirmation(key, c); err != nil {
		return Record{}, err
	}
	if p.isClosed.Load() {
		return Record{}, ErrClosed
	}
	rec, err := scanPGRecord(p.w(ctx).QueryRow(ctx, p.q.complete, target, key, string(c.Outcome), c.Identifier, c.Status))
	if errors.Is(err, pgx.ErrNoRows) {
		// Already done, which is final: the first result stays.
		rec, err = scanPGRecord(p.pool.QueryRow(ctx, p.q.get, target, key))
		if err == nil && rec.Identifier != c.Identifier {
			return rec, conflictError(key, rec.Identifier, c)
		}
	}
	if err != nil {
		return Record{}, p.fail("complete "+key, err)
	}
	return rec, nil
}

// CompleteMany completes many keys in one statement; see Store. Keys are
// written in sorted order, so two calls that share keys wait for each
// other rather than deadlock.
func (p *Postgres) CompleteMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]Record, error) {
	keys, err := checkConfirmations(target, items)
	if err != nil {
		return nil, err
	}
	if p.isClosed.Load() {
		return nil, ErrClosed
	}
	out := make(map[string]Record, len(items))
	if len(items) == 0 {
		return out, nil
	}
	outcomes, ids, statuses := make([]string, len(keys)), make([]string, len(keys)), make([]int32, len(keys))
	for i, k := range keys {
		c := items[k]
		outcomes[i], ids[i], statuses[i] = string(c.Outcome), c.Identifier, int32(c.Status)
	}
	err = retryDeadlock(ctx, func() error {
		clear(out)
		rows, err := p.w(ctx).Query(ctx, p.q.completeMany, target, keys, outcomes, ids, statuses)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			r, err := scanPGRecord(rows)
			if err != nil {
				return err
			}
			out[r.Key] = r
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// The keys not written were done already, which is final.
		var done []string
		for _, k := range keys {
			if _, ok := out[k]; !ok {
				done = append(done, k)
			}
		}
		if len(done) == 0 {
			return nil
		}
		return p.readRecords(ctx, p.q.getMany, out, target, done)
	})
	if err != nil {
		return nil, p.fail(fmt.Sprintf("complete %d keys", len(keys)), err)
	}
	var conflicts []string
	for _, k := range keys {
		if out[k].Identifier != items[k].Identifier {
			conflicts = append(conflicts, k)
		}
	}
	return out, conflictsError(conflicts, firstIdentifiers(conflicts, out), items)
}

// ConfirmMany is CompleteMany returning only the keys that were done
// already with another identifier, each with the identifier that stays;
// see SQLite.ConfirmMany. CompleteMany's one statement reads its rows back
// anyway.
func (p *Postgres) ConfirmMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]string, error) {
	recs, err := p.CompleteMany(ctx, target, items)
	if err != nil && !errors.Is(err, ErrConflict) {
		return nil, err
	}
	firsts := map[string]string{}
	for k, r := range recs {
		if r.Identifier != items[k].Identifier {
			firsts[k] = r.Identifier
		}
	}
	return firsts, err
}

// Fail records a terminal answer for key; see Store.
func (p *Postgres) Fail(ctx context.Context, target, key string, f Failure) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	if p.isClosed.Load() {
		return Record{}, ErrClosed
	}
	rec, err := scanPGRecord(p.w(ctx).QueryRow(ctx, p.q.fail, target, key, f.Status, f.Problem))
	if errors.Is(err, pgx.ErrNoRows) { // done stays done, for ever
		rec, err = scanPGRecord(p.pool.QueryRow(ctx, p.q.get, target, key))
		if err == nil {
			return rec, fmt.Errorf("%w: key %s is done with %s and cannot fail", ErrInvalidTransition, key, rec.Identifier)
		}
	}
	if err != nil {
		return Record{}, p.fail("fail "+key, err)
	}
	return rec, nil
}

// ResetFailed turns a failed key back into pending; see Store.
func (p *Postgres) ResetFailed(ctx context.Context, target, key string) error {
	if err := checkKey(target, key); err != nil {
		return err
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	var found bool
	if err := p.w(ctx).QueryRow(ctx, p.q.reset, target, key).Scan(&found); err != nil {
		return p.fail("reset "+key, err)
	}
	if !found {
		return fmt.Errorf("%w: key %s", ErrNotFound, key)
	}
	return nil
}

// Claim records the intent to send the first request of a deposit, as
// Begin does, and takes lease on the key in the same statement; see
// SQLite.Claim. Whether a lease has expired is decided by the database
// server's clock.
func (p *Postgres) Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error) {
	if err := checkKey(target, key); err != nil {
		return Record{}, err
	}
	if err := checkLease(lease); err != nil {
		return Record{}, err
	}
	if p.isClosed.Load() {
		return Record{}, ErrClosed
	}
	rec, wrote, err := p.upsert(ctx, p.q.claim, target, key, target, key, body, lease.Owner, lease.TTL.Microseconds())
	if err != nil {
		return Record{}, p.fail("claim "+key, err)
	}
	return rec, Claimed{Record: rec, Leased: !wrote}.Err()
}

// ClaimMany is Claim for many keys in one statement and transaction; see
// SQLite.ClaimMany. Rows are claimed in key order, so that two processes
// claiming overlapping groups lock them in the same order.
func (p *Postgres) ClaimMany(ctx context.Context, lease Lease, intents []Intent) ([]Claimed, error) {
	if err := checkIntents(lease, intents); err != nil {
		return nil, err
	}
	if p.isClosed.Load() {
		return nil, ErrClosed
	}
	order := make([]int, len(intents))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(intents[a].Target, intents[b].Target), cmp.Compare(intents[a].Key, intents[b].Key))
	})
	targets, keys, bodies := make([]string, len(intents)), make([]string, len(intents)), make([][]byte, len(intents))
	for i, j := range order {
		targets[i], keys[i], bodies[i] = intents[j].Target, intents[j].Key, intents[j].Body
	}
	got := make(map[Ref]Claimed, len(intents))
	err := retryDeadlock(ctx, func() error {
		clear(got)
		// In a transaction: a refused row stays locked by the statement, so
		// the row then read is the one that refused the claim.
		return pgx.BeginFunc(ctx, p.w(ctx), func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, p.q.claimMany, targets, keys, lease.Owner, lease.TTL.Microseconds(), bodies)
			if err != nil {
				return err
			}
			for rows.Next() {
				var prior string
				r, err := scanPGRecord(rows, &prior)
				if err != nil {
					rows.Close()
					return err
				}
				got[Ref{Target: r.Target, Key: r.Key}] = Claimed{Record: r, PriorOwner: prior}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, in := range intents {
				if _, ok := got[in.Ref]; ok {
					continue
				}
				r, err := scanPGRecord(tx.QueryRow(ctx, p.q.get, in.Target, in.Key))
				if err != nil {
					return err
				}
				got[in.Ref] = Claimed{Record: r, Leased: true, PriorOwner: r.LeaseOwner}
			}
			return nil
		})
	})
	if err != nil {
		return nil, p.fail(fmt.Sprintf("claim %d keys", len(intents)), err)
	}
	out := make([]Claimed, len(intents))
	for i, in := range intents {
		out[i] = got[in.Ref]
	}
	return out, nil
}

// Renew extends lease.Owner's leases on refs to lease.TTL from now, by the
// server's clock, in one statement, and returns the refs it no longer
// holds: released, or taken over by another owner after they expired.
func (p *Postgres) Renew(ctx context.Context, lease Lease, refs []Ref) ([]Ref, error) {
	if err := checkLease(lease); err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, nil
	}
	if p.isClosed.Load() {
		return nil, ErrClosed
	}
	targets, keys := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		targets[i], keys[i] = r.Target, r.Key
	}
	held := make(map[Ref]bool, len(refs))
	err := retryDeadlock(ctx, func() error {
		clear(held)
		rows, err := p.w(ctx).Query(ctx, p.q.renew, targets, keys, lease.Owner, lease.TTL.Microseconds())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Ref
			if err := rows.Scan(&r.Target, &r.Key); err != nil {
				return err
			}
			held[r] = true
		}
		return rows.Err()
	})
	if err != nil {
		return nil, p.fail(fmt.Sprintf("renew %d leases", len(refs)), err)
	}
	var lost []Ref
	for _, r := range refs {
		if !held[r] {
			lost = append(lost, r)
		}
	}
	return lost, nil
}

// retryDeadlock runs f again, a few times, when the server ended it to
// break a deadlock: a statement that locks many rows (Renew) may meet
// another that locks them in another order.
func retryDeadlock(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		var pgErr *pgconn.PgError
		if attempt == 3 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" || ctx.Err() != nil {
			return err
		}
	}
}

// Release ends owner's lease on ref, if owner still holds it, keeping owner
// as the key's last claimer; see SQLite.Release.
func (p *Postgres) Release(ctx context.Context, owner string, ref Ref, unsent bool) error {
	if err := checkKey(ref.Target, ref.Key); err != nil {
		return err
	}
	if owner == "" {
		return fmt.Errorf("%w: release without an owner", ErrInvalidArgument)
	}
	if p.isClosed.Load() {
		return ErrClosed
	}
	if unsent {
		// A first attempt taken back leaves nothing to remember.
		tag, err := p.w(ctx).Exec(ctx, p.q.dropUnsent, ref.Target, ref.Key, owner)
		if err != nil {
			return p.fail("release "+ref.Key, err)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
	}
	if _, err := p.w(ctx).Exec(ctx, p.q.release, ref.Target, ref.Key, owner, unsent); err != nil {
		return p.fail("release "+ref.Key, err)
	}
	return nil
}

// Count counts the records of target ("" for all targets) in each state,
// in one statement and so one snapshot.
func (d *pgdb) Count(ctx context.Context, target string) (Counts, error) {
	if d.isClosed.Load() {
		return Counts{}, ErrClosed
	}
	if d.blank {
		return Counts{}, nil
	}
	var row pgx.Row
	if target == "" {
		row = d.pool.QueryRow(ctx, d.q.countAll)
	} else {
		row = d.pool.QueryRow(ctx, d.q.count, target)
	}
	var c Counts
	if err := row.Scan(&c.Pending, &c.Done, &c.Failed); err != nil {
		return Counts{}, d.fail("count", err)
	}
	return c, nil
}

// CountByTarget counts the records of each target in each state, in one
// statement, without reading a record. Targets are ordered as List orders
// them; a store with no records gives none.
func (d *pgdb) CountByTarget(ctx context.Context) ([]TargetCounts, error) {
	if d.isClosed.Load() {
		return nil, ErrClosed
	}
	if d.blank {
		return nil, nil
	}
	rows, err := d.pool.Query(ctx, d.q.byTarget)
	if err != nil {
		return nil, d.fail("count", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (TargetCounts, error) {
		var t TargetCounts
		err := row.Scan(&t.Target, &t.Pending, &t.Done, &t.Failed)
		return t, err
	})
	if err != nil {
		return nil, d.fail("count", err)
	}
	return out, nil
}

// List yields the records of target ("" for all) in state ("" for any),
// ordered by target and key (in byte order), a page at a time, as
// SQLite.List does: no transaction stays open between pages, and a row
// written while List runs may or may not be yielded.
func (d *pgdb) List(ctx context.Context, target string, state State) iter.Seq2[Record, error] {
	return list(target, state, d.listQuery, d.isClosed.Load, func(q, afterTarget, afterKey string) ([]Record, error) {
		if d.blank {
			return nil, nil
		}
		args := []any{afterTarget, afterKey}
		if state == StatePending || state == StateFailed {
			args = append(args, string(state))
		}
		rows, err := d.pool.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanPGRecord(row) })
	})
}

// listQuery returns the keyset-paged query of List: $1 and $2 are the
// target and key of the last row of the previous page, $3 the state of an
// unsettled list.
func (d *pgdb) listQuery(target string, state State) (string, error) {
	all := target == ""
	switch {
	case state == "" && all:
		return d.q.listAll, nil
	case state == "":
		return d.q.listTarget, nil
	case state == StateDone && all:
		return d.q.listAllDone, nil
	case state == StateDone:
		return d.q.listTargetDone, nil
	case (state == StatePending || state == StateFailed) && all:
		return d.q.listAllUnsettled, nil
	case state == StatePending || state == StateFailed:
		return d.q.listTargetUnsettled, nil
	default:
		return "", fmt.Errorf("%w: unknown state %q", ErrInvalidArgument, state)
	}
}
