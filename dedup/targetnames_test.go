package dedup

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/credential"
)

// The names a store of schema 3 holds, as the client wrote them: InvenioRDM
// targets with the endpoint's token in plain text; one put target both under
// a name from before tokens were digested and under today's.
const (
	oldToken   = "QSECRET-7f3a"
	oldInvenio = "invenio http://repo.example/api?access_token=" + oldToken
	oldDraft   = "invenio-draft http://repo.example/api?access_token=" + oldToken
	oldPut     = "put http://repo.example/recs?community=reef&token=" + oldToken
	plainPut   = "put http://repo.example/recs"
)

// oldTargetRows are the rows of an older store: key "a" done under each
// old name, key "b" done under the old put name and pending under the new
// one, key "c" pending under the old put name and done under the new one.
func oldTargetRows() []string {
	row := func(target, key, state, id string) string {
		outcome := ""
		if state == "done" {
			outcome = "created"
		}
		return fmt.Sprintf(`INSERT INTO records (target, key, state, outcome, identifier, created_at, updated_at)
			VALUES ('%s', '%s', '%s', '%s', '%s', 1, 1)`, target, key, state, outcome, id)
	}
	newPut := credential.Digest(oldPut)
	return []string{
		row(oldInvenio, "a", "done", "10.5072/zenodo.1"),
		row(oldDraft, "a", "done", "1"),
		row(oldPut, "a", "done", "http://repo.example/recs/a?community=reef"),
		row(oldPut, "b", "done", "http://repo.example/recs/b?community=reef"),
		row(newPut, "b", "pending", ""),
		row(oldPut, "c", "pending", ""),
		row(newPut, "c", "done", "http://repo.example/recs/c?community=reef"),
		row(plainPut, "a", "done", "http://repo.example/recs/a"),
		`INSERT INTO settings VALUES ('` + oldInvenio + `', 'jcs', '[]', '', 1)`,
		`INSERT INTO settings VALUES ('` + oldPut + `', 'jcs', '[]', '', 1)`,
		`INSERT INTO settings VALUES ('` + newPut + `', 'jcs', '[]', '', 2)`,
	}
}

// checkRenamedTargets checks what s holds once migrated from oldTargetRows.
func checkRenamedTargets(t *testing.T, s testStore) {
	t.Helper()
	ctx := context.Background()
	want := map[[2]string]string{ // (target, key) -> identifier ("" pending)
		{credential.Digest(oldInvenio), "a"}: "10.5072/zenodo.1",
		{credential.Digest(oldDraft), "a"}:   "1",
		{credential.Digest(oldPut), "a"}:     "http://repo.example/recs/a?community=reef",
		{credential.Digest(oldPut), "b"}:     "http://repo.example/recs/b?community=reef",
		{credential.Digest(oldPut), "c"}:     "http://repo.example/recs/c?community=reef",
		{plainPut, "a"}:                      "http://repo.example/recs/a",
	}
	for tk, id := range want {
		rec, err := s.Lookup(ctx, tk[0], tk[1])
		require.NoError(t, err, "%s %s", tk[0], tk[1])
		require.Equal(t, StateDone, rec.State, "%s %s", tk[0], tk[1])
		require.Equal(t, id, rec.Identifier)
	}
	for _, old := range []string{oldInvenio, oldDraft, oldPut} {
		_, err := s.Lookup(ctx, old, "a")
		require.ErrorIs(t, err, ErrNotFound, old)
	}
	require.NoError(t, s.CheckSettings(ctx, credential.Digest(oldInvenio), Settings{Form: "jcs"}), "the settings moved with the rows")
}

// A store an older version wrote with a token in a target name keeps every
// row under the name the client uses now, and the token leaves the file.
func TestTargetNamesHoldNoTokenAfterTheMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	writeOldStore(t, path, 3, oldTargetRows()...)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.True(t, bytes.Contains(b, []byte(oldToken)), "the old store holds the token")

	s, err := Open(path)
	require.NoError(t, err)
	checkRenamedTargets(t, s)
	rows := 0
	for rec, err := range s.List(context.Background(), "", "") {
		require.NoError(t, err)
		require.NotContains(t, rec.Target, oldToken)
		rows++
	}
	require.Equal(t, 6, rows)
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err == nil {
			require.False(t, bytes.Contains(b, []byte(oldToken)), "%s holds the token while open", filepath.Base(f))
		}
	}
	require.NoError(t, s.Close())
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.False(t, bytes.Contains(b, []byte(oldToken)), "the closed store holds the token")
}

// The same on PostgreSQL: a store of schema 1 keeps every row under the
// name the client uses now.
func TestPostgresTargetNamesHoldNoTokenAfterTheMigration(t *testing.T) {
	u, schema := pgSchemaURL(t)
	ctx := context.Background()
	conn := pgConn(t)
	m := loadPGMigrations()[0]
	stmts := []string{"CREATE SCHEMA " + schema, "SET search_path TO " + schema, m.sql,
		fmt.Sprintf("INSERT INTO schema_migrations (version, name) VALUES (%d, '%s')", m.version, m.name)}
	for _, q := range append(stmts, oldTargetRows()...) {
		q = strings.ReplaceAll(q, "1, 1)", "now(), now())") // times are timestamptz here
		q = strings.ReplaceAll(q, "'', 1)", "'', now())")
		q = strings.ReplaceAll(q, "'', 2)", "'', now())")
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	_, err := conn.Exec(ctx, "RESET search_path")
	require.NoError(t, err)

	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	checkRenamedTargets(t, s)
	rows := 0
	for rec, err := range s.List(ctx, "", "") {
		require.NoError(t, err)
		require.NotContains(t, rec.Target, oldToken)
		rows++
	}
	require.Equal(t, 6, rows)
}

// BenchmarkMigrateTargetNames opens a 1M-row store of schema version 3, as
// release 07baeba left it: one op is the whole upgrade, the target-name
// migration included, with no name to rename ("plain") or every row under
// an InvenioRDM name that holds a token ("token").
//
//	go test -run '^$' -bench MigrateTargetNames -benchtime 3x ./dedup
func BenchmarkMigrateTargetNames(b *testing.B) {
	for _, bc := range []struct{ name, target string }{{"plain", "put http://repo.example/recs"}, {"token", oldInvenio}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				path := filepath.Join(b.TempDir(), "v3.db")
				writeOldStore(b, path, 3, fmt.Sprintf(`
					WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < %d)
					INSERT INTO records (target, key, state, outcome, identifier, status, attempts, created_at, updated_at)
					SELECT '%s', printf('%%064x', i),
						CASE WHEN i %% 5 = 0 THEN 'pending' ELSE 'done' END,
						CASE WHEN i %% 5 = 0 THEN '' ELSE 'created' END,
						CASE WHEN i %% 5 = 0 THEN '' ELSE '10.5072/' || i END,
						CASE WHEN i %% 5 = 0 THEN 0 ELSE 201 END,
						1, 1767225600000000, 1767225600000000
					FROM n`, benchRows, bc.target))
				b.StartTimer()
				s, err := Open(path)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				s.Close()
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/upgrade")
		})
	}
}
