package s3

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store targets are spelled out: a store written by an earlier version
// holds its rows under these names, and a run must find them there.
func TestStoreTargetNamesArePinned(t *testing.T) {
	d, err := Target{Endpoint: "HTTP://127.0.0.1:9000/bucket/", AWS: testCreds}.Driver()
	require.NoError(t, err)
	require.Equal(t, "s3 http://127.0.0.1:9000/bucket", d.Name())
	require.Empty(t, d.StepTargets())
}
