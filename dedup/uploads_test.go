package dedup

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// uploadStore is what the upload tests use of a store.
type uploadStore interface {
	LookupUpload(ctx context.Context, target, key string) (Upload, error)
	BeginUpload(ctx context.Context, target, key, id string) error
	RecordPart(ctx context.Context, target, key, id string, n int, tag string) error
	EndUpload(ctx context.Context, target, key, id string) error
}

var (
	_ uploadStore = (*SQLite)(nil)
	_ uploadStore = (*Postgres)(nil)
)

// runUploadTests checks the journal of uploads in parts on stores that
// open gives.
func runUploadTests(t *testing.T, open func(t *testing.T) testStore) {
	ctx := context.Background()
	t.Run("an upload is journaled, its parts recorded, and forgotten at its end", func(t *testing.T) {
		s := open(t).(uploadStore)
		_, err := s.LookupUpload(ctx, target, "k file")
		require.ErrorIs(t, err, ErrNotFound)
		require.ErrorIs(t, s.RecordPart(ctx, target, "k file", "u1", 1, `"a"`), ErrNotFound, "no part without its upload")
		require.NoError(t, s.BeginUpload(ctx, target, "k file", "u1"))
		require.NoError(t, s.RecordPart(ctx, target, "k file", "u1", 1, `"a"`))
		require.NoError(t, s.RecordPart(ctx, target, "k file", "u1", 3, `"c"`))
		require.NoError(t, s.RecordPart(ctx, target, "k file", "u1", 1, `"a2"`), "a part sent again is recorded again")
		require.ErrorIs(t, s.RecordPart(ctx, target, "k file", "u0", 2, `"b"`), ErrNotFound, "not a part of another upload")
		u, err := s.LookupUpload(ctx, target, "k file")
		require.NoError(t, err)
		require.Equal(t, "u1", u.ID)
		require.False(t, u.CreatedAt.IsZero())
		require.Equal(t, map[int]string{1: `"a2"`, 3: `"c"`}, u.Tags)

		require.NoError(t, s.EndUpload(ctx, target, "k file", "u0"), "another upload's end keeps this one")
		_, err = s.LookupUpload(ctx, target, "k file")
		require.NoError(t, err)
		require.NoError(t, s.EndUpload(ctx, target, "k file", "u1"))
		_, err = s.LookupUpload(ctx, target, "k file")
		require.ErrorIs(t, err, ErrNotFound)
	})
	t.Run("a new upload replaces the one before, with its parts", func(t *testing.T) {
		s := open(t).(uploadStore)
		require.NoError(t, s.BeginUpload(ctx, target, "k", "u1"))
		require.NoError(t, s.RecordPart(ctx, target, "k", "u1", 1, `"a"`))
		require.NoError(t, s.BeginUpload(ctx, target, "k", "u2"))
		u, err := s.LookupUpload(ctx, target, "k")
		require.NoError(t, err)
		require.Equal(t, "u2", u.ID)
		require.Empty(t, u.Tags)
		require.ErrorIs(t, s.BeginUpload(ctx, target, "k", ""), ErrInvalidArgument)
	})
}
