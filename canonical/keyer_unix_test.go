//go:build unix

package canonical

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDatasetKeyRefusesANamedPipeWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644))
	k := mustKeyer(t, FormJCS)
	_, err := k.DatasetKey(dir, []byte(`{}`), []string{"pipe"})
	require.ErrorIs(t, err, ErrInvalidDataset)
	require.ErrorContains(t, err, "not a regular file")
}
