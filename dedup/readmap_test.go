package dedup

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// Read connections map the start of the file and the writer does not: a
// read there skips the page cache shared by every connection, and the
// map, bounded, adds at most 32 MiB per read connection to the resident
// set.
func TestReadConnectionsMapTheFileAndTheWriterDoesNot(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	var read, write int64
	require.NoError(t, s.rdb.QueryRowContext(ctx, "PRAGMA mmap_size").Scan(&read))
	require.NoError(t, s.wdb.QueryRowContext(ctx, "PRAGMA mmap_size").Scan(&write))
	require.Equal(t, int64(32<<20), read)
	require.Zero(t, write)
}
