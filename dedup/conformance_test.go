package dedup

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testStore is what the conformance tests use of a store, so that SQLite
// and Postgres run the same tests and so keep the same semantics.
type testStore interface {
	leaseStore
	CheckSettings(ctx context.Context, target string, s Settings) error
	LookupMany(ctx context.Context, target string, keys []string) (map[string]Record, error)
	Begin(ctx context.Context, target, key string, body []byte) (Record, error)
	Fail(ctx context.Context, target, key string, f Failure) (Record, error)
	ResetFailed(ctx context.Context, target, key string) error
	CompleteMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]Record, error)
	ConfirmMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]string, error)
	Count(ctx context.Context, target string) (Counts, error)
	List(ctx context.Context, target string, state State) iter.Seq2[Record, error]
	Close() error
	scanStore
	objectStore
}

func TestSQLiteConformance(t *testing.T) {
	runConformanceTests(t, func(t *testing.T) testStore { return openTemp(t) })
}

// runConformanceTests checks the states, transitions and errors that every
// backend shares on stores that open gives, each new and empty, closed by
// the test's cleanup.
func runConformanceTests(t *testing.T, open func(t *testing.T) testStore) {
	ctx := context.Background()
	failure := Failure{Status: 422, Problem: "title is required"}
	other := Confirmation{Outcome: OutcomeExisting, Identifier: "10.5072/second", Status: 200}
	same := Confirmation{Outcome: OutcomeExisting, Identifier: created.Identifier, Status: 412}

	t.Run("scan", func(t *testing.T) { runScanTests(t, open) })
	t.Run("objects", func(t *testing.T) { runObjectTests(t, open) })
	t.Run("uploads", func(t *testing.T) { runUploadTests(t, open) })

	t.Run("begin records intent and keeps the first body", func(t *testing.T) {
		s := open(t)
		r, err := s.Begin(ctx, target, "k1", []byte(`{"a":1}`))
		require.NoError(t, err)
		require.Equal(t, StatePending, r.State)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, []byte(`{"a":1}`), r.Body)
		require.Equal(t, r.CreatedAt, r.UpdatedAt)
		r2, err := s.Begin(ctx, target, "k1", []byte(`{"a":2}`))
		require.NoError(t, err)
		require.Equal(t, 2, r2.Attempts)
		require.Equal(t, []byte(`{"a":1}`), r2.Body, "the first body wins")
		require.Equal(t, r.CreatedAt, r2.CreatedAt)
		require.False(t, r2.UpdatedAt.Before(r.UpdatedAt))
		got, err := s.Lookup(ctx, target, "k1")
		require.NoError(t, err)
		require.Equal(t, r2, got)
	})

	t.Run("begin without a body stores nil; a later body fills it", func(t *testing.T) {
		s := open(t)
		r, err := s.Begin(ctx, target, "k", nil)
		require.NoError(t, err)
		require.Nil(t, r.Body)
		r, err = s.Begin(ctx, target, "k", []byte("late"))
		require.NoError(t, err)
		require.Equal(t, []byte("late"), r.Body)
		require.Equal(t, 2, r.Attempts)
	})

	t.Run("lookup and reset of an unknown key are not found", func(t *testing.T) {
		s := open(t)
		_, err := s.Lookup(ctx, target, "nope")
		require.ErrorIs(t, err, ErrNotFound)
		require.ErrorIs(t, s.ResetFailed(ctx, target, "nope"), ErrNotFound)
	})

	transitions := []struct {
		name    string
		setup   func(s testStore) // brings key "k" into its starting state
		act     func(s testStore) (Record, error)
		wantErr error
		want    func(t *testing.T, r Record)
	}{
		{
			name:  "complete of a pending key makes it done",
			setup: func(s testStore) { s.Begin(ctx, target, "k", []byte("b")) },
			act:   func(s testStore) (Record, error) { return s.Complete(ctx, target, "k", created) },
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
			setup: func(s testStore) {},
			act:   func(s testStore) (Record, error) { return s.Complete(ctx, target, "k", created) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, 0, r.Attempts)
			},
		},
		{
			name:    "second complete with another identifier keeps the first and conflicts",
			setup:   func(s testStore) { s.Complete(ctx, target, "k", created) },
			act:     func(s testStore) (Record, error) { return s.Complete(ctx, target, "k", other) },
			wantErr: ErrConflict,
			want: func(t *testing.T, r Record) {
				require.Equal(t, OutcomeCreated, r.Outcome)
				require.Equal(t, created.Identifier, r.Identifier)
			},
		},
		{
			name:  "second complete with the same identifier keeps the first without error",
			setup: func(s testStore) { s.Complete(ctx, target, "k", created) },
			act:   func(s testStore) (Record, error) { return s.Complete(ctx, target, "k", same) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, OutcomeCreated, r.Outcome)
				require.Equal(t, 201, r.Status)
			},
		},
		{
			name:  "a created after an existing with the same identifier keeps the first without error",
			setup: func(s testStore) { s.Complete(ctx, target, "k", same) },
			act:   func(s testStore) (Record, error) { return s.Complete(ctx, target, "k", created) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, OutcomeExisting, r.Outcome)
				require.Equal(t, created.Identifier, r.Identifier)
				require.Equal(t, 412, r.Status)
			},
		},
		{
			name:  "fail of a pending key makes it failed",
			setup: func(s testStore) { s.Begin(ctx, target, "k", nil) },
			act:   func(s testStore) (Record, error) { return s.Fail(ctx, target, "k", failure) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateFailed, r.State)
				require.Equal(t, 422, r.Status)
				require.Equal(t, "title is required", r.Problem)
				require.Equal(t, "", r.Identifier)
			},
		},
		{
			name:    "fail of a done key leaves it done",
			setup:   func(s testStore) { s.Complete(ctx, target, "k", created) },
			act:     func(s testStore) (Record, error) { return s.Fail(ctx, target, "k", failure) },
			wantErr: ErrInvalidTransition,
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, created.Identifier, r.Identifier)
				require.Equal(t, "", r.Problem)
			},
		},
		{
			name: "begin of a failed key returns it unchanged",
			setup: func(s testStore) {
				s.Begin(ctx, target, "k", nil)
				s.Fail(ctx, target, "k", failure)
			},
			act: func(s testStore) (Record, error) { return s.Begin(ctx, target, "k", nil) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateFailed, r.State)
				require.Equal(t, 1, r.Attempts)
			},
		},
		{
			name:  "begin of a done key returns it unchanged",
			setup: func(s testStore) { s.Complete(ctx, target, "k", created) },
			act:   func(s testStore) (Record, error) { return s.Begin(ctx, target, "k", []byte("x")) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, 0, r.Attempts)
				require.Nil(t, r.Body)
			},
		},
		{
			name: "reset of a failed key makes it pending again",
			setup: func(s testStore) {
				s.Begin(ctx, target, "k", []byte("b"))
				s.Fail(ctx, target, "k", failure)
			},
			act: func(s testStore) (Record, error) {
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
			setup: func(s testStore) { s.Complete(ctx, target, "k", created) },
			act: func(s testStore) (Record, error) {
				if err := s.ResetFailed(ctx, target, "k"); err != nil {
					return Record{}, err
				}
				return s.Lookup(ctx, target, "k")
			},
			want: func(t *testing.T, r Record) { require.Equal(t, StateDone, r.State) },
		},
		{
			name:  "a failed key that the server confirms becomes done",
			setup: func(s testStore) { s.Fail(ctx, target, "k", failure) },
			act:   func(s testStore) (Record, error) { return s.Complete(ctx, target, "k", created) },
			want: func(t *testing.T, r Record) {
				require.Equal(t, StateDone, r.State)
				require.Equal(t, "", r.Problem)
			},
		},
	}
	for _, tt := range transitions {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
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

	t.Run("invalid arguments are refused before writing", func(t *testing.T) {
		s := open(t)
		for name, call := range map[string]func() error{
			"complete without identifier": func() error {
				_, err := s.Complete(ctx, target, "k", Confirmation{Outcome: OutcomeCreated})
				return err
			},
			"complete with unknown outcome": func() error {
				_, err := s.Complete(ctx, target, "k", Confirmation{Outcome: "maybe", Identifier: "x"})
				return err
			},
			"begin with empty key":    func() error { _, err := s.Begin(ctx, target, "", nil); return err },
			"begin with empty target": func() error { _, err := s.Begin(ctx, "", "k", nil); return err },
			"complete many with one bad confirmation": func() error {
				_, err := s.CompleteMany(ctx, target, map[string]Confirmation{"k": created, "k2": {Outcome: OutcomeCreated}})
				return err
			},
		} {
			require.ErrorIs(t, call(), ErrInvalidArgument, name)
		}
		c, err := s.Count(ctx, "")
		require.NoError(t, err)
		require.Equal(t, Counts{}, c)
	})

	t.Run("settings are recorded per target and compared as sets", func(t *testing.T) {
		first := Settings{Form: "jcs", Ignore: []string{"/b", "/a"}, SecretFingerprint: "f1"}
		tests := []struct {
			name     string
			later    Settings
			mismatch bool
		}{
			{"same settings pass", first, false},
			{"same pointers in another order pass", Settings{Form: "jcs", Ignore: []string{"/a", "/b", "/a"}, SecretFingerprint: "f1"}, false},
			{"another form is a mismatch", Settings{Form: "python", Ignore: []string{"/a", "/b"}, SecretFingerprint: "f1"}, true},
			{"another pointer is a mismatch", Settings{Form: "jcs", Ignore: []string{"/a"}, SecretFingerprint: "f1"}, true},
			{"another secret is a mismatch", Settings{Form: "jcs", Ignore: []string{"/a", "/b"}, SecretFingerprint: "f2"}, true},
		}
		s := open(t)
		for i, tt := range tests {
			tgt := fmt.Sprintf("%s %d", target, i)
			require.NoError(t, s.CheckSettings(ctx, tgt, first))
			err := s.CheckSettings(ctx, tgt, tt.later)
			if !tt.mismatch {
				require.NoError(t, err, tt.name)
				continue
			}
			require.ErrorIs(t, err, ErrSettingsMismatch, tt.name)
			require.Contains(t, err.Error(), `form "jcs", ignore ["/a" "/b"], key secret fingerprint f1`)
			var mm *SettingsMismatchError
			require.ErrorAs(t, err, &mm, tt.name)
			require.Equal(t, SettingsMismatchError{Target: tgt, Recorded: Settings{Form: "jcs", Ignore: []string{"/a", "/b"}, SecretFingerprint: "f1"},
				Given: Settings{Form: tt.later.Form, Ignore: slices.Compact(slices.Sorted(slices.Values(tt.later.Ignore))),
					SecretFingerprint: tt.later.SecretFingerprint}}, *mm, tt.name)
			require.NoError(t, s.CheckSettings(ctx, tgt+" other", tt.later), "settings are per target")
		}
	})

	t.Run("lookup many returns only stored keys", func(t *testing.T) {
		s := open(t)
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
		got, err = s.LookupMany(ctx, target, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("lookup many leaves bodies out, lookup keeps them", func(t *testing.T) {
		s := open(t)
		_, err := s.Begin(ctx, target, "k", []byte(`{"a":1}`))
		require.NoError(t, err)
		one, err := s.Lookup(ctx, target, "k")
		require.NoError(t, err)
		require.Equal(t, []byte(`{"a":1}`), one.Body)
		got, err := s.LookupMany(ctx, target, []string{"k"})
		require.NoError(t, err)
		require.Nil(t, got["k"].Body)
		one.Body = nil
		require.Equal(t, one, got["k"], "every other field as Lookup has it")
		got, err = s.LookupMany(ctx, target, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("complete many keeps first results", func(t *testing.T) {
		s := open(t)
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
	})

	t.Run("confirm many marks pending, failed and unknown keys done and reports only conflicts", func(t *testing.T) {
		s := open(t)
		_, err := s.Complete(ctx, target, "done-other", created)
		require.NoError(t, err)
		_, err = s.Complete(ctx, target, "done-same", created)
		require.NoError(t, err)
		_, err = s.Begin(ctx, target, "pending", []byte("b"))
		require.NoError(t, err)
		_, err = s.Fail(ctx, target, "failed", failure)
		require.NoError(t, err)
		confirm := func(id string) Confirmation {
			return Confirmation{Outcome: OutcomeCreated, Identifier: id, Status: 201}
		}
		items := map[string]Confirmation{
			"done-other": confirm("10.5072/other"),
			"done-same":  confirm(created.Identifier),
			"pending":    confirm("10.5072/pending"),
			"failed":     confirm("10.5072/failed"),
			"unknown":    confirm("10.5072/unknown"),
		}
		firsts, err := s.ConfirmMany(ctx, target, items)
		require.ErrorIs(t, err, ErrConflict)
		require.Contains(t, err.Error(), "done-other")
		require.Equal(t, map[string]string{"done-other": created.Identifier}, firsts)
		for k, c := range items {
			r, err := s.Lookup(ctx, target, k)
			require.NoError(t, err)
			require.Equal(t, StateDone, r.State, k)
			if k == "done-other" {
				require.Equal(t, created.Identifier, r.Identifier, "the first result stays")
				continue
			}
			require.Equal(t, c.Identifier, r.Identifier, k)
		}
		r, err := s.Lookup(ctx, target, "pending")
		require.NoError(t, err)
		require.Equal(t, []byte("b"), r.Body, "the intent's body is kept")
		require.Equal(t, 201, r.Status)
		r, err = s.Lookup(ctx, target, "failed")
		require.NoError(t, err)
		require.Empty(t, r.Problem, "a failed key's problem is cleared")

		firsts, err = s.ConfirmMany(ctx, target, map[string]Confirmation{"pending": confirm("10.5072/pending")})
		require.NoError(t, err, "the same confirmation again is no conflict")
		require.Empty(t, firsts)
		_, err = s.ConfirmMany(ctx, target, map[string]Confirmation{"k": {Outcome: OutcomeCreated}})
		require.ErrorIs(t, err, ErrInvalidArgument)
	})

	t.Run("a group confirming another outcome with the same identifier is no conflict", func(t *testing.T) {
		s := open(t)
		_, err := s.Complete(ctx, target, "created-first", created)
		require.NoError(t, err)
		_, err = s.Complete(ctx, target, "existing-first", same)
		require.NoError(t, err)
		firsts, err := s.ConfirmMany(ctx, target, map[string]Confirmation{"created-first": same, "existing-first": created})
		require.NoError(t, err)
		require.Empty(t, firsts)
		got, err := s.CompleteMany(ctx, target, map[string]Confirmation{"created-first": same, "existing-first": created})
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, got["created-first"].Outcome, "the first outcome stays")
		require.Equal(t, OutcomeExisting, got["existing-first"].Outcome, "the first outcome stays")
	})

	t.Run("count and list by state", func(t *testing.T) {
		s := open(t)
		want := map[State][]string{}
		items := map[string]Confirmation{}
		for i := range listPage + 100 {
			key := fmt.Sprintf("k%05d", i)
			switch i % 3 {
			case 0:
				_, err := s.Begin(ctx, target, key, nil)
				require.NoError(t, err)
				want[StatePending] = append(want[StatePending], key)
			case 1:
				items[key] = created
				want[StateDone] = append(want[StateDone], key)
			case 2:
				_, err := s.Fail(ctx, target, key, Failure{Status: 400})
				require.NoError(t, err)
				want[StateFailed] = append(want[StateFailed], key)
			}
		}
		_, err := s.CompleteMany(ctx, target, items)
		require.NoError(t, err)
		_, err = s.Begin(ctx, "b-other", "x", nil)
		require.NoError(t, err)

		c, err := s.Count(ctx, target)
		require.NoError(t, err)
		require.Equal(t, Counts{Pending: len(want[StatePending]), Done: len(want[StateDone]), Failed: len(want[StateFailed])}, c)
		c, err = s.Count(ctx, "")
		require.NoError(t, err)
		require.Equal(t, len(want[StatePending])+1, c.Pending)
		for _, st := range []State{StatePending, StateDone, StateFailed} {
			var keys []string
			for r, err := range s.List(ctx, target, st) {
				require.NoError(t, err)
				require.Equal(t, st, r.State)
				keys = append(keys, r.Key)
			}
			require.Equal(t, want[st], keys, "%s rows in key order", st)
		}
		n := 0
		for _, err := range s.List(ctx, "", "") {
			require.NoError(t, err)
			n++
		}
		require.Equal(t, listPage+101, n)
		var keys []string
		for r, err := range s.List(ctx, "", StatePending) {
			require.NoError(t, err)
			keys = append(keys, r.Key)
		}
		require.Equal(t, append([]string{"x"}, want[StatePending]...), keys, "pending rows of all targets in target and key order")
		var errs []error
		for _, err := range s.List(ctx, "", "lost") {
			errs = append(errs, err)
		}
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], ErrInvalidArgument)
	})

	t.Run("a closed store refuses calls", func(t *testing.T) {
		s := open(t)
		require.NoError(t, s.Close())
		require.NoError(t, s.Close(), "a second close is harmless")
		_, err := s.Begin(ctx, target, "k", nil)
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.Lookup(ctx, target, "k")
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.Complete(ctx, target, "k", created)
		require.ErrorIs(t, err, ErrClosed)
		_, err = s.Count(ctx, "")
		require.ErrorIs(t, err, ErrClosed)
		var errs []error
		for _, err := range s.List(ctx, "", "") {
			errs = append(errs, err)
		}
		require.Len(t, errs, 1)
		require.ErrorIs(t, errs[0], ErrClosed)
	})

	t.Run("a cancelled context writes nothing", func(t *testing.T) {
		s := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.Begin(cctx, target, "k", nil)
		require.ErrorIs(t, err, context.Canceled)
		_, err = s.Lookup(ctx, target, "k")
		require.ErrorIs(t, err, ErrNotFound)
	})

	t.Run("concurrent writers keep one result", func(t *testing.T) {
		s := open(t)
		concurrentWriters(t, []testStore{s}, 8)
	})
}

// concurrentWriters has workers goroutines, spread over stores (which
// share one database), race Begin, Complete and Fail on shared keys. Each
// key ends with the result of the one Complete that succeeded, and every
// other Complete saw it.
func concurrentWriters(t *testing.T, stores []testStore, workers int) {
	ctx := context.Background()
	const keys = 60
	type report struct {
		key, own, got string
		conflict      bool
	}
	reports := make(chan report, workers*keys)
	var wg sync.WaitGroup
	for w := range workers {
		s := stores[w%len(stores)]
		// Off the test goroutine: assert, and stop this worker on a failure.
		wg.Go(func() {
			for i := range keys {
				key := fmt.Sprintf("k%03d", (i*7+w*13)%keys)
				r, err := s.Begin(ctx, target, key, []byte(key))
				if !assert.NoError(t, err) || !assert.Equal(t, []byte(key), r.Body) {
					return
				}
				if (i+w)%5 == 0 {
					r, err := s.Fail(ctx, target, key, Failure{Status: 400, Problem: "w"})
					if err != nil && (!assert.ErrorIs(t, err, ErrInvalidTransition) || !assert.Equal(t, StateDone, r.State)) {
						return
					}
					continue
				}
				own := fmt.Sprintf("id-%d", w)
				r, err = s.Complete(ctx, target, key, Confirmation{Outcome: OutcomeCreated, Identifier: own, Status: 201})
				if err != nil && !assert.ErrorIs(t, err, ErrConflict) {
					return
				}
				reports <- report{key: key, own: own, got: r.Identifier, conflict: err != nil}
			}
		})
	}
	wg.Wait()
	close(reports)

	winners := map[string]int{}
	for rep := range reports {
		stored, err := stores[0].Lookup(ctx, target, rep.key)
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
