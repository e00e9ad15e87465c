package idempotencykey

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store targets are spelled out: a store written by an earlier version
// holds its rows under these names, and a run must find them there.
func TestStoreTargetNamesArePinned(t *testing.T) {
	d, err := Target{Endpoint: "HTTPS://Repo.Example:443/jobs/"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "idempotency-key https://repo.example/jobs", d.Name())
	require.Empty(t, d.StepTargets())
	require.Empty(t, d.SecretFingerprint())
	d, err = Target{Endpoint: "https://repo.example/jobs", KeySecret: []byte("s3cret")}.Driver()
	require.NoError(t, err)
	require.Equal(t, "idempotency-key https://repo.example/jobs", d.Name(), "a secret is no part of the name")
	require.Equal(t, "d139e38c9cc930f4", d.SecretFingerprint())
}
