package dedup

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A store of schema version 2 opened by this version keeps every column of
// every row, and its table still refuses what the constraints forbid.
func TestVersionTwoStoreKeepsEveryColumnAndConstraint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	writeOldStore(t, path, 2,
		`INSERT INTO records (target, key, state, outcome, identifier, status, problem, body, attempts, created_at, updated_at, lease_owner, lease_expires)
			VALUES ('t', 'done1', 'done', 'created', 'id-1', 201, '', X'7B7D', 2, 10, 20, 'owner-a', 0)`,
		`INSERT INTO records (target, key, state, body, attempts, created_at, updated_at, lease_owner, lease_expires)
			VALUES ('t', 'pending1', 'pending', X'7B2278223A317D', 3, 11, 21, 'owner-b', 4102444800000000)`,
		`INSERT INTO records (target, key, state, status, problem, attempts, created_at, updated_at)
			VALUES ('t', 'failed1', 'failed', 422, 'bad title', 1, 12, 22)`)

	s, err := Open(path)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	done, err := s.Lookup(ctx, "t", "done1")
	require.NoError(t, err)
	require.Equal(t, Record{Target: "t", Key: "done1", State: StateDone, Outcome: OutcomeCreated, Identifier: "id-1", Status: 201,
		Body: []byte("{}"), Attempts: 2, CreatedAt: time.UnixMicro(10).UTC(), UpdatedAt: time.UnixMicro(20).UTC(), LeaseOwner: "owner-a"}, done)
	pending, err := s.Lookup(ctx, "t", "pending1")
	require.NoError(t, err)
	require.Equal(t, []byte(`{"x":1}`), pending.Body)
	require.Equal(t, 3, pending.Attempts)
	require.Equal(t, "owner-b", pending.LeaseOwner)
	require.True(t, pending.LeaseExpires.Equal(time.UnixMicro(4102444800000000)))
	failed, err := s.Lookup(ctx, "t", "failed1")
	require.NoError(t, err)
	require.Equal(t, StateFailed, failed.State)
	require.Equal(t, "bad title", failed.Problem)
	counts, err := s.Count(ctx, "t")
	require.NoError(t, err)
	require.Equal(t, Counts{Pending: 1, Done: 1, Failed: 1}, counts)

	var version int
	require.NoError(t, s.rdb.QueryRow("PRAGMA user_version").Scan(&version))
	require.Equal(t, SchemaVersion(), version)
	var index int
	require.NoError(t, s.rdb.QueryRow("SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'records_unsettled'").Scan(&index))
	require.Equal(t, 1, index)
	for _, bad := range []string{
		"INSERT INTO records (target, key, state, created_at, updated_at) VALUES ('t', 'x', 'lost', 1, 1)",
		"INSERT INTO records (target, key, state, outcome, created_at, updated_at) VALUES ('t', 'y', 'pending', 'maybe', 1, 1)",
		"INSERT INTO records (target, key, state, outcome, created_at, updated_at) VALUES ('t', 'z', 'done', 'created', 1, 1)",
	} {
		_, err := s.wdb.Exec(bad)
		require.ErrorContains(t, err, "CHECK constraint failed", bad)
	}
}

// BenchmarkMigrateFromVersionTwo opens a 1M-row store of schema version 2
// (80% done, 20% pending, as the other benchmarks' store): one op is the
// whole upgrade to the current schema.
//
//	go test -run '^$' -bench MigrateFromVersionTwo -benchtime 3x ./dedup
func BenchmarkMigrateFromVersionTwo(b *testing.B) {
	for range b.N {
		b.StopTimer()
		path := filepath.Join(b.TempDir(), "v2.db")
		writeOldStore(b, path, 2, fmt.Sprintf(`
			WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %d)
			INSERT INTO records (target, key, state, outcome, identifier, status, body, attempts, created_at, updated_at)
			SELECT 't', printf('%%064x', i),
				CASE WHEN i %% 5 = 0 THEN 'pending' ELSE 'done' END,
				CASE WHEN i %% 5 = 0 THEN '' ELSE 'created' END,
				CASE WHEN i %% 5 = 0 THEN '' ELSE '10.5072/' || i END,
				CASE WHEN i %% 5 = 0 THEN 0 ELSE 201 END,
				CAST('{"title":"record ' || i || '","creators":["A. Author"]}' AS BLOB),
				1, 1767225600000000, 1767225600000000
			FROM n`, benchRows))
		b.StartTimer()
		s, err := Open(path)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/upgrade")
}

// writeOldStore writes at path a store of an older schema version: the
// first version migrations, then the statements given.
func writeOldStore(tb testing.TB, path string, version int, stmts ...string) {
	tb.Helper()
	db, err := sql.Open(driverName, path)
	require.NoError(tb, err)
	ms := loadMigrations()
	require.Less(tb, version, len(ms)+1)
	all := []string{"CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT"}
	for _, m := range ms[:version] {
		all = append(all, m.sql, fmt.Sprintf("INSERT INTO schema_migrations VALUES (%d, '%s', 1)", m.version, m.name))
	}
	all = append(all, stmts...)
	all = append(all, fmt.Sprintf("PRAGMA application_id = %d", applicationID), fmt.Sprintf("PRAGMA user_version = %d", version))
	for _, q := range all {
		_, err := db.Exec(q)
		require.NoError(tb, err, q)
	}
	require.NoError(tb, db.Close())
}
