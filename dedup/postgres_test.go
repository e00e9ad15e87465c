package dedup

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/pgtest"
)

// pgDatabase is the one database of the test binary's PostgreSQL server
// that the tests share; each store gets a schema of its own in it.
var pgDatabase struct {
	mu  sync.Mutex
	url string
	seq int
}

// pgSchemaURL returns the URL of a schema that no test has used, in the
// shared database, and that schema's name. It skips t (or fails it under
// DEPOSIT_REQUIRE_PEERS=1) without a PostgreSQL server.
func pgSchemaURL(t testing.TB) (string, string) {
	t.Helper()
	pgDatabase.mu.Lock()
	defer pgDatabase.mu.Unlock()
	if pgDatabase.url == "" {
		pgDatabase.url = pgtest.URL(t)
	}
	pgDatabase.seq++
	schema := fmt.Sprintf("t%d", pgDatabase.seq)
	return pgDatabase.url + "&schema=" + schema, schema
}

// openPG opens a new PostgreSQL store in a schema of its own, closed at the
// end of the test.
func openPG(t testing.TB) *Postgres {
	t.Helper()
	u, _ := pgSchemaURL(t)
	s, err := OpenPostgres(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// pgConn connects to the shared database directly, as another program
// would, closed at the end of the test.
func pgConn(t testing.TB) *pgx.Conn {
	t.Helper()
	pgDatabase.mu.Lock()
	u := pgDatabase.url
	pgDatabase.mu.Unlock()
	require.NotEmpty(t, u, "pgSchemaURL first")
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestPostgresConformance(t *testing.T) {
	runConformanceTests(t, func(t *testing.T) testStore { return openPG(t) })
}

func TestPostgresLeases(t *testing.T) {
	runLeaseTests(t, func(t *testing.T) leaseStore { return openPG(t) })
}

func TestPostgresClaimMany(t *testing.T) {
	runClaimManyTests(t, func(t *testing.T) manyClaimer { return openPG(t) })
}

// TestPostgresLeaseIsTheServersClock: a lease ends TTL after the server's
// now() that stamped the row, to the microsecond, whatever the client's
// clock says.
func TestPostgresLeaseIsTheServersClock(t *testing.T) {
	ctx := context.Background()
	s := openPG(t)
	r, err := s.Claim(ctx, target, "k", nil, Lease{Owner: "a", TTL: 90 * time.Second})
	require.NoError(t, err)
	require.Equal(t, r.UpdatedAt.Add(90*time.Second), r.LeaseExpires)

	conn := pgConn(t)
	var server time.Time
	require.NoError(t, conn.QueryRow(ctx, "SELECT now()").Scan(&server))
	require.WithinDuration(t, server, r.UpdatedAt, time.Minute)
}

func TestPostgresPoolsAsProcessesKeepOneResult(t *testing.T) {
	u, _ := pgSchemaURL(t)
	var stores []testStore
	for range 4 {
		s, err := OpenPostgres(context.Background(), u)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	concurrentWriters(t, stores, 16)
}

// TestPostgresPoolsClaimEachKeyOnce has owners in several pools claim the
// same keys at once: each key is leased to exactly one of them.
func TestPostgresPoolsClaimEachKeyOnce(t *testing.T) {
	ctx := context.Background()
	u, _ := pgSchemaURL(t)
	const owners, keys = 6, 50
	winners := make([][]string, owners)
	var wg sync.WaitGroup
	for o := range owners {
		s, err := OpenPostgres(ctx, u)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		wg.Go(func() { // off the test goroutine: assert, not require
			lease := Lease{Owner: fmt.Sprintf("owner-%d", o), TTL: time.Minute}
			for i := range keys {
				key := fmt.Sprintf("k%03d", (i+o*7)%keys)
				r, err := s.Claim(ctx, target, key, []byte(key), lease)
				if err != nil {
					if !assert.ErrorIs(t, err, ErrLeased) || !assert.NotEqual(t, lease.Owner, r.LeaseOwner) {
						return
					}
					continue
				}
				winners[o] = append(winners[o], key)
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, ks := range winners {
		for _, k := range ks {
			seen[k]++
		}
	}
	require.Len(t, seen, keys)
	for k, n := range seen {
		require.Equal(t, 1, n, "key %s was claimed once", k)
	}
}

func TestPostgresConcurrentFirstOpensCreateOneStore(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			s, err := OpenPostgres(ctx, u)
			if err == nil {
				_, err = s.Complete(ctx, target, fmt.Sprintf("k%d", i), created)
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var migrations, records int
	conn := pgConn(t)
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&migrations))
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+schema+".records").Scan(&records))
	require.Equal(t, len(loadPGMigrations()), migrations)
	require.Equal(t, n, records)
}

// schemaDump lists the tables of schema with their row counts, to check
// that a refused schema was left as it was.
func schemaDump(t *testing.T, conn *pgx.Conn, schema string) map[string]int {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	out := map[string]int{}
	for _, tb := range tables {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, tb}.Sanitize()).Scan(&n))
		out[tb] = n
	}
	return out
}

func TestPostgresForeignSchemasAreRefusedUntouched(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup []string // run in the schema, which exists
	}{
		{"another program's table", []string{"CREATE TABLE invoices (id int PRIMARY KEY, total numeric)", "INSERT INTO invoices VALUES (1, 9.5)"}},
		{"another tool's schema_migrations", []string{"CREATE TABLE schema_migrations (version bigint PRIMARY KEY, dirty boolean NOT NULL)", "INSERT INTO schema_migrations VALUES (3, false)"}},
		{"only a view", []string{"CREATE VIEW v AS SELECT 1 AS one"}},
		{"only a function", []string{"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'"}},
		{"a marker table with another row", []string{"CREATE TABLE deposit_store (format text)", "INSERT INTO deposit_store VALUES ('something else')",
			"CREATE TABLE schema_migrations (version int)", "CREATE TABLE settings (x int)", "CREATE TABLE records (x int)"}},
		{"a marker without the store's tables", []string{"CREATE TABLE deposit_store (format text)", "INSERT INTO deposit_store VALUES ('deposit dedup store')"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, schema := pgSchemaURL(t)
			conn := pgConn(t)
			_, err := conn.Exec(ctx, "CREATE SCHEMA "+schema)
			require.NoError(t, err)
			for _, q := range tt.setup {
				_, err := conn.Exec(ctx, "SET search_path TO "+schema+"; "+q)
				require.NoError(t, err, q)
			}
			_, err = conn.Exec(ctx, "RESET search_path")
			require.NoError(t, err)
			before := schemaDump(t, conn, schema)

			_, err = OpenPostgres(ctx, u)
			require.ErrorIs(t, err, ErrNotDepositStore)
			require.Contains(t, err.Error(), "schema "+schema)
			_, err = OpenPostgresReadOnly(ctx, u)
			require.ErrorIs(t, err, ErrNotDepositStore)
			require.Equal(t, before, schemaDump(t, conn, schema), "the schema is left as it was")
		})
	}
}

func TestPostgresEmptySchemaBecomesAStore(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)
	conn := pgConn(t)
	_, err := conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)

	r, err := OpenPostgresReadOnly(ctx, u)
	require.NoError(t, err, "an empty schema reads as a store with no records")
	counts, err := r.CountByTarget(ctx)
	require.NoError(t, err)
	require.Empty(t, counts)
	require.NoError(t, r.Close())
	require.Empty(t, schemaDump(t, conn, schema), "the reader created nothing")

	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Complete(ctx, target, "k", created)
	require.NoError(t, err)
}

func TestPostgresNewerSchemaIsRefusedUntouched(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)
	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	_, err = s.Complete(ctx, target, "k", created)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	conn := pgConn(t)
	_, err = conn.Exec(ctx, "INSERT INTO "+schema+".schema_migrations (version, name) VALUES (99, '0099_future.sql')")
	require.NoError(t, err)
	before := schemaDump(t, conn, schema)

	_, err = OpenPostgres(ctx, u)
	require.ErrorIs(t, err, ErrNewerSchema)
	require.Contains(t, err.Error(), "version 99")
	_, err = OpenPostgresReadOnly(ctx, u)
	require.ErrorIs(t, err, ErrNewerSchema)
	require.Equal(t, before, schemaDump(t, conn, schema))
}

func TestPostgresReopenMigratesOnce(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)
	for range 3 {
		s, err := OpenPostgres(ctx, u)
		require.NoError(t, err)
		require.NoError(t, s.CheckSettings(ctx, target, Settings{Form: "jcs"}))
		require.NoError(t, s.Close())
	}
	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.CheckSettings(ctx, target, Settings{Form: "python"}), ErrSettingsMismatch, "settings survive reopening")
	var n int
	require.NoError(t, pgConn(t).QueryRow(ctx, "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&n))
	require.Equal(t, len(loadPGMigrations()), n)
}

func TestPostgresReader(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)

	_, err := OpenPostgresReadOnly(ctx, u)
	require.ErrorIs(t, err, fs.ErrNotExist, "a missing schema is not created")
	var n int
	require.NoError(t, pgConn(t).QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n))
	require.Equal(t, 0, n)

	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Complete(ctx, target, "a", created)
	require.NoError(t, err)
	_, err = s.Begin(ctx, target, "b", nil)
	require.NoError(t, err)
	_, err = s.Fail(ctx, "other", "c", Failure{Status: 400})
	require.NoError(t, err)

	r, err := OpenPostgresReadOnly(ctx, u)
	require.NoError(t, err)
	counts, err := r.CountByTarget(ctx)
	require.NoError(t, err)
	require.Equal(t, []TargetCounts{
		{Target: target, Counts: Counts{Pending: 1, Done: 1}},
		{Target: "other", Counts: Counts{Failed: 1}},
	}, counts)
	var keys []string
	for rec, err := range r.List(ctx, "", "") {
		require.NoError(t, err)
		keys = append(keys, rec.Key)
	}
	require.Equal(t, []string{"a", "b", "c"}, keys)

	var readOnly string
	require.NoError(t, r.pool.QueryRow(ctx, "SHOW transaction_read_only").Scan(&readOnly))
	require.Equal(t, "on", readOnly, "the server refuses the reader's writes")

	require.NoError(t, r.Close())
	_, err = r.CountByTarget(ctx)
	require.ErrorIs(t, err, ErrClosed)
}

func TestPostgresPasswordIsNeverInErrors(t *testing.T) {
	ctx := context.Background()
	good, _ := pgSchemaURL(t)
	const secret = "s3cr%2Fet-never-printed"
	withPassword := func(raw string) string {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		u.User = url.UserPassword(u.User.Username(), "s3cr/et-never-printed")
		return u.String()
	}
	tests := []struct {
		name string
		url  string
	}{
		{"a wrong password", withPassword(good)},
		{"a password in the query", strings.Replace(good, "?", "?password=s3cr%2Fet-never-printed&", 1)},
		{"an unknown sslmode", withPassword(good) + "&sslmode=sometimes"},
		{"a bad schema name", withPassword(good) + "&schema=Bad-Name"},
		{"a bad port", "postgres://deposit:s3cr%2Fet-never-printed@127.0.0.1:notaport/db"},
		{"an unreachable server", withPassword("postgres://deposit@127.0.0.1:1/db?sslmode=disable&connect_timeout=2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := OpenPostgres(ctx, tt.url)
			require.Error(t, err)
			msg := err.Error()
			require.NotContains(t, msg, "s3cr/et-never-printed")
			require.NotContains(t, msg, secret)
			require.NotContains(t, msg, "never-printed")
			_, err = OpenPostgresReadOnly(ctx, tt.url)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "never-printed")
		})
	}
	t.Run("the store's name has no password", func(t *testing.T) {
		s := openPG(t)
		require.NotContains(t, s.Name(), pgPassword(t, good))
		require.Contains(t, s.Name(), "xxxxx")
	})
}

// pgPassword returns the password of the URL raw.
func pgPassword(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	require.NoError(t, err)
	pw, ok := u.User.Password()
	require.True(t, ok)
	return pw
}

func TestPostgresURLs(t *testing.T) {
	tests := []struct {
		in, conn, schema, name string
		wantErr                bool
	}{
		{in: "postgres://u:pw@h/db", conn: "postgres://u:pw@h/db", schema: "deposit", name: "postgres://u:xxxxx@h/db"},
		{in: "postgresql://u:pw@h:5433/db?sslmode=verify-full&schema=batch_7", conn: "postgresql://u:pw@h:5433/db?sslmode=verify-full", schema: "batch_7", name: "postgresql://u:xxxxx@h:5433/db?schema=batch_7&sslmode=verify-full"},
		{in: "postgres://h/db?password=pw", conn: "postgres://h/db?password=pw", schema: "deposit", name: "postgres://h/db?password=xxxxx"},
		{in: "postgres://h/db?schema=pg_catalog", wantErr: true},
		{in: "postgres://h/db?schema=", wantErr: true},
		{in: "mysql://h/db", wantErr: true},
		{in: "host=h dbname=db", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parsePostgresURL(tt.in)
			if tt.wantErr {
				require.ErrorIs(t, err, ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.conn, got.conn)
			require.Equal(t, tt.schema, got.schema)
			require.Equal(t, tt.name, got.name)
		})
	}
}
