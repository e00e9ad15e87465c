package dedup

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/sqlitefile"
)

// makeStore creates a deposit store with a few rows at path and closes it.
func makeStore(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path)
	require.NoError(t, err)
	for _, k := range []string{"a", "b", "c"} {
		_, err := s.Complete(context.Background(), target, k, created)
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
}

// makeForeign creates another program's SQLite database (rollback journal,
// one table) and runs extra statements on it.
func makeForeign(t *testing.T, path string, extra ...string) {
	t.Helper()
	db, err := sql.Open(driverName, path)
	require.NoError(t, err)
	defer db.Close()
	for _, q := range append([]string{"CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)", "INSERT INTO notes (text) VALUES ('keep me')"}, extra...) {
		_, err := db.Exec(q)
		require.NoError(t, err)
	}
}

func checksum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

func TestBadFilesAreRefusedUntouched(t *testing.T) {
	tests := []struct {
		name    string
		make    func(t *testing.T, path string)
		wantErr error  // nil: any error
		wantMsg string // part of the message
	}{
		{
			name: "a text file is not a deposit store",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, []byte("key,identifier\nabc,10.5072/x\n"), 0o644))
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "not a SQLite database",
		},
		{
			name: "a file shorter than a SQLite header is truncated",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, []byte("SQLite format 3\x00\x10\x00"), 0o644))
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "truncated",
		},
		{
			name:    "another program's database without application_id is refused",
			make:    func(t *testing.T, path string) { makeForeign(t, path) },
			wantErr: ErrNotDepositStore,
			wantMsg: "another program's SQLite database (1 tables",
		},
		{
			name: "another program's database with only a view is refused",
			make: func(t *testing.T, path string) {
				makeForeign(t, path, "DROP TABLE notes", "CREATE VIEW one AS SELECT 1")
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "another program's SQLite database (0 tables",
		},
		{
			name:    "another program's database with its own application_id is refused",
			make:    func(t *testing.T, path string) { makeForeign(t, path, "PRAGMA application_id = 1234") },
			wantErr: ErrNotDepositStore,
			wantMsg: "application_id 0x4d2",
		},
		{
			name: "a store cut to a whole number of pages is truncated",
			make: func(t *testing.T, path string) {
				makeStore(t, path)
				info, err := os.Stat(path)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(path, info.Size()/2/4096*4096))
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "truncated",
		},
		{
			name: "a store cut mid-page is truncated",
			make: func(t *testing.T, path string) {
				makeStore(t, path)
				info, err := os.Stat(path)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(path, info.Size()-100))
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "truncated",
		},
		{
			name: "random bytes after a valid header are corrupt",
			make: func(t *testing.T, path string) {
				makeStore(t, path)
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				rand.Read(b[100:])
				require.NoError(t, os.WriteFile(path, b, 0o644))
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "cannot read",
		},
		{
			name: "a store from a newer schema version is refused",
			make: func(t *testing.T, path string) {
				makeStore(t, path)
				db, err := sql.Open(driverName, path)
				require.NoError(t, err)
				defer db.Close()
				_, err = db.Exec("PRAGMA user_version = 99")
				require.NoError(t, err)
			},
			wantErr: ErrNewerSchema,
			wantMsg: "schema version 99",
		},
		{
			name: "a read-only store file is refused",
			make: func(t *testing.T, path string) {
				makeStore(t, path)
				require.NoError(t, os.Chmod(path, 0o444))
			},
			wantMsg: "file is read-only",
		},
		{
			name: "a directory is not a store",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.Mkdir(path, 0o755))
			},
			wantErr: ErrNotDepositStore,
			wantMsg: "is a directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "deposit.db")
			tt.make(t, path)
			var before [32]byte
			info, err := os.Stat(path)
			require.NoError(t, err)
			if !info.IsDir() {
				before = checksum(t, path)
			}

			s, err := Open(path)
			require.Error(t, err)
			require.Nil(t, s)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			}
			require.Contains(t, err.Error(), tt.wantMsg)
			require.Contains(t, err.Error(), path, "the error names the file")
			entries, err := os.ReadDir(filepath.Dir(path))
			require.NoError(t, err)
			require.Len(t, entries, 1, "no -wal or -shm files were left beside it")
			if !info.IsDir() {
				require.Equal(t, before, checksum(t, path), "the file is unchanged")
			}
		})
	}
}

func TestReadOnlyDirectoryIsRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(dir, 0o555))
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	_, err := Open(filepath.Join(dir, "deposit.db"))
	require.ErrorContains(t, err, "is read-only")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestEmptyFilesBecomeNewStores(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"a missing file", func(t *testing.T, path string) {}},
		{"a 0-byte file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o644))
		}},
		{"a SQLite file with no tables (a create that crashed)", func(t *testing.T, path string) {
			db, err := sql.Open(driverName, path)
			require.NoError(t, err)
			defer db.Close()
			_, err = db.Exec("PRAGMA journal_mode = WAL")
			require.NoError(t, err)
			_, err = db.Exec("VACUUM")
			require.NoError(t, err)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" opens as a new store", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "deposit.db")
			tt.make(t, path)
			s, err := Open(path)
			require.NoError(t, err)
			_, err = s.Complete(context.Background(), target, "k", created)
			require.NoError(t, err)
			require.NoError(t, s.Close())

			h, err := sqlitefile.ReadHeader(path)
			require.NoError(t, err)
			require.Equal(t, uint32(applicationID), h.ApplicationID)
			require.Equal(t, SchemaVersion(), h.UserVersion)
		})
	}
}

func TestReopenRecordsMigrationsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deposit.db")
	for range 3 {
		s, err := Open(path)
		require.NoError(t, err)
		var n, version int
		require.NoError(t, s.rdb.QueryRow("SELECT count(*), max(version) FROM schema_migrations").Scan(&n, &version))
		require.Equal(t, SchemaVersion(), n)
		require.Equal(t, SchemaVersion(), version)
		var mode string
		require.NoError(t, s.rdb.QueryRow("PRAGMA journal_mode").Scan(&mode))
		require.Equal(t, "wal", mode)
		require.NoError(t, s.Close())
	}
}

func TestPathWithURICharactersOpens(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my store #1?&mode=ro%20")
	require.NoError(t, os.Mkdir(dir, 0o755))
	path := filepath.Join(dir, "deposit.db")
	makeStore(t, path)
	s, err := Open(path)
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, path, s.Path())
	c, err := s.Count(context.Background(), "")
	require.NoError(t, err)
	require.Equal(t, Counts{Done: 3}, c)
}
