package sqlitefile

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writer opens a database at path in WAL mode that never checkpoints by
// itself, on one connection, closed at the end of the test.
func writer(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", URI(path, "_pragma=journal_mode(WAL)&_pragma=wal_autocheckpoint(0)"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	return db
}

func run(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	for _, q := range stmts {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
}

// snapshot copies path and its -wal, as they are while a writer has them
// open, into dir: what a process that died then leaves.
func snapshot(t *testing.T, path, dir string) string {
	t.Helper()
	to := filepath.Join(dir, filepath.Base(path))
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(to+suffix, b, 0o600))
	}
	return to
}

// firstPage is page 1 of the database at path once its log is
// checkpointed into it (in a copy): what a checkpoint writes first.
func firstPage(t *testing.T, path string) []byte {
	t.Helper()
	cp := snapshot(t, path, t.TempDir())
	exec(t, cp, "", "PRAGMA wal_checkpoint(TRUNCATE)")
	b, err := os.ReadFile(cp)
	require.NoError(t, err)
	return b[:4096]
}

// fill creates a table of ours with 200 rows of 1 KiB, about 60 pages.
var fill = []string{
	"CREATE TABLE records (k INTEGER PRIMARY KEY, v TEXT)",
	"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) INSERT INTO records SELECT i, printf('%.1024d', i) FROM n",
	"PRAGMA application_id = 168496141", // own
	"PRAGMA user_version = 3",
}

// A checkpoint that fails on a full disk leaves the main file with its
// first page written (the header naming the new size) and nothing after
// it, every page still in the log. SQLite reads that database whole
// through its log, and so does Identify, without changing a byte.
func TestIdentifyReadsATruncatedFileThroughItsLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	w := writer(t, path)
	run(t, w, fill...)

	left := snapshot(t, path, t.TempDir())
	require.NoError(t, os.WriteFile(left, firstPage(t, path), 0o600))
	_, err := ReadHeader(left)
	require.ErrorIs(t, err, errTruncated, "precondition: the header says more than the file holds")
	require.ErrorContains(t, err, "4096 bytes, the header says")
	sum, walSum := checksum(t, left), checksum(t, left+"-wal")

	f, err := Identify(left, own)
	require.NoError(t, err)
	require.Equal(t, uint32(own), f.ApplicationID)
	require.Equal(t, 3, f.UserVersion)
	require.Equal(t, []string{"records"}, f.Tables)
	require.Equal(t, sum, checksum(t, left), "the file is unchanged")
	require.Equal(t, walSum, checksum(t, left+"-wal"), "the log is unchanged: nothing checkpointed")

	db, err := Open(left)
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, 200, count(t, db), "every row reads through the log")
}

// A file shorter than its header whose log does not hold the pages it
// lacks is refused, and left as it was, log and all.
func TestIdentifyRefusesATruncatedFileItsLogDoesNotComplete(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	w := writer(t, path)
	run(t, w, fill...)
	run(t, w, "PRAGMA wal_checkpoint(TRUNCATE)") // every page in the file
	run(t, w, "UPDATE records SET v = 'x' WHERE k = 1")

	left := snapshot(t, path, t.TempDir())
	b, err := os.ReadFile(left)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(left, b[:4096], 0o600))
	sum, walSum := checksum(t, left), checksum(t, left+"-wal")

	_, err = Identify(left, own)
	require.ErrorIs(t, err, ErrNotDatabase)
	require.ErrorContains(t, err, "file is truncated")
	t.Log(err)
	require.True(t, strings.Contains(err.Error(), "write-ahead log"), "the error says the log does not complete it: %v", err)
	require.Equal(t, sum, checksum(t, left), "the file is unchanged")
	require.Equal(t, walSum, checksum(t, left+"-wal"), "the log is unchanged")
}
