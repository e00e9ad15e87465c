package datacite

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store targets are spelled out: a store written by an earlier version
// holds its rows under these names, and a run must find them there.
func TestStoreTargetNamesArePinned(t *testing.T) {
	d, err := Target{Prefix: "10.5072"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "datacite https://api.test.datacite.org 10.5072", d.Name())
	require.Empty(t, d.StepTargets())
	d, err = Target{Endpoint: "HTTPS://API.DataCite.org/", Prefix: "10.5072", Event: "publish"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "datacite https://api.datacite.org 10.5072", d.Name())
	require.Equal(t, []string{"datacite-publish https://api.datacite.org 10.5072"}, d.StepTargets())
}
