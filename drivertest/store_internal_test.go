package drivertest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
)

// A pending row of a recheck target is a note for the next run, as the
// engine leaves it after a draft made once a search had found nothing:
// checkStore counts it, and fails the test for none of it; a done one is
// no note.
func TestCheckStoreCountsPendingRecheckNotes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deposit.db")
	s, err := dedup.Open(path)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = s.Begin(ctx, "mine http://127.0.0.1:1", "k1", []byte(`{}`))
	require.NoError(t, err)
	_, err = s.Complete(ctx, "mine http://127.0.0.1:1", "k1", dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "1", Status: 201})
	require.NoError(t, err)
	for _, key := range []string{"k1", "k2"} {
		_, err = s.Begin(ctx, "mine-recheck http://127.0.0.1:1", key, nil)
		require.NoError(t, err)
	}
	_, err = s.Complete(ctx, "mine-recheck http://127.0.0.1:1", "k2", dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "2", Status: 201})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	p := &parent{t: t, store: path}
	require.Equal(t, 1, p.checkStore())
}
