package couchdb

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store targets are spelled out: a store written by an earlier version
// holds its rows under these names, and a run must find them there.
func TestStoreTargetNamesArePinned(t *testing.T) {
	d, err := Target{Endpoint: "HTTP://Couch.Example:5984/db/"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "couchdb http://couch.example:5984/db", d.Name())
	require.Empty(t, d.StepTargets())
}
