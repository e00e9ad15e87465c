package put

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The store target is spelled out: a store written by an earlier version
// holds its rows under this name, and a run must find them there. A token
// in the endpoint's query is kept only as its digest.
func TestStoreTargetNameIsPinned(t *testing.T) {
	d, err := Target{Endpoint: "HTTP://Repo.Example:80/recs/"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "put http://repo.example/recs", d.Name())
	require.Empty(t, d.StepTargets())
	d, err = Target{Endpoint: "http://repo.example/recs?access_token=s3cret"}.Driver()
	require.NoError(t, err)
	require.Equal(t, "put http://repo.example/recs?access_token=redacted-sha256-1ec1c26b50d5d3c5", d.Name())
}
