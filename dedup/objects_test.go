package dedup

import (
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// objectStore is what the object tests use of a store.
type objectStore interface {
	LookupObject(ctx context.Context, target, key string) (Object, error)
	LookupVersion(ctx context.Context, target, key, version string) (Version, error)
	BeginUpdate(ctx context.Context, target, key, version, order string) (Object, error)
	ApplyVersion(ctx context.Context, target, key string, a Applied) (Object, error)
	FailVersion(ctx context.Context, target, key, version string, f Failure) (Object, error)
	ResetVersion(ctx context.Context, target, key, version string) error
	NoteStale(ctx context.Context, target, key string) error
	objectReader
}

// objectReader is what a read-only reader shares with a store of objects.
type objectReader interface {
	CountObjects(ctx context.Context, target string) (ObjectCounts, error)
	ListObjects(ctx context.Context, target string) iter.Seq2[Object, error]
}

// collectObjects reads all of seq, requiring no error.
func collectObjects(t *testing.T, seq iter.Seq2[Object, error]) []Object {
	t.Helper()
	var out []Object
	for o, err := range seq {
		require.NoError(t, err)
		out = append(out, o)
	}
	return out
}

// runObjectTests checks the objects, their versions and the identity
// settings on stores that open gives, each new and empty.
func runObjectTests(t *testing.T, open func(t *testing.T) testStore) {
	ctx := context.Background()
	first := Applied{Version: "v1", Tag: "t1", Order: "1", Identifier: "10.5072/obj"}
	apply := func(t *testing.T, s testStore, key string, a Applied) Object {
		t.Helper()
		o, err := s.ApplyVersion(ctx, target, key, a)
		require.NoError(t, err)
		return o
	}
	lookup := func(t *testing.T, s testStore, key string) Object {
		t.Helper()
		o, err := s.LookupObject(ctx, target, key)
		require.NoError(t, err)
		return o
	}
	version := func(t *testing.T, s testStore, key, v string) Version {
		t.Helper()
		got, err := s.LookupVersion(ctx, target, key, v)
		require.NoError(t, err)
		return got
	}

	t.Run("the first version stores the object, with its identifier", func(t *testing.T) {
		s := open(t)
		_, err := s.ApplyVersion(ctx, target, "o", Applied{Version: "v1", Tag: "t1"})
		require.ErrorIs(t, err, ErrInvalidArgument, "an object not stored needs an identifier")
		_, err = s.LookupObject(ctx, target, "o")
		require.ErrorIs(t, err, ErrNotFound)
		_, err = s.LookupVersion(ctx, target, "o", "v1")
		require.ErrorIs(t, err, ErrNotFound, "a refused apply records no version")

		o := apply(t, s, "o", first)
		require.Equal(t, target, o.Target)
		require.Equal(t, "o", o.Key)
		require.Equal(t, "10.5072/obj", o.Identifier)
		require.Equal(t, "v1", o.Version)
		require.Equal(t, "t1", o.Tag)
		require.Equal(t, "1", o.Order)
		require.Zero(t, o.Updates)
		require.Zero(t, o.Stale)
		require.Empty(t, o.Pending)
		require.True(t, o.PendingSince.IsZero())
		require.False(t, o.AppliedAt.IsZero())
		require.Equal(t, o.AppliedAt, o.CreatedAt)
		require.Equal(t, o.AppliedAt, o.UpdatedAt)
		require.Equal(t, o, lookup(t, s, "o"), "the returned object is the stored one")
		require.Equal(t, Version{Version: "v1", State: StateDone, Order: "1", At: o.AppliedAt}, version(t, s, "o", "v1"))
		_, err = s.LookupObject(ctx, "other", "o")
		require.ErrorIs(t, err, ErrNotFound, "objects are per target")
	})

	t.Run("a second version is an update; the history keeps both", func(t *testing.T) {
		s := open(t)
		o1 := apply(t, s, "o", first)
		o2 := apply(t, s, "o", Applied{Version: "v2", Tag: "t2", Order: "2"})
		require.Equal(t, "v2", o2.Version)
		require.Equal(t, "t2", o2.Tag)
		require.Equal(t, "2", o2.Order)
		require.Equal(t, "10.5072/obj", o2.Identifier, "kept without one given")
		require.Equal(t, 1, o2.Updates)
		require.True(t, o2.AppliedAt.After(o1.AppliedAt), "applied at %v, then %v", o1.AppliedAt, o2.AppliedAt)
		require.Equal(t, o1.CreatedAt, o2.CreatedAt)
		require.Equal(t, o2, lookup(t, s, "o"))
		require.Equal(t, StateDone, version(t, s, "o", "v1").State)
		require.Equal(t, Version{Version: "v2", State: StateDone, Order: "2", At: o2.AppliedAt}, version(t, s, "o", "v2"))

		o3 := apply(t, s, "o", Applied{Version: "v2", Tag: "t2b", Order: "2"})
		require.Equal(t, 1, o3.Updates, "the version held again is no update")
		require.Equal(t, o2.AppliedAt, o3.AppliedAt)
		require.Equal(t, "t2b", o3.Tag, "its tag is taken")
		require.Equal(t, o2.AppliedAt, version(t, s, "o", "v2").At, "the history keeps its first time")

		o4 := apply(t, s, "o", Applied{Version: "v1", Identifier: "10.5072/moved"})
		require.Equal(t, 2, o4.Updates, "a version had before, applied again, is an update")
		require.Equal(t, "10.5072/moved", o4.Identifier, "an identifier given replaces the stored one")
		require.Equal(t, o1.AppliedAt, version(t, s, "o", "v1").At)
	})

	t.Run("an update begun then applied is settled", func(t *testing.T) {
		s := open(t)
		_, err := s.BeginUpdate(ctx, target, "o", "v2", "2")
		require.ErrorIs(t, err, ErrNotFound, "an update needs a stored object")
		o1 := apply(t, s, "o", first)
		b, err := s.BeginUpdate(ctx, target, "o", "v2", "2")
		require.NoError(t, err)
		require.Equal(t, "v2", b.Pending)
		require.Equal(t, "2", b.PendingOrder)
		require.False(t, b.PendingSince.IsZero())
		require.Equal(t, b.PendingSince, b.UpdatedAt)
		require.Equal(t, "v1", b.Version, "the version held stays until applied")
		require.Equal(t, o1.AppliedAt, b.AppliedAt)
		require.Equal(t, b, lookup(t, s, "o"))
		b2, err := s.BeginUpdate(ctx, target, "o", "v2", "2")
		require.NoError(t, err)
		require.Equal(t, b.PendingSince, b2.PendingSince, "the same update again keeps its time")
		_, err = s.LookupVersion(ctx, target, "o", "v2")
		require.ErrorIs(t, err, ErrNotFound, "an update in flight is no version yet")

		o := apply(t, s, "o", Applied{Version: "v2", Tag: "t2", Order: "2"})
		require.Empty(t, o.Pending)
		require.Empty(t, o.PendingOrder)
		require.True(t, o.PendingSince.IsZero())
		require.Equal(t, "v2", o.Version)
		require.Equal(t, 1, o.Updates)
		require.Equal(t, o, lookup(t, s, "o"))
		c, err := s.CountObjects(ctx, target)
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 1, Versions: 2, Updates: 1}, c)
	})

	t.Run("applying another version keeps the update pending", func(t *testing.T) {
		s := open(t)
		apply(t, s, "o", first)
		b, err := s.BeginUpdate(ctx, target, "o", "v2", "2")
		require.NoError(t, err)
		o := apply(t, s, "o", Applied{Version: "v3", Tag: "t3", Order: "3"})
		require.Equal(t, "v3", o.Version)
		require.Equal(t, "v2", o.Pending)
		require.Equal(t, "2", o.PendingOrder)
		require.Equal(t, b.PendingSince, o.PendingSince)
		require.Equal(t, 1, o.Updates)
		b, err = s.BeginUpdate(ctx, target, "o", "v4", "4")
		require.NoError(t, err)
		require.Equal(t, "v4", b.Pending, "another update replaces the pending one")
		require.True(t, b.PendingSince.After(o.PendingSince))
		c, err := s.CountObjects(ctx, target)
		require.NoError(t, err)
		require.Equal(t, 1, c.Pending)
	})

	t.Run("a failed version is remembered until reset", func(t *testing.T) {
		s := open(t)
		apply(t, s, "o", first)
		_, err := s.BeginUpdate(ctx, target, "o", "v2", "2")
		require.NoError(t, err)
		o, err := s.FailVersion(ctx, target, "o", "v2", Failure{Status: 412, Problem: "changed by another writer"})
		require.NoError(t, err)
		require.Empty(t, o.Pending, "its update ends")
		require.True(t, o.PendingSince.IsZero())
		require.Equal(t, "v1", o.Version)
		require.Zero(t, o.Updates)
		require.Equal(t, o, lookup(t, s, "o"))
		v := version(t, s, "o", "v2")
		require.Equal(t, StateFailed, v.State)
		require.Equal(t, 412, v.Status)
		require.Equal(t, "changed by another writer", v.Problem)
		require.False(t, v.At.IsZero())
		c, err := s.CountObjects(ctx, target)
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 1, Versions: 1, Failed: 1}, c)

		_, err = s.BeginUpdate(ctx, target, "o", "v3", "3")
		require.NoError(t, err)
		o, err = s.FailVersion(ctx, target, "o", "v2", Failure{Status: 422, Problem: "again"})
		require.NoError(t, err)
		require.Equal(t, "v3", o.Pending, "failing another version keeps the pending update")
		require.Equal(t, 422, version(t, s, "o", "v2").Status, "the last answer is kept")

		require.NoError(t, s.ResetVersion(ctx, target, "o", "v2"))
		_, err = s.LookupVersion(ctx, target, "o", "v2")
		require.ErrorIs(t, err, ErrNotFound, "a reset version is forgotten")
		c, err = s.CountObjects(ctx, target)
		require.NoError(t, err)
		require.Zero(t, c.Failed)
		require.NoError(t, s.ResetVersion(ctx, target, "o", "v9"), "resetting a version never given is harmless")
	})

	t.Run("a done version never turns failed", func(t *testing.T) {
		s := open(t)
		o1 := apply(t, s, "o", first)
		o, err := s.FailVersion(ctx, target, "o", "v1", Failure{Status: 409, Problem: "late"})
		require.NoError(t, err)
		require.Equal(t, o1, o)
		require.Equal(t, Version{Version: "v1", State: StateDone, Order: "1", At: o1.AppliedAt}, version(t, s, "o", "v1"))
		require.NoError(t, s.ResetVersion(ctx, target, "o", "v1"))
		require.Equal(t, StateDone, version(t, s, "o", "v1").State, "reset keeps a done version")

		_, err = s.FailVersion(ctx, target, "o", "v2", Failure{Status: 500, Problem: "refused"})
		require.NoError(t, err)
		o2 := apply(t, s, "o", Applied{Version: "v2", Tag: "t2", Order: "2"})
		v := version(t, s, "o", "v2")
		require.Equal(t, StateDone, v.State, "a failed version the server confirms is done")
		require.Equal(t, "2", v.Order, "with the order it was applied with")
		require.Equal(t, o2.AppliedAt, v.At, "and when it was applied")
		require.Zero(t, v.Status)
		require.Empty(t, v.Problem)
		c, err := s.CountObjects(ctx, target)
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 1, Versions: 2, Updates: 1}, c)
	})

	t.Run("stale lines are counted", func(t *testing.T) {
		s := open(t)
		apply(t, s, "o", first)
		for range 3 {
			require.NoError(t, s.NoteStale(ctx, target, "o"))
		}
		require.Equal(t, 3, lookup(t, s, "o").Stale)
		require.NoError(t, s.NoteStale(ctx, target, "missing"), "a stale line of no object changes nothing")
		c, err := s.CountObjects(ctx, "")
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 1, Versions: 1, Stale: 3}, c)
	})

	t.Run("objects are counted per target and in all", func(t *testing.T) {
		s := open(t)
		other := "other " + target // a second target of this test alone
		for _, a := range []struct{ target, key, version string }{
			{target, "a", "v1"}, {target, "a", "v2"}, {target, "a", "v3"},
			{target, "b", "v1"}, {target, "c", "v1"}, {other, "a", "v1"}, {other, "a", "v2"},
		} {
			_, err := s.ApplyVersion(ctx, a.target, a.key, Applied{Version: a.version, Identifier: "id-" + a.key})
			require.NoError(t, err)
		}
		_, err := s.BeginUpdate(ctx, target, "b", "v2", "")
		require.NoError(t, err)
		_, err = s.BeginUpdate(ctx, other, "a", "v3", "")
		require.NoError(t, err)
		_, err = s.FailVersion(ctx, target, "c", "v2", Failure{Status: 400})
		require.NoError(t, err)
		require.NoError(t, s.NoteStale(ctx, target, "a"))
		require.NoError(t, s.NoteStale(ctx, other, "a"))
		require.NoError(t, s.NoteStale(ctx, other, "a"))

		c, err := s.CountObjects(ctx, target)
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 3, Versions: 5, Updates: 2, Pending: 1, Failed: 1, Stale: 1}, c)
		c, err = s.CountObjects(ctx, other)
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 1, Versions: 2, Updates: 1, Pending: 1, Stale: 2}, c)
		c, err = s.CountObjects(ctx, "")
		require.NoError(t, err)
		require.Equal(t, ObjectCounts{Objects: 4, Versions: 7, Updates: 3, Pending: 2, Failed: 1, Stale: 3}, c)
		c, err = s.CountObjects(ctx, "none")
		require.NoError(t, err)
		require.Zero(t, c)
		n, err := s.Count(ctx, "")
		require.NoError(t, err)
		require.Zero(t, n, "objects are no records")
	})

	t.Run("objects are listed in pages, in target and key order", func(t *testing.T) {
		s := open(t)
		var want []string
		for i := range objectPage + 30 {
			want = append(want, fmt.Sprintf("o%04d", i))
		}
		// Byte order, whatever the database's locale: "Z" < "a" < "o" < "é".
		want = append(want, "apple", "Zed", "\u00e9t\u00e9")
		slices.Sort(want)
		require.Equal(t, []string{"Zed", "apple", "o0000"}, want[:3])
		require.Equal(t, "\u00e9t\u00e9", want[len(want)-1])
		for _, k := range want {
			apply(t, s, k, Applied{Version: "v-" + k, Identifier: "id-" + k})
		}
		_, err := s.ApplyVersion(ctx, "a "+target, "x", Applied{Version: "v", Identifier: "id"})
		require.NoError(t, err)
		_, err = s.ApplyVersion(ctx, "z "+target, "y", Applied{Version: "v", Identifier: "id"})
		require.NoError(t, err)

		got := collectObjects(t, s.ListObjects(ctx, target))
		keys := make([]string, len(got))
		for i, o := range got {
			require.Equal(t, target, o.Target)
			require.Equal(t, "v-"+o.Key, o.Version)
			keys[i] = o.Key
		}
		require.Equal(t, want, keys)
		require.Equal(t, lookup(t, s, want[objectPage]), got[objectPage], "the first object of the second page")

		all := collectObjects(t, s.ListObjects(ctx, ""))
		require.Len(t, all, len(want)+2)
		require.Equal(t, "a "+target, all[0].Target)
		require.Equal(t, "z "+target, all[len(all)-1].Target)
		require.Equal(t, got, all[1:len(all)-1])

		n := 0
		for _, err := range s.ListObjects(ctx, target) {
			require.NoError(t, err)
			if n++; n == 3 {
				break
			}
		}
		require.Equal(t, 3, n, "a loop may stop early")
		require.Empty(t, collectObjects(t, s.ListObjects(ctx, "none")))
	})

	t.Run("identity pointers are settings, compared in order", func(t *testing.T) {
		s := open(t)
		first := Settings{Form: "jcs", Identity: []string{"/id", "/kind"}}
		for i, later := range [][]string{{"/kind", "/id"}, {"/id"}, {"/id", "/kind", "/x"}, nil, {}} {
			tgt := fmt.Sprintf("%s %d", target, i)
			require.NoError(t, s.CheckSettings(ctx, tgt, first))
			require.NoError(t, s.CheckSettings(ctx, tgt, Settings{Form: "jcs", Identity: slices.Clone(first.Identity)}), "the same pointers pass")
			given := Settings{Form: "jcs", Identity: later}
			err := s.CheckSettings(ctx, tgt, given)
			require.ErrorIs(t, err, ErrSettingsMismatch, "%q", later)
			require.Contains(t, err.Error(), `identity ["/id" "/kind"]`)
			var mm *SettingsMismatchError
			require.ErrorAs(t, err, &mm)
			require.Equal(t, SettingsMismatchError{Target: tgt, Recorded: Settings{Form: "jcs", Ignore: []string{}, Identity: []string{"/id", "/kind"}},
				Given: Settings{Form: "jcs", Ignore: []string{}, Identity: later}}, *mm)
		}

		tgt := target + " none"
		require.NoError(t, s.CheckSettings(ctx, tgt, Settings{Form: "jcs"}))
		require.NoError(t, s.CheckSettings(ctx, tgt, Settings{Form: "jcs", Identity: []string{}}), "no identity is no identity")
		err := s.CheckSettings(ctx, tgt, Settings{Form: "jcs", Identity: []string{"/id"}})
		require.ErrorIs(t, err, ErrSettingsMismatch)
		require.Contains(t, err.Error(), "identity none")
		var mm *SettingsMismatchError
		require.ErrorAs(t, err, &mm)
		require.Nil(t, mm.Recorded.Identity, "none recorded")
		require.Equal(t, []string{"/id"}, mm.Given.Identity)
	})

	t.Run("invalid object arguments are refused before writing", func(t *testing.T) {
		s := open(t)
		for name, call := range map[string]func() error{
			"apply without a version": func() error {
				_, err := s.ApplyVersion(ctx, target, "o", Applied{Identifier: "id"})
				return err
			},
			"apply without a key": func() error {
				_, err := s.ApplyVersion(ctx, target, "", Applied{Version: "v", Identifier: "id"})
				return err
			},
			"apply without a target": func() error {
				_, err := s.ApplyVersion(ctx, "", "o", Applied{Version: "v", Identifier: "id"})
				return err
			},
			"begin without a version": func() error { _, err := s.BeginUpdate(ctx, target, "o", "", ""); return err },
			"fail without a version": func() error {
				_, err := s.FailVersion(ctx, target, "o", "", Failure{Status: 400})
				return err
			},
			"reset without a version": func() error { return s.ResetVersion(ctx, target, "o", "") },
			"stale without a key":     func() error { return s.NoteStale(ctx, target, "") },
		} {
			require.ErrorIs(t, call(), ErrInvalidArgument, name)
		}
		c, err := s.CountObjects(ctx, "")
		require.NoError(t, err)
		require.Zero(t, c)
	})

	t.Run("a closed store refuses object calls", func(t *testing.T) {
		s := open(t)
		apply(t, s, "o", first)
		require.NoError(t, s.Close())
		_, err := s.LookupObject(ctx, target, "o")
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.LookupVersion(ctx, target, "o", "v1")
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.ApplyVersion(ctx, target, "o", Applied{Version: "v2"})
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.BeginUpdate(ctx, target, "o", "v2", "")
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.FailVersion(ctx, target, "o", "v2", Failure{Status: 400})
		require.ErrorIs(t, err, ErrClosed)
		require.ErrorIs(t, s.ResetVersion(ctx, target, "o", "v2"), ErrClosed)
		require.ErrorIs(t, s.NoteStale(ctx, target, "o"), ErrClosed)
		_, err = s.CountObjects(ctx, "")
		require.ErrorIs(t, err, ErrClosed)
		var errs []error
		for _, err := range s.ListObjects(ctx, "") {
			errs = append(errs, err)
		}
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], ErrClosed)
	})
}

// fillObjects writes to s the objects that checkObjectReader expects: in
// target, a (two versions), b (an update pending) and c (an update failed,
// a stale line); in other, d.
func fillObjects(t *testing.T, s objectStore) {
	t.Helper()
	ctx := context.Background()
	for _, a := range []struct{ target, key, version string }{
		{target, "a", "v1"}, {target, "a", "v2"}, {target, "b", "v1"}, {target, "c", "v1"}, {other, "d", "v1"},
	} {
		_, err := s.ApplyVersion(ctx, a.target, a.key, Applied{Version: a.version, Tag: "t-" + a.version, Identifier: "10.5072/" + a.key})
		require.NoError(t, err)
	}
	_, err := s.BeginUpdate(ctx, target, "b", "v2", "")
	require.NoError(t, err)
	_, err = s.FailVersion(ctx, target, "c", "v2", Failure{Status: 412, Problem: "changed"})
	require.NoError(t, err)
	require.NoError(t, s.NoteStale(ctx, target, "c"))
}

// checkObjectReader checks that r reads what fillObjects wrote, and the
// objects the writer listed (want).
func checkObjectReader(t *testing.T, r objectReader, want []Object) {
	t.Helper()
	ctx := context.Background()
	c, err := r.CountObjects(ctx, target)
	require.NoError(t, err)
	require.Equal(t, ObjectCounts{Objects: 3, Versions: 4, Updates: 1, Pending: 1, Failed: 1, Stale: 1}, c)
	c, err = r.CountObjects(ctx, "")
	require.NoError(t, err)
	require.Equal(t, ObjectCounts{Objects: 4, Versions: 5, Updates: 1, Pending: 1, Failed: 1, Stale: 1}, c)
	require.Len(t, want, 4)
	require.Equal(t, want, collectObjects(t, r.ListObjects(ctx, "")))
	require.Equal(t, other, want[0].Target, "other sorts first")
	require.Equal(t, want[:1], collectObjects(t, r.ListObjects(ctx, other)))
	require.Equal(t, want[1:], collectObjects(t, r.ListObjects(ctx, target)))
}

func TestReaderCountsAndListsObjects(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	s, err := Open(path)
	require.NoError(t, err)
	fillObjects(t, s)
	want := collectObjects(t, s.ListObjects(ctx, ""))
	beside, err := OpenReadOnly(path) // while the writer has it open
	require.NoError(t, err)
	defer beside.Close()
	checkObjectReader(t, beside, want)
	require.NoError(t, s.Close())

	main := checksum(t, path)
	r, err := OpenReadOnly(path)
	require.NoError(t, err)
	checkObjectReader(t, r, want)
	require.NoError(t, r.Close())
	require.Equal(t, main, checksum(t, path), "the reader wrote nothing")
	_, err = r.CountObjects(ctx, "")
	require.ErrorIs(t, err, ErrClosed)
	for _, err := range r.ListObjects(ctx, "") {
		require.ErrorIs(t, err, ErrClosed)
	}
}

func TestReaderOfAnEmptyFileHasNoObjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deposit.db")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	r, err := OpenReadOnly(path)
	require.NoError(t, err)
	defer r.Close()
	c, err := r.CountObjects(context.Background(), "")
	require.NoError(t, err)
	require.Zero(t, c)
	require.Empty(t, collectObjects(t, r.ListObjects(context.Background(), "")))
}

func TestPostgresReaderCountsAndListsObjects(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)
	conn := pgConn(t)
	_, err := conn.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	blank, err := OpenPostgresReadOnly(ctx, u)
	require.NoError(t, err)
	c, err := blank.CountObjects(ctx, "")
	require.NoError(t, err)
	require.Zero(t, c, "an empty schema has no objects")
	require.Empty(t, collectObjects(t, blank.ListObjects(ctx, "")))
	require.NoError(t, blank.Close())

	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	defer s.Close()
	fillObjects(t, s)
	want := collectObjects(t, s.ListObjects(ctx, ""))
	r, err := OpenPostgresReadOnly(ctx, u)
	require.NoError(t, err)
	checkObjectReader(t, r, want)
	require.NoError(t, r.Close())
	_, err = r.CountObjects(ctx, "")
	require.ErrorIs(t, err, ErrClosed)
	for _, err := range r.ListObjects(ctx, "") {
		require.ErrorIs(t, err, ErrClosed)
	}
}

// checkSettingsWithoutIdentity checks a store whose target's settings were
// recorded before identity pointers existed: they are no identity.
func checkSettingsWithoutIdentity(t *testing.T, s testStore) {
	t.Helper()
	ctx := context.Background()
	old := Settings{Form: "jcs", Ignore: []string{"/a"}, SecretFingerprint: "f1"}
	require.NoError(t, s.CheckSettings(ctx, target, old))
	withIdentity := old
	withIdentity.Identity = []string{"/id"}
	err := s.CheckSettings(ctx, target, withIdentity)
	require.ErrorIs(t, err, ErrSettingsMismatch)
	require.Contains(t, err.Error(), `key secret fingerprint f1, identity none`)
	fillObjects(t, s)
	c, err := s.CountObjects(ctx, "")
	require.NoError(t, err)
	require.Equal(t, 4, c.Objects)
	r, err := s.Lookup(ctx, target, "k")
	require.NoError(t, err)
	require.Equal(t, StateDone, r.State, "the records are kept")
}

func TestSettingsFromBeforeIdentityAreNoIdentity(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deposit.db")
	writeOldStore(t, path, 4,
		`INSERT INTO settings (target, form, ignore_pointers, secret_fingerprint, created_at) VALUES ('`+target+`', 'jcs', '["/a"]', 'f1', 1)`,
		`INSERT INTO records (target, key, state, outcome, identifier, status, attempts, created_at, updated_at) VALUES ('`+target+`', 'k', 'done', 'created', '10.5072/k', 201, 1, 1, 1)`)
	s, err := Open(path)
	require.NoError(t, err)
	defer s.Close()
	checkSettingsWithoutIdentity(t, s)
}

func TestPostgresSettingsFromBeforeIdentityAreNoIdentity(t *testing.T) {
	ctx := context.Background()
	u, schema := pgSchemaURL(t)
	conn := pgConn(t)
	m := loadPGMigrations()[0]
	for _, q := range []string{"CREATE SCHEMA " + schema, "SET search_path TO " + schema, m.sql,
		fmt.Sprintf("INSERT INTO schema_migrations (version, name) VALUES (%d, '%s')", m.version, m.name),
		`INSERT INTO settings (target, form, ignore_pointers, secret_fingerprint, created_at) VALUES ('` + target + `', 'jcs', '["/a"]', 'f1', now())`,
		`INSERT INTO records (target, key, state, outcome, identifier, status, attempts, created_at, updated_at) VALUES ('` + target + `', 'k', 'done', 'created', '10.5072/k', 201, 1, now(), now())`,
		"RESET search_path",
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	s, err := OpenPostgres(ctx, u)
	require.NoError(t, err)
	defer s.Close()
	checkSettingsWithoutIdentity(t, s)
}
