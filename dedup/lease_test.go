package dedup

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// leaseStore is what the lease tests need of a store, so that every
// backend runs the same tests.
type leaseStore interface {
	Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error)
	Renew(ctx context.Context, lease Lease, refs []Ref) ([]Ref, error)
	Release(ctx context.Context, owner string, ref Ref, unsent bool) error
	Lookup(ctx context.Context, target, key string) (Record, error)
	Complete(ctx context.Context, target, key string, c Confirmation) (Record, error)
}

func TestSQLiteLeases(t *testing.T) {
	runLeaseTests(t, func(t *testing.T) leaseStore { return openTemp(t) })
}

// expired is a lease so short that it has ended by the next call.
const expired = time.Microsecond

// runLeaseTests checks the lease rules on stores that open gives, using the
// store's own clock: an expired lease is one whose TTL has passed.
func runLeaseTests(t *testing.T, open func(t *testing.T) leaseStore) {
	ctx := context.Background()
	a := Lease{Owner: "owner-a", TTL: time.Minute}
	b := Lease{Owner: "owner-b", TTL: time.Minute}
	ref := Ref{Target: target, Key: "k"}

	// waitOut waits until a lease of TTL expired has surely ended.
	waitOut := func() { time.Sleep(2 * time.Millisecond) }

	t.Run("a new key is pending, leased to its claimer", func(t *testing.T) {
		s := open(t)
		before := time.Now()
		r, err := s.Claim(ctx, target, "k", []byte("b1"), a)
		require.NoError(t, err)
		require.Equal(t, StatePending, r.State)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, []byte("b1"), r.Body)
		require.Equal(t, "owner-a", r.LeaseOwner)
		require.WithinDuration(t, before.Add(time.Minute), r.LeaseExpires, 10*time.Second)
		got, err := s.Lookup(ctx, target, "k")
		require.NoError(t, err)
		require.Equal(t, r.LeaseOwner, got.LeaseOwner)
		require.True(t, r.LeaseExpires.Equal(got.LeaseExpires))
	})

	t.Run("a live lease refuses another owner and changes nothing", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", []byte("b1"), a)
		require.NoError(t, err)
		r, err := s.Claim(ctx, target, "k", []byte("b2"), b)
		require.ErrorIs(t, err, ErrLeased)
		require.Equal(t, "owner-a", r.LeaseOwner)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, []byte("b1"), r.Body)
	})

	t.Run("the owner claims again: one more attempt", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", nil, a)
		require.NoError(t, err)
		r, err := s.Claim(ctx, target, "k", []byte("late"), a)
		require.NoError(t, err)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, []byte("late"), r.Body, "a pending row without a body takes the first one given")
	})

	t.Run("an expired lease is taken over; its old owner loses it", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", []byte("b1"), Lease{Owner: a.Owner, TTL: expired})
		require.NoError(t, err)
		waitOut()
		r, err := s.Claim(ctx, target, "k", []byte("b2"), b)
		require.NoError(t, err)
		require.Equal(t, "owner-b", r.LeaseOwner)
		require.Equal(t, 2, r.Attempts)
		require.Equal(t, []byte("b1"), r.Body, "the body first recorded is re-sent")

		lost, err := s.Renew(ctx, a, []Ref{ref})
		require.NoError(t, err)
		require.Equal(t, []Ref{ref}, lost)
		lost, err = s.Renew(ctx, b, []Ref{ref, {Target: target, Key: "never-claimed"}})
		require.NoError(t, err)
		require.Equal(t, []Ref{{Target: target, Key: "never-claimed"}}, lost)
	})

	t.Run("renewal keeps a lease alive past its first expiry", func(t *testing.T) {
		s := open(t)
		short := Lease{Owner: a.Owner, TTL: 10 * time.Second}
		first, err := s.Claim(ctx, target, "k", nil, short)
		require.NoError(t, err)
		lost, err := s.Renew(ctx, a, []Ref{ref}) // now a minute
		require.NoError(t, err)
		require.Empty(t, lost)
		// The lease now ends a minute from the renewal, well past where it
		// would have ended (however long the renewal took to arrive).
		r, err := s.Lookup(ctx, target, "k")
		require.NoError(t, err)
		require.True(t, r.LeaseExpires.After(first.LeaseExpires.Add(40*time.Second)),
			"renewed to %v, first to end at %v", r.LeaseExpires, first.LeaseExpires)
		_, err = s.Claim(ctx, target, "k", nil, b)
		require.ErrorIs(t, err, ErrLeased)
	})

	t.Run("release frees the key for another owner; only the owner releases", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", nil, a)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, b.Owner, ref, false))
		_, err = s.Claim(ctx, target, "k", nil, b)
		require.ErrorIs(t, err, ErrLeased, "a release by a non-owner changes nothing")

		require.NoError(t, s.Release(ctx, a.Owner, ref, false))
		r, err := s.Lookup(ctx, target, "k")
		require.NoError(t, err)
		require.Equal(t, "owner-a", r.LeaseOwner, "the last claimer is kept")
		require.True(t, r.LeaseExpires.IsZero())
		require.Equal(t, StatePending, r.State, "a release keeps the intent")
		lost, err := s.Renew(ctx, a, []Ref{ref})
		require.NoError(t, err)
		require.Equal(t, []Ref{ref}, lost, "a renewal never revives a released lease")
		r, err = s.Claim(ctx, target, "k", nil, b)
		require.NoError(t, err)
		require.Equal(t, "owner-b", r.LeaseOwner)
	})

	t.Run("an unsent first claim leaves no row", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", []byte("b1"), a)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, a.Owner, ref, true))
		_, err = s.Lookup(ctx, target, "k")
		require.ErrorIs(t, err, ErrNotFound)
	})

	t.Run("an unsent later claim keeps the earlier attempt's uncertainty", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", []byte("b1"), a)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, a.Owner, ref, false))
		_, err = s.Claim(ctx, target, "k", nil, b)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, b.Owner, ref, true))
		r, err := s.Lookup(ctx, target, "k")
		require.NoError(t, err)
		require.Equal(t, StatePending, r.State)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, []byte("b1"), r.Body)
	})

	t.Run("a done row is leased for its later steps and stays done", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", nil, a)
		require.NoError(t, err)
		_, err = s.Complete(ctx, target, "k", created)
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, a.Owner, ref, true))
		r, err := s.Lookup(ctx, target, "k")
		require.NoError(t, err, "an unsent release never removes a done row")
		require.Equal(t, StateDone, r.State)

		r, err = s.Claim(ctx, target, "k", nil, b)
		require.NoError(t, err)
		require.Equal(t, StateDone, r.State)
		require.Equal(t, created.Identifier, r.Identifier)
		require.Equal(t, "owner-b", r.LeaseOwner)
		_, err = s.Claim(ctx, target, "k", nil, a)
		require.ErrorIs(t, err, ErrLeased)
	})

	t.Run("a lease needs an owner and a duration", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "k", nil, Lease{TTL: time.Minute})
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = s.Claim(ctx, target, "k", nil, Lease{Owner: "x"})
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = s.Lookup(ctx, target, "k")
		require.ErrorIs(t, err, ErrNotFound)
	})
}

// TestVersionOneStoreGainsLeases opens a store written by the first schema
// version: its rows are kept and can be leased.
func TestVersionOneStoreGainsLeases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	writeOldStore(t, path, 1,
		"INSERT INTO records (target, key, state, outcome, identifier, status, attempts, created_at, updated_at) VALUES ('t', 'done1', 'done', 'created', 'id-1', 201, 1, 1, 1)",
		"INSERT INTO records (target, key, state, attempts, created_at, updated_at) VALUES ('t', 'pending1', 'pending', 1, 1, 1)")

	s, err := Open(path)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	r, err := s.Lookup(ctx, "t", "done1")
	require.NoError(t, err)
	require.Equal(t, "id-1", r.Identifier)
	require.Equal(t, "", r.LeaseOwner)
	r, err = s.Claim(ctx, "t", "pending1", nil, Lease{Owner: "o", TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, "o", r.LeaseOwner)
	var version int
	require.NoError(t, s.rdb.QueryRow("PRAGMA user_version").Scan(&version))
	require.Equal(t, SchemaVersion(), version)
}

// manyClaimer is a store with ClaimMany.
type manyClaimer interface {
	leaseStore
	ClaimMany(ctx context.Context, lease Lease, intents []Intent) ([]Claimed, error)
}

// claimViaMany is a store whose Claim is a ClaimMany of one intent, so that
// the lease rules are checked on ClaimMany too.
type claimViaMany struct{ manyClaimer }

func (s claimViaMany) Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error) {
	got, err := s.ClaimMany(ctx, lease, []Intent{{Ref: Ref{Target: target, Key: key}, Body: body}})
	if err != nil {
		return Record{}, err
	}
	return got[0].Record, got[0].Err()
}

func TestSQLiteClaimMany(t *testing.T) {
	runClaimManyTests(t, func(t *testing.T) manyClaimer { return openTemp(t) })
}

// runClaimManyTests checks that ClaimMany keeps every lease rule, and
// what it does with a group whose keys stand in different states.
func runClaimManyTests(t *testing.T, open func(t *testing.T) manyClaimer) {
	t.Run("the lease rules, one intent at a time", func(t *testing.T) {
		runLeaseTests(t, func(t *testing.T) leaseStore { return claimViaMany{open(t)} })
	})
	ctx := context.Background()
	a := Lease{Owner: "owner-a", TTL: time.Minute}
	b := Lease{Owner: "owner-b", TTL: time.Minute}

	t.Run("a group of new, pending, done and leased keys", func(t *testing.T) {
		s := open(t)
		_, err := s.Claim(ctx, target, "pending", []byte("p1"), Lease{Owner: "gone", TTL: expired})
		require.NoError(t, err)
		_, err = s.Complete(ctx, target, "done", Confirmation{Outcome: OutcomeCreated, Identifier: "id-done", Status: 201})
		require.NoError(t, err)
		_, err = s.Claim(ctx, target, "leased", []byte("l1"), b)
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond) // the "gone" lease has ended

		intents := []Intent{
			{Ref: Ref{Target: target, Key: "new"}, Body: []byte("n1")},
			{Ref: Ref{Target: target, Key: "leased"}, Body: []byte("l2")},
			{Ref: Ref{Target: target, Key: "done"}},
			{Ref: Ref{Target: target, Key: "pending"}, Body: []byte("p2")},
			{Ref: Ref{Target: "other", Key: "new"}, Body: nil},
		}
		got, err := s.ClaimMany(ctx, a, intents)
		require.NoError(t, err)
		require.Len(t, got, len(intents))
		for i, c := range got {
			require.Equal(t, intents[i].Ref, Ref{Target: c.Record.Target, Key: c.Record.Key}, "results come in the intents' order")
		}

		require.False(t, got[0].Leased)
		require.Equal(t, StatePending, got[0].Record.State)
		require.Equal(t, 1, got[0].Record.Attempts)
		require.Equal(t, []byte("n1"), got[0].Record.Body)
		require.Equal(t, "owner-a", got[0].Record.LeaseOwner)

		require.True(t, got[1].Leased, "another owner's live lease refuses the claim")
		require.Equal(t, "owner-b", got[1].Record.LeaseOwner)
		require.Equal(t, 1, got[1].Record.Attempts, "a refused claim counts no attempt")
		require.Equal(t, []byte("l1"), got[1].Record.Body)

		require.False(t, got[2].Leased)
		require.Equal(t, StateDone, got[2].Record.State)
		require.Equal(t, "id-done", got[2].Record.Identifier)
		require.Equal(t, "owner-a", got[2].Record.LeaseOwner, "a done row is leased all the same")

		require.False(t, got[3].Leased, "an expired lease is taken over")
		require.Equal(t, 2, got[3].Record.Attempts)
		require.Equal(t, []byte("p1"), got[3].Record.Body, "the first body stays")

		require.False(t, got[4].Leased)
		require.Nil(t, got[4].Record.Body)

		for i, want := range []string{"", "owner-b", "", "gone", ""} {
			require.Equal(t, want, got[i].PriorOwner, "the last claimer before the claim, %s", intents[i].Key)
		}

		for i, in := range intents {
			rec, err := s.Lookup(ctx, in.Target, in.Key)
			require.NoError(t, err)
			require.Equal(t, got[i].Record.State, rec.State, in.Key)
			require.Equal(t, got[i].Record.Attempts, rec.Attempts, in.Key)
			require.Equal(t, got[i].Record.LeaseOwner, rec.LeaseOwner, in.Key)
		}
		again, err := s.ClaimMany(ctx, a, intents[:1])
		require.NoError(t, err)
		require.Equal(t, "owner-a", again[0].PriorOwner, "a claim names the owner's own earlier claim")
	})

	t.Run("a key named twice is refused and nothing is written", func(t *testing.T) {
		s := open(t)
		_, err := s.ClaimMany(ctx, a, []Intent{{Ref: Ref{Target: target, Key: "k"}}, {Ref: Ref{Target: target, Key: "k"}}})
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = s.Lookup(ctx, target, "k")
		require.ErrorIs(t, err, ErrNotFound)
	})

	t.Run("no intents, nothing to do", func(t *testing.T) {
		got, err := open(t).ClaimMany(ctx, a, nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})
}

func TestClaimedErrNamesTheKeyAndTheLeasesEnd(t *testing.T) {
	until := time.Date(2026, 12, 1, 10, 0, 0, 5000, time.UTC)
	rec := Record{Target: "t", Key: "k1", State: StatePending, LeaseOwner: "other", LeaseExpires: until}
	require.NoError(t, Claimed{Record: rec}.Err(), "a claim that took its lease")
	err := Claimed{Record: rec, Leased: true}.Err()
	require.ErrorIs(t, err, ErrLeased)
	require.ErrorContains(t, err, "key k1 until 2026-12-01T10:00:00.000005Z")
}
