package dedup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// While a store opened through a symbolic link is in use, every file that
// SQLite and the owner locks keep beside it is one SQLiteFiles names: the
// -wal, -shm and -owners beside the file the link names, which exist, and
// nothing else.
func TestSQLiteFilesNamesEveryFileBesideAStoreInUse(t *testing.T) {
	requireFlock(t)
	dir, other := t.TempDir(), t.TempDir()
	real := filepath.Join(dir, "deposit.db")
	link := filepath.Join(other, "link.db")
	require.NoError(t, os.Symlink(real, link))

	s, err := Open(link)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.ClaimMany(context.Background(), Lease{Owner: "a", TTL: time.Minute}, ownerTestIntents(3))
	require.NoError(t, err)

	names := map[string]bool{}
	for _, p := range SQLiteFiles(link) {
		names[p] = true
	}
	for _, want := range []string{real, real + "-wal", real + "-shm", real + "-owners"} {
		_, err := os.Stat(want)
		require.NoError(t, err, "%s exists while the store is in use", want)
		require.True(t, names[want], "%s is named", want)
	}
	require.True(t, names[link])
	for _, d := range []string{dir, other} {
		entries, err := os.ReadDir(d)
		require.NoError(t, err)
		for _, e := range entries {
			require.True(t, names[filepath.Join(d, e.Name())], "%s beside the store in use is not named", e.Name())
		}
	}
}
