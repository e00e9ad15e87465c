package dedup

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

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

// fakeClock returns a clock that advances one second per reading.
func fakeClock() func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Second)
		return now
	}
}

var created = Confirmation{Outcome: OutcomeCreated, Identifier: "10.5072/first", Status: 201}

func TestBeginRecordsIntentAndKeepsFirstBody(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, WithClock(fakeClock()))

	r, err := s.Begin(ctx, target, "k1", []byte(`{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, StatePending, r.State)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, []byte(`{"a":1}`), r.Body)
	require.Equal(t, r.CreatedAt, r.UpdatedAt)
	first := r.CreatedAt

	r, err = s.Begin(ctx, target, "k1", []byte(`{"a":2}`))
	require.NoError(t, err)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, []byte(`{"a":1}`), r.Body, "the first body wins")
	require.Equal(t, first, r.CreatedAt)
	require.Equal(t, first.Add(time.Second), r.UpdatedAt)

	got, err := s.Lookup(ctx, target, "k1")
	require.NoError(t, err)
	require.Equal(t, r, got)
}

func TestBeginWithoutBodyStoresNil(t *testing.T) {
	s := openTemp(t)
	r, err := s.Begin(context.Background(), target, "k", nil)
	require.NoError(t, err)
	require.Nil(t, r.Body)
}

func TestBeginFillsTheBodyOfAPendingRowWithout(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	_, err := s.Begin(ctx, target, "k", nil)
	require.NoError(t, err)
	r, err := s.Begin(ctx, target, "k", []byte("late"))
	require.NoError(t, err)
	require.Equal(t, []byte("late"), r.Body)
	require.Equal(t, 2, r.Attempts)
}

func TestLookupOfUnknownKeyIsNotFound(t *testing.T) {
	s := openTemp(t)
	_, err := s.Lookup(context.Background(), target, "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestTransitions(t *testing.T) {
	ctx := context.Background()
	failure := Failure{Status: 422, Problem: "title is required"}
	other := Confirmation{Outcome: OutcomeExisting, Identifier: "10.5072/second", Status: 200}
	same := Confirmation{Outcome: OutcomeExisting, Identifier: created.Identifier, Status: 412}

	tests := []struct {
		name    string
		setup   func(s *SQLite) // brings key "k" into its starting state
		act     func(s *SQLite) (Record, error)
		wantErr error
		want    func(t *testing.T, r Record)
	}{
		{
			name:  "complete of a pending key makes it done",
			setup: func(s *SQLite) { s.Begin(ctx, target, "k", []byte("b")) },
			act:   func(s *SQLite) (Record, error) { return s.Complete(ctx, target, "k", created) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, OutcomeCreated, r.Outcome)
				require.Equal(t, created.Identifier, r.Identifier)
				require.Equal(t, 201, r.Status)
				require.Equal(t, 1, r.Attempts)
				require.Equal(t, []byte("b"), r.Body)
			},
		},
		{
			name:  "complete of an absent key makes it done with no attempts",
			setup: func(s *SQLite) {},
			act:   func(s *SQLite) (Record, error) { return s.Complete(ctx, target, "k", created) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, 0, r.Attempts)
			},
		},
		{
			name: "second complete with another identifier keeps the first and conflicts",
			setup: func(s *SQLite) {
				s.Complete(ctx, target, "k", created)
			},
			act:     func(s *SQLite) (Record, error) { return s.Complete(ctx, target, "k", other) },
			wantErr: ErrConflict,
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, OutcomeCreated, r.Outcome)
				require.Equal(t, created.Identifier, r.Identifier)
			},
		},
		{
			name:  "second complete with the same identifier keeps the first without error",
			setup: func(s *SQLite) { s.Complete(ctx, target, "k", created) },
			act:   func(s *SQLite) (Record, error) { return s.Complete(ctx, target, "k", same) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, OutcomeCreated, r.Outcome)
				require.Equal(t, 201, r.Status)
			},
		},
		{
			name:  "fail of a pending key makes it failed",
			setup: func(s *SQLite) { s.Begin(ctx, target, "k", nil) },
			act:   func(s *SQLite) (Record, error) { return s.Fail(ctx, target, "k", failure) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateFailed, r.State)
				require.Equal(t, 422, r.Status)
				require.Equal(t, "title is required", r.Problem)
				require.Equal(t, "", r.Identifier)
			},
		},
		{
			name:    "fail of a done key leaves it done",
			setup:   func(s *SQLite) { s.Complete(ctx, target, "k", created) },
			act:     func(s *SQLite) (Record, error) { return s.Fail(ctx, target, "k", failure) },
			wantErr: ErrInvalidTransition,
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, created.Identifier, r.Identifier)
				require.Equal(t, "", r.Problem)
			},
		},
		{
			name: "begin of a failed key returns it unchanged",
			setup: func(s *SQLite) {
				s.Begin(ctx, target, "k", nil)
				s.Fail(ctx, target, "k", failure)
			},
			act: func(s *SQLite) (Record, error) { return s.Begin(ctx, target, "k", nil) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateFailed, r.State)
				require.Equal(t, 1, r.Attempts)
			},
		},
		{
			name:  "begin of a done key returns it unchanged",
			setup: func(s *SQLite) { s.Complete(ctx, target, "k", created) },
			act:   func(s *SQLite) (Record, error) { return s.Begin(ctx, target, "k", []byte("x")) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, 0, r.Attempts)
				require.Nil(t, r.Body)
			},
		},
		{
			name: "reset of a failed key makes it pending again",
			setup: func(s *SQLite) {
				s.Begin(ctx, target, "k", []byte("b"))
				s.Fail(ctx, target, "k", failure)
			},
			act: func(s *SQLite) (Record, error) {
				if err := s.ResetFailed(ctx, target, "k"); err != nil {
					return Record{}, err
				}
				return s.Begin(ctx, target, "k", nil)
			},
			want: func(t *testing.T, r Record) {
				require.Equal(t, StatePending, r.State)
				require.Equal(t, 2, r.Attempts)
				require.Equal(t, 0, r.Status)
				require.Equal(t, "", r.Problem)
				require.Equal(t, []byte("b"), r.Body)
			},
		},
		{
			name:  "reset of a done key leaves it done",
			setup: func(s *SQLite) { s.Complete(ctx, target, "k", created) },
			act: func(s *SQLite) (Record, error) {
				if err := s.ResetFailed(ctx, target, "k"); err != nil {
					return Record{}, err
				}
				return s.Lookup(ctx, target, "k")
			},
			want: func(t *testing.T, r Record) { require.Equal(t, StateDone, r.State) },
		},
		{
			name:  "a failed key that the server confirms becomes done",
			setup: func(s *SQLite) { s.Fail(ctx, target, "k", failure) },
			act:   func(s *SQLite) (Record, error) { return s.Complete(ctx, target, "k", created) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, "", r.Problem)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTemp(t)
			tt.setup(s)
			r, err := tt.act(s)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			tt.want(t, r)
			stored, err := s.Lookup(ctx, target, "k")
			require.NoError(t, err)
			require.Equal(t, r, stored, "the returned record is the stored one")
		})
	}
}

func TestResetOfAbsentKeyIsNotFound(t *testing.T) {
	s := openTemp(t)
	require.ErrorIs(t, s.ResetFailed(context.Background(), target, "nope"), ErrNotFound)
}

func TestInvalidArgumentsAreRefusedBeforeWriting(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	tests := []struct {
		name string
		call func() error
	}{
		{"complete without identifier", func() error {
			_, err := s.Complete(ctx, target, "k", Confirmation{Outcome: OutcomeCreated})
			return err
		}},
		{"complete with unknown outcome", func() error {
			_, err := s.Complete(ctx, target, "k", Confirmation{Outcome: "maybe", Identifier: "x"})
			return err
		}},
		{"begin with empty key", func() error { _, err := s.Begin(ctx, target, "", nil); return err }},
		{"begin with empty target", func() error { _, err := s.Begin(ctx, "", "k", nil); return err }},
		{"complete many with one bad confirmation", func() error {
			_, err := s.CompleteMany(ctx, target, map[string]Confirmation{"k": created, "k2": {Outcome: OutcomeCreated}})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, tt.call(), ErrInvalidArgument)
			c, err := s.Count(ctx, "")
			require.NoError(t, err)
			require.Equal(t, Counts{}, c)
		})
	}
}

func TestCheckSettings(t *testing.T) {
	ctx := context.Background()
	first := Settings{Form: "jcs", Ignore: []string{"/b", "/a"}, SecretFingerprint: "f1"}
	tests := []struct {
		name    string
		later   Settings
		wantErr bool
	}{
		{"same settings pass", first, false},
		{"same pointers in another order pass", Settings{Form: "jcs", Ignore: []string{"/a", "/b", "/a"}, SecretFingerprint: "f1"}, false},
		{"another form is a mismatch", Settings{Form: "python", Ignore: []string{"/a", "/b"}, SecretFingerprint: "f1"}, true},
		{"another pointer is a mismatch", Settings{Form: "jcs", Ignore: []string{"/a"}, SecretFingerprint: "f1"}, true},
		{"another secret is a mismatch", Settings{Form: "jcs", Ignore: []string{"/a", "/b"}, SecretFingerprint: "f2"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTemp(t)
			require.NoError(t, s.CheckSettings(ctx, target, first))
			err := s.CheckSettings(ctx, target, tt.later)
			if !tt.wantErr {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrSettingsMismatch)
			require.Contains(t, err.Error(), `form "jcs", ignore ["/a" "/b"], key secret fingerprint f1`)
			var mm *SettingsMismatchError
			require.ErrorAs(t, err, &mm)
			require.Equal(t, SettingsMismatchError{Target: target, Recorded: Settings{Form: "jcs", Ignore: []string{"/a", "/b"}, SecretFingerprint: "f1"},
				Given: Settings{Form: tt.later.Form, Ignore: slices.Compact(slices.Sorted(slices.Values(tt.later.Ignore))),
					SecretFingerprint: tt.later.SecretFingerprint}}, *mm)
			require.NoError(t, s.CheckSettings(ctx, "another target", tt.later), "settings are per target")
		})
	}
}

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

func TestLookupManyReturnsOnlyStoredKeys(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	for i := range 10 {
		_, err := s.Begin(ctx, target, fmt.Sprintf("k%d", i), nil)
		require.NoError(t, err)
	}
	_, err := s.Begin(ctx, "other", "k1", nil)
	require.NoError(t, err)

	got, err := s.LookupMany(ctx, target, []string{"k1", "k3", "k3", "missing", `k"quoted`})
	require.NoError(t, err)
	require.Equal(t, []string{"k1", "k3"}, slices.Sorted(mapKeys(got)))
	require.Equal(t, target, got["k1"].Target)
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

	got, err := s.LookupDone(ctx, target, []string{"pending", "failed", "done", "done", "elsewhere", "missing"})
	require.NoError(t, err)
	require.Equal(t, map[string]Record{"done": {Target: target, Key: "done", State: StateDone,
		Outcome: OutcomeExisting, Identifier: "10.5072/x", Status: 200}}, got)
	got, err = s.LookupDone(ctx, target, nil)
	require.NoError(t, err)
	require.Empty(t, got)
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

func TestCompleteManyKeepsFirstResults(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	_, err := s.Complete(ctx, target, "k1", created)
	require.NoError(t, err)
	_, err = s.Begin(ctx, target, "k2", []byte("b2"))
	require.NoError(t, err)

	items := map[string]Confirmation{
		"k1": {Outcome: OutcomeExisting, Identifier: "10.5072/other", Status: 200},
		"k2": {Outcome: OutcomeCreated, Identifier: "10.5072/k2", Status: 201},
		"k3": {Outcome: OutcomeExisting, Identifier: "10.5072/k3", Status: 200},
	}
	got, err := s.CompleteMany(ctx, target, items)
	require.ErrorIs(t, err, ErrConflict)
	require.Len(t, got, 3)
	require.Equal(t, created.Identifier, got["k1"].Identifier)
	require.Equal(t, "10.5072/k2", got["k2"].Identifier)
	require.Equal(t, []byte("b2"), got["k2"].Body)
	require.Equal(t, OutcomeExisting, got["k3"].Outcome)

	c, err := s.Count(ctx, target)
	require.NoError(t, err)
	require.Equal(t, Counts{Done: 3}, c)
}

func TestCountAndListByState(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	// More rows than one list page, across two targets.
	want := map[State][]string{}
	for i := range listPage + 100 {
		key := fmt.Sprintf("k%05d", i)
		switch i % 3 {
		case 0:
			_, err := s.Begin(ctx, target, key, nil)
			require.NoError(t, err)
			want[StatePending] = append(want[StatePending], key)
		case 1:
			_, err := s.Complete(ctx, target, key, created)
			require.NoError(t, err)
			want[StateDone] = append(want[StateDone], key)
		case 2:
			_, err := s.Fail(ctx, target, key, Failure{Status: 400})
			require.NoError(t, err)
			want[StateFailed] = append(want[StateFailed], key)
		}
	}
	_, err := s.Begin(ctx, "b-other", "x", nil)
	require.NoError(t, err)

	c, err := s.Count(ctx, target)
	require.NoError(t, err)
	require.Equal(t, Counts{Pending: len(want[StatePending]), Done: len(want[StateDone]), Failed: len(want[StateFailed])}, c)
	c, err = s.Count(ctx, "")
	require.NoError(t, err)
	require.Equal(t, len(want[StatePending])+1, c.Pending)

	for _, st := range []State{StatePending, StateDone, StateFailed} {
		t.Run(string(st)+" rows are listed in key order", func(t *testing.T) {
			var keys []string
			for r, err := range s.List(ctx, target, st) {
				require.NoError(t, err)
				require.Equal(t, st, r.State)
				keys = append(keys, r.Key)
			}
			require.Equal(t, want[st], keys)
		})
	}
	t.Run("all targets and states are listed", func(t *testing.T) {
		n := 0
		for _, err := range s.List(ctx, "", "") {
			require.NoError(t, err)
			n++
		}
		require.Equal(t, listPage+101, n)
	})
	t.Run("pending rows of all targets are listed in target and key order", func(t *testing.T) {
		var keys []string
		for r, err := range s.List(ctx, "", StatePending) {
			require.NoError(t, err)
			keys = append(keys, r.Key)
		}
		require.Equal(t, append([]string{"x"}, want[StatePending]...), keys)
	})
	t.Run("an unknown state is an error", func(t *testing.T) {
		var errs []error
		for _, err := range s.List(ctx, "", "lost") {
			errs = append(errs, err)
		}
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], ErrInvalidArgument)
	})
	t.Run("breaking out of the loop stops the listing", func(t *testing.T) {
		n := 0
		for range s.List(ctx, "", "") {
			n++
			if n == 3 {
				break
			}
		}
		require.Equal(t, 3, n)
	})
}

func TestClosedStoreRefusesCalls(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "deposit.db"))
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "a second close is harmless")
	_, err = s.Begin(ctx, target, "k", nil)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Lookup(ctx, target, "k")
	require.ErrorIs(t, err, ErrClosed)
	var errs []error
	for _, err := range s.List(ctx, "", "") {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], ErrClosed)
}

func TestCancelledContextWritesNothing(t *testing.T) {
	s := openTemp(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Begin(ctx, target, "k", nil)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.Lookup(context.Background(), target, "k")
	require.ErrorIs(t, err, ErrNotFound)
}

// TestConcurrentWritersKeepOneResult has goroutines race Begin, Complete and
// Fail on shared keys (run it with -race). Each key ends with the result of
// the one Complete that succeeded, and every other Complete saw it.
func TestConcurrentWritersKeepOneResult(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	const workers, keys = 8, 60
	type report struct {
		key, own, got string
		conflict      bool
	}
	reports := make(chan report, workers*keys)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range keys {
				key := fmt.Sprintf("k%03d", (i*7+w*13)%keys)
				r, err := s.Begin(ctx, target, key, []byte(key))
				require.NoError(t, err)
				require.Equal(t, []byte(key), r.Body)
				if (i+w)%5 == 0 {
					r, err := s.Fail(ctx, target, key, Failure{Status: 400, Problem: "w"})
					if err != nil {
						require.ErrorIs(t, err, ErrInvalidTransition)
						require.Equal(t, StateDone, r.State)
					}
					continue
				}
				own := fmt.Sprintf("id-%d", w)
				r, err = s.Complete(ctx, target, key, Confirmation{Outcome: OutcomeCreated, Identifier: own, Status: 201})
				if err != nil {
					require.ErrorIs(t, err, ErrConflict)
				}
				reports <- report{key: key, own: own, got: r.Identifier, conflict: err != nil}
			}
		})
	}
	wg.Wait()
	close(reports)

	winners := map[string]int{}
	for rep := range reports {
		stored, err := s.Lookup(ctx, target, rep.key)
		require.NoError(t, err)
		require.Equal(t, StateDone, stored.State)
		require.Equal(t, stored.Identifier, rep.got, "every caller saw the stored result")
		require.Equal(t, rep.own != stored.Identifier, rep.conflict)
		if !rep.conflict {
			winners[rep.key]++
		}
	}
	require.Len(t, winners, keys)
	for key, n := range winners {
		require.Equal(t, 1, n, "key %s has one first result", key)
	}
}
