package sqlitefile

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// own is the application_id the tests ask Identify about.
const own = 0x0A0B0C0D

// exec creates or opens the database at path with the URI query and runs
// the statements on one connection, then closes it.
func exec(t *testing.T, path, query string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", URI(path, query))
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range stmts {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
}

// ours writes a WAL database stamped with own, at user_version 3, with one
// table and an index, and closes it.
func ours(t *testing.T, path string) {
	t.Helper()
	exec(t, path, "_pragma=journal_mode(WAL)",
		"CREATE TABLE records (k TEXT PRIMARY KEY, v TEXT)",
		"CREATE INDEX records_v ON records (v)",
		"INSERT INTO records VALUES ('a', '1'), ('b', '2')",
		"PRAGMA application_id = 168496141", // own
		"PRAGMA user_version = 3")
}

// files lists the names in dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func checksum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return sha256.Sum256(b)
}

func TestIdentify(t *testing.T) {
	tests := []struct {
		name      string
		make      func(t *testing.T, path string)
		want      File // Size is checked against the file's
		wantBlank bool
		wantErr   string // part of the message of an error wrapping ErrNotDatabase
	}{
		{
			name:      "a missing file is blank",
			make:      func(t *testing.T, path string) {},
			want:      File{},
			wantBlank: true,
		},
		{
			name:      "an empty file is blank",
			make:      func(t *testing.T, path string) { require.NoError(t, os.WriteFile(path, nil, 0o644)) },
			want:      File{Exists: true},
			wantBlank: true,
		},
		{
			name: "a text file is not a database",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, []byte("key,identifier\nabc,10.5072/x\n"), 0o644))
			},
			wantErr: "no SQLite header",
		},
		{
			name: "a text file longer than a header is not a database",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, make([]byte, 4096), 0o644))
			},
			wantErr: "no SQLite header",
		},
		{
			name: "a file shorter than a SQLite header is truncated",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, []byte(magic+"\x10\x00"), 0o644))
			},
			wantErr: "truncated",
		},
		{
			name: "a database cut mid-page is truncated",
			make: func(t *testing.T, path string) {
				ours(t, path)
				info, err := os.Stat(path)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(path, info.Size()-100))
			},
			wantErr: "truncated",
		},
		{
			name: "a database cut to fewer pages than its header says is truncated",
			make: func(t *testing.T, path string) {
				ours(t, path)
				h, err := ReadHeader(path)
				require.NoError(t, err)
				require.NoError(t, os.Truncate(path, int64(h.PageSize)))
			},
			wantErr: "truncated",
		},
		{
			name: "a header with a page size that is no power of two is corrupt",
			make: func(t *testing.T, path string) {
				ours(t, path)
				b, err := os.ReadFile(path)
				require.NoError(t, err)
				b[16], b[17] = 0x03, 0x00
				require.NoError(t, os.WriteFile(path, b, 0o644))
			},
			wantErr: "page size 768",
		},
		{
			name:    "a directory is not a database",
			make:    func(t *testing.T, path string) { require.NoError(t, os.Mkdir(path, 0o755)) },
			wantErr: "directory",
		},
		{
			name: "another program's application_id is reported from the header",
			make: func(t *testing.T, path string) {
				exec(t, path, "", "CREATE TABLE notes (text TEXT)", "PRAGMA application_id = 1234", "PRAGMA user_version = 7")
			},
			want: File{Exists: true, ApplicationID: 1234, UserVersion: 7},
		},
		{
			name: "another program's database without application_id has its tables",
			make: func(t *testing.T, path string) { exec(t, path, "", "CREATE TABLE notes (text TEXT)") },
			want: File{Exists: true, Tables: []string{"notes"}, Objects: 1},
		},
		{
			name: "a database with only a view is not blank",
			make: func(t *testing.T, path string) { exec(t, path, "", "CREATE VIEW one AS SELECT 1") },
			want: File{Exists: true, Objects: 1},
		},
		{
			name: "an empty SQLite database without application_id is blank (a create that crashed)",
			make: func(t *testing.T, path string) {
				exec(t, path, "_pragma=journal_mode(WAL)", "VACUUM")
			},
			want:      File{Exists: true},
			wantBlank: true,
		},
		{
			name: "our database gives its version and tables",
			make: ours,
			want: File{Exists: true, ApplicationID: own, UserVersion: 3, Tables: []string{"records"}, Objects: 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.db")
			tt.make(t, path)
			before := files(t, dir)
			var sum [32]byte
			if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() {
				sum = checksum(t, path)
			}

			f, err := Identify(path, own)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrNotDatabase)
				require.ErrorContains(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
				if info, err := os.Stat(path); err == nil {
					require.Equal(t, info.Size(), f.Size)
				}
				require.Equal(t, tt.wantBlank, f.Blank())
				f.Size = 0 // page counts are SQLite's choice: compared with the file's above
				require.Equal(t, tt.want, f)
			}
			require.Equal(t, before, files(t, dir), "nothing was created beside the file")
			if sum != [32]byte{} {
				require.Equal(t, sum, checksum(t, path), "the file is unchanged")
			}
		})
	}
}

func TestIdentifyReadsThroughTheLogOfADatabaseInUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	// A writer that stamps the database in a transaction still only in the
	// log: the header on disk has no application_id yet.
	w, err := sql.Open("sqlite", URI(path, "_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)"))
	require.NoError(t, err)
	defer w.Close()
	w.SetMaxOpenConns(1)
	for _, q := range []string{"CREATE TABLE records (k TEXT)", "PRAGMA application_id = 168496141", "PRAGMA user_version = 3"} {
		_, err := w.Exec(q)
		require.NoError(t, err)
	}
	h, err := ReadHeader(path)
	require.NoError(t, err)
	require.Equal(t, uint32(0), h.ApplicationID, "precondition: the header lags the log")
	sum := checksum(t, path)

	f, err := Identify(path, own)
	require.NoError(t, err)
	require.Equal(t, uint32(own), f.ApplicationID)
	require.Equal(t, 3, f.UserVersion)
	require.Equal(t, []string{"records"}, f.Tables)
	require.Equal(t, sum, checksum(t, path), "the file is unchanged")
}

// count reads the number of rows of records through db.
func count(t *testing.T, db *DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Read(func(db *sql.DB) error {
		return db.QueryRowContext(context.Background(), "SELECT count(*) FROM records").Scan(&n)
	}))
	return n
}

func TestDBReadsAClosedDatabaseWithoutCreatingFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	ours(t, path)
	require.Equal(t, []string{"state.db"}, files(t, dir), "precondition: closed cleanly")
	sum := checksum(t, path)

	db, err := Open(path)
	require.NoError(t, err)
	require.Equal(t, 2, count(t, db))
	require.Equal(t, 2, count(t, db))
	require.NoError(t, db.Close())
	require.Equal(t, []string{"state.db"}, files(t, dir), "no -wal or -shm file was created")
	require.Equal(t, sum, checksum(t, path), "the file is unchanged")
}

func TestDBReadsThroughTheLogOfADatabaseInUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	ours(t, path)
	w, err := sql.Open("sqlite", URI(path, "_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)"))
	require.NoError(t, err)
	defer w.Close()
	w.SetMaxOpenConns(1)
	_, err = w.Exec("INSERT INTO records VALUES ('c', '3')")
	require.NoError(t, err)
	sum := checksum(t, path)
	before := files(t, dir)
	require.Contains(t, before, "state.db-wal", "precondition: the writer has its log")

	db, err := Open(path)
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, 3, count(t, db), "the row only in the log is read")
	require.Equal(t, sum, checksum(t, path), "the file is unchanged")
	require.Equal(t, before, files(t, dir))
}

func TestDBReadsAgainThroughTheLogWhenAWriterAppears(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	ours(t, path)
	db, err := Open(path)
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, 2, count(t, db))

	w, err := sql.Open("sqlite", URI(path, "_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)"))
	require.NoError(t, err)
	defer w.Close()
	w.SetMaxOpenConns(1)
	_, err = w.Exec("INSERT INTO records VALUES ('c', '3')")
	require.NoError(t, err)
	require.Equal(t, 3, count(t, db), "the immutable view is dropped once a writer has the file")

	require.NoError(t, w.Close())
	require.Equal(t, 3, count(t, db))
}

func TestDBOfAMissingFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "none.db"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Empty(t, files(t, dir))
}

func TestURI(t *testing.T) {
	tests := []struct{ path, want string }{
		{"/data/state.db", "file:/data/state.db?mode=ro"},
		{"state.db", "file:state.db?mode=ro"},
		{"/my store #1?&mode=rw%20/state.db", "file:/my%20store%20%231%3F&mode=rw%2520/state.db?mode=ro"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			require.Equal(t, tt.want, URI(tt.path, "mode=ro"))
		})
	}
}

// A create killed before its first commit leaves the database file partly
// written and a hot rollback journal that says the file was empty before.
// Identify calls it blank, untouched; SQLite's next write access rolls the
// journal back to an empty file. A read-only open refused it, so a store
// whose first run was killed at its start was "not a deposit store" for
// every later run.
func TestAFileWhoseCreateWasInterruptedIsBlank(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.db")
	db, err := sql.Open("sqlite", URI(live, "_pragma=journal_mode(DELETE)&_pragma=cache_size(10)"))
	require.NoError(t, err)
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.Begin()
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec("CREATE TABLE records (k TEXT PRIMARY KEY, v BLOB)")
	require.NoError(t, err)
	_, err = tx.Exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 500) INSERT INTO records SELECT i, randomblob(2000) FROM n")
	require.NoError(t, err)

	// The transaction has spilled pages into the file, its journal beside
	// it: copy both as a kill at this moment would leave them.
	killed := filepath.Join(dir, "killed.db")
	for _, suffix := range []string{"", "-journal"} {
		b, err := os.ReadFile(live + suffix)
		require.NoError(t, err, "the transaction spilled into the file and wrote its journal")
		require.NotEmpty(t, b)
		require.NoError(t, os.WriteFile(killed+suffix, b, 0o600))
	}
	require.NoError(t, tx.Rollback())
	before := sums(t, killed, killed+"-journal")

	f, err := Identify(killed, own)
	require.NoError(t, err)
	require.True(t, f.Blank(), "an interrupted create is blank: %+v", f)
	require.Equal(t, before, sums(t, killed, killed+"-journal"), "identified without a write")

	// The next write access rolls the journal back: nothing was committed.
	var tables int
	rw, err := sql.Open("sqlite", URI(killed, ""))
	require.NoError(t, err)
	defer rw.Close()
	require.NoError(t, rw.QueryRow("SELECT count(*) FROM sqlite_master").Scan(&tables))
	require.Zero(t, tables)
}

// sums is the SHA-256 of each file's bytes.
func sums(t *testing.T, paths ...string) [][32]byte {
	t.Helper()
	var out [][32]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		out = append(out, sha256.Sum256(b))
	}
	return out
}

// HasHeader tells any program's SQLite file, sound or not past its first
// 16 bytes, from everything else, and changes nothing.
func TestHasHeader(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string)
		want bool
	}{
		{"a database in WAL mode", ours, true},
		{"another program's database", func(t *testing.T, path string) {
			exec(t, path, "", "CREATE TABLE notes (body TEXT)")
		}, true},
		{"a database cut after its first 16 bytes", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(magic+"\x10"), 0o644))
		}, true},
		{"15 bytes of the header", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(magic[:15]), 0o644))
		}, false},
		{"JSON Lines", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, []byte(`{"line":1,"outcome":"created"}`+"\n"), 0o644))
		}, false},
		{"an empty file", func(t *testing.T, path string) {
			require.NoError(t, os.WriteFile(path, nil, 0o644))
		}, false},
		{"a directory", func(t *testing.T, path string) { require.NoError(t, os.Mkdir(path, 0o755)) }, false},
		{"no file", func(t *testing.T, path string) {}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.db")
			tc.make(t, path)
			before := files(t, dir)
			require.Equal(t, tc.want, HasHeader(path))
			require.Equal(t, before, files(t, dir))
		})
	}
}
