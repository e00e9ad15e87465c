package webdav

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store targets are spelled out: a store written by an earlier version
// holds its rows under these names, and a run must find them there.
func TestStoreTargetNamesArePinned(t *testing.T) {
	d, err := Target{Endpoint: "HTTP://Repo.Example:80/dav/"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "webdav http://repo.example/dav", d.Name())
	require.Empty(t, d.StepTargets())
}
