package dedup

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// other is a second target of the reader tests.
const other = "https://other.example/api idempotency-key"

// makeMixed creates a store at path with done, pending and failed rows in
// two targets and closes it.
func makeMixed(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	s, err := Open(path)
	require.NoError(t, err)
	for _, k := range []string{"d1", "d2", "d3"} {
		_, err := s.Complete(ctx, target, k, created)
		require.NoError(t, err)
	}
	_, err = s.Begin(ctx, target, "p1", []byte(`{"a":1}`))
	require.NoError(t, err)
	_, err = s.Fail(ctx, target, "f1", Failure{Status: 422, Problem: "invalid"})
	require.NoError(t, err)
	_, err = s.Begin(ctx, other, "p2", nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// mixedCounts are the counts of makeMixed, in target order.
var mixedCounts = []TargetCounts{
	{Target: other, Counts: Counts{Pending: 1}},
	{Target: target, Counts: Counts{Pending: 1, Done: 3, Failed: 1}},
}

// names lists the files in dir.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// keys lists the keys r yields for target and state.
func keys(t *testing.T, r *Reader, target string, state State) []string {
	t.Helper()
	var out []string
	for rec, err := range r.List(context.Background(), target, state) {
		require.NoError(t, err)
		out = append(out, rec.Key)
	}
	return out
}

func TestReaderLeavesAClosedStoreAsItWas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deposit.db")
	makeMixed(t, path)
	require.Equal(t, []string{"deposit.db"}, names(t, dir), "precondition: closed cleanly")
	before := checksum(t, path)

	r, err := OpenReadOnly(path)
	require.NoError(t, err)
	require.Equal(t, path, r.Path())
	got, err := r.CountByTarget(context.Background())
	require.NoError(t, err)
	require.Equal(t, mixedCounts, got)
	require.Equal(t, []string{"p2", "d1", "d2", "d3", "f1", "p1"}, keys(t, r, "", ""))
	require.Equal(t, []string{"f1"}, keys(t, r, "", StateFailed))
	require.NoError(t, r.Close())

	require.Equal(t, []string{"deposit.db"}, names(t, dir), "no -wal or -shm file was created")
	require.Equal(t, before, checksum(t, path), "the file is unchanged")
}

// holdChild opens the store DEDUP_DB and keeps it open: for each line on
// stdin, a key, it completes that key and prints "ok"; it closes the store
// when stdin closes.
func holdChild() error {
	ctx := context.Background()
	s, err := Open(os.Getenv("DEDUP_DB"))
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Println("ready")
	var key string
	for {
		if _, err := fmt.Scanln(&key); err != nil {
			return nil
		}
		if _, err := s.Complete(ctx, target, key, created); err != nil {
			return err
		}
		fmt.Println("ok")
	}
}

func TestReaderReadsAStoreAnotherProcessHasOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "deposit.db")
	makeMixed(t, path)
	early, err := OpenReadOnly(path) // before the writer: an immutable view
	require.NoError(t, err)
	defer early.Close()
	got, err := early.CountByTarget(ctx)
	require.NoError(t, err)
	require.Equal(t, mixedCounts, got)

	_, stdin, stdout := helper(t, "hold", "DEDUP_DB="+path)
	require.True(t, stdout.Scan())
	require.Equal(t, "ready", stdout.Text())
	complete := func(key string) {
		t.Helper()
		_, err := fmt.Fprintln(stdin, key)
		require.NoError(t, err)
		require.True(t, stdout.Scan())
		require.Equal(t, "ok", stdout.Text())
	}
	complete("d4")
	require.Subset(t, names(t, dir), []string{"deposit.db-wal", "deposit.db-shm"}, "precondition: the writer has its log")
	main := checksum(t, path)

	late, err := OpenReadOnly(path) // while the writer has it open
	require.NoError(t, err)
	defer late.Close()
	want := slices.Clone(mixedCounts)
	want[1].Done = 4
	for name, r := range map[string]*Reader{"opened before the writer": early, "opened beside the writer": late} {
		got, err := r.CountByTarget(ctx)
		require.NoError(t, err, name)
		require.Equal(t, want, got, "%s reads the row still in the log", name)
	}
	complete("p1") // a pending row becomes done
	want[1].Done, want[1].Pending = 5, 0
	for name, r := range map[string]*Reader{"opened before the writer": early, "opened beside the writer": late} {
		got, err := r.CountByTarget(ctx)
		require.NoError(t, err, name)
		require.Equal(t, want, got, name)
		require.Equal(t, []string{"d1", "d2", "d3", "d4", "f1", "p1"}, keys(t, r, target, ""), name)
	}
	require.Equal(t, main, checksum(t, path), "the readers never wrote to the main file")
	require.NoError(t, stdin.Close())
}

func TestReaderRefusesWhatItCannotRead(t *testing.T) {
	tests := []struct {
		name    string
		make    func(t *testing.T, path string)
		want    int // the schema version the reader is built for; 0: this package's
		wantErr error
		wantMsg string
	}{
		{
			name:    "a missing file is an error and is not created",
			make:    func(t *testing.T, path string) {},
			wantErr: fs.ErrNotExist,
		},
		{
			// The store is read by a package that writes one version
			// more, as the next version of this package will.
			name:    "a store at an older schema version is refused and not migrated",
			make:    makeMixed,
			want:    SchemaVersion() + 1,
			wantErr: ErrOlderSchema,
			wantMsg: fmt.Sprintf("schema version %d, this program writes %d", SchemaVersion(), SchemaVersion()+1),
		},
		{
			name: "a store at a newer schema version is refused",
			make: func(t *testing.T, path string) {
				makeMixed(t, path)
				db, err := sql.Open(driverName, path)
				require.NoError(t, err)
				defer db.Close()
				_, err = db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion()+1))
				require.NoError(t, err)
			},
			wantErr: ErrNewerSchema,
		},
		{
			name: "a text file is not a store",
			make: func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, []byte("key,identifier\n"), 0o644))
			},
			wantErr: ErrNotDepositStore,
		},
		{
			name:    "another program's database is not a store",
			make:    func(t *testing.T, path string) { makeForeign(t, path) },
			wantErr: ErrNotDepositStore,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "deposit.db")
			tt.make(t, path)
			before := names(t, dir)
			var sum [32]byte
			if len(before) > 0 {
				sum = checksum(t, path)
			}
			want := tt.want
			if want == 0 {
				want = SchemaVersion()
			}

			r, err := openReadOnly(path, want)
			require.Nil(t, r)
			require.ErrorIs(t, err, tt.wantErr)
			require.ErrorContains(t, err, path, "the error names the file")
			require.ErrorContains(t, err, tt.wantMsg)
			require.Equal(t, before, names(t, dir), "nothing was created")
			if len(before) > 0 {
				require.Equal(t, sum, checksum(t, path), "the file is unchanged")
			}
		})
	}
}

func TestReaderOfAnEmptyFileHasNoRecords(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "deposit.db")
	require.NoError(t, os.WriteFile(path, nil, 0o644))
	r, err := OpenReadOnly(path)
	require.NoError(t, err)
	defer r.Close()
	got, err := r.CountByTarget(context.Background())
	require.NoError(t, err)
	require.Empty(t, got)
	require.Empty(t, keys(t, r, "", ""))
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, info.Size(), "the file is still empty")
	require.Equal(t, []string{"deposit.db"}, names(t, dir))
}

func TestClosedReaderRefusesCalls(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deposit.db")
	makeMixed(t, path)
	r, err := OpenReadOnly(path)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close may be called again")
	_, err = r.CountByTarget(context.Background())
	require.ErrorIs(t, err, ErrClosed)
	for _, err := range r.List(context.Background(), "", "") {
		require.ErrorIs(t, err, ErrClosed)
	}
}

func TestCountByTargetMatchesAFullRead(t *testing.T) {
	// Many targets, each with a mix of states, counted in SQL and by List.
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	s, err := Open(path)
	require.NoError(t, err)
	for i := range 300 {
		tg := fmt.Sprintf("put https://repo%d.example", i%7)
		key := fmt.Sprintf("k%03d", i)
		switch i % 3 {
		case 0:
			_, err = s.Complete(ctx, tg, key, created)
		case 1:
			_, err = s.Begin(ctx, tg, key, nil)
		default:
			_, err = s.Fail(ctx, tg, key, Failure{Status: 400})
		}
		require.NoError(t, err)
	}
	require.NoError(t, s.Close())
	r, err := OpenReadOnly(path)
	require.NoError(t, err)
	defer r.Close()

	var want []TargetCounts
	for rec, err := range r.List(ctx, "", "") {
		require.NoError(t, err)
		if len(want) == 0 || want[len(want)-1].Target != rec.Target {
			want = append(want, TargetCounts{Target: rec.Target})
		}
		c := &want[len(want)-1].Counts
		switch rec.State {
		case StatePending:
			c.Pending++
		case StateDone:
			c.Done++
		case StateFailed:
			c.Failed++
		}
	}
	got, err := r.CountByTarget(ctx)
	require.NoError(t, err)
	require.Len(t, got, 7)
	require.Equal(t, want, got)
	require.True(t, slices.IsSortedFunc(got, func(a, b TargetCounts) int { return strings.Compare(a.Target, b.Target) }))
}
