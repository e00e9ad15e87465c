package dedup

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const target = "https://repo.example/records put"

// openTemp opens a new store in a temporary directory, closed at the end of
// the test.
func openTemp(t testing.TB, opts ...Option) *SQLite {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "deposit.db"), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

var created = Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/first", Status: 201}

func TestSettingsSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	s, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, s.CheckSettings(ctx, target, Settings{Form: "jcs"}))
	_, err = s.Complete(ctx, target, "k", created)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s, err = Open(path)
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.CheckSettings(ctx, target, Settings{Form: "python"}), ErrSettingsMismatch)
	r, err := s.Lookup(ctx, target, "k")
	require.NoError(t, err)
	require.Equal(t, created.Identifier, r.Identifier)
}

func TestLookupDoneReturnsOnlyDoneKeys(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	_, err := s.Begin(ctx, target, "pending", []byte("body"))
	require.NoError(t, err)
	_, err = s.Fail(ctx, target, "failed", Failure{Status: 422, Problem: "no"})
	require.NoError(t, err)
	_, err = s.Complete(ctx, target, "done", Confirmation{Outcome: OutcomeExisting, Identifier: "10.5072/x", Status: 200})
	require.NoError(t, err)
	_, err = s.Complete(ctx, "other", "elsewhere", Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/y", Status: 201})
	require.NoError(t, err)

	earlier := []Record{{Key: "kept"}}
	got, err := s.LookupDone(ctx, target, []string{"pending", "failed", "done", "done", "elsewhere", "missing"}, earlier)
	require.NoError(t, err)
	done := Record{Target: target, Key: "done", State: StateDone, Outcome: OutcomeExisting, Identifier: "10.5072/x", Status: 200}
	require.Equal(t, []Record{{Key: "kept"}, {}, {}, done, done, {}, {}}, got, "one record per key, in order, after those given")
	got, err = s.LookupDone(ctx, target, nil, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

// Keys are any strings to the store, not only hex digests: a quote, a
// backslash, a control character or non-ASCII text in a key is looked up
// as itself.
func TestLookupsFindKeysThatNeedEscaping(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	keys := []string{`a"b`, `c\d`, "e\nf", "\u00e9t\u00e9", "tab\there", "0123abcd"}
	for i, k := range keys {
		_, err := s.Complete(ctx, target, k, Confirmation{Outcome: OutcomeCreated, Identifier: fmt.Sprintf("10.5072/k%d", i), Status: 201})
		require.NoError(t, err)
	}
	ask := append([]string{"absent"}, keys...)
	got, err := s.LookupDone(ctx, target, ask, nil)
	require.NoError(t, err)
	require.Len(t, got, len(ask))
	require.Zero(t, got[0])
	many, err := s.LookupMany(ctx, target, ask)
	require.NoError(t, err)
	require.Len(t, many, len(keys))
	for i, k := range keys {
		require.Equal(t, k, got[i+1].Key)
		require.Equal(t, fmt.Sprintf("10.5072/k%d", i), got[i+1].Identifier, "key %q", k)
		require.Equal(t, fmt.Sprintf("10.5072/k%d", i), many[k].Identifier, "key %q", k)
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
