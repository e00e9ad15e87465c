package dedup

import (
	"context"
	"database/sql"
	"fmt"
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
		short := Lease{Owner: a.Owner, TTL: 200 * time.Millisecond}
		_, err := s.Claim(ctx, target, "k", nil, short)
		require.NoError(t, err)
		lost, err := s.Renew(ctx, a, []Ref{ref}) // now a minute
		require.NoError(t, err)
		require.Empty(t, lost)
		time.Sleep(250 * time.Millisecond)
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
	db, err := sql.Open(driverName, path)
	require.NoError(t, err)
	ms := loadMigrations()
	for _, q := range []string{
		"CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT",
		ms[0].sql,
		fmt.Sprintf("INSERT INTO schema_migrations VALUES (1, '%s', 1)", ms[0].name),
		"INSERT INTO records (target, key, state, outcome, identifier, status, attempts, created_at, updated_at) VALUES ('t', 'done1', 'done', 'created', 'id-1', 201, 1, 1, 1)",
		"INSERT INTO records (target, key, state, attempts, created_at, updated_at) VALUES ('t', 'pending1', 'pending', 1, 1, 1)",
		fmt.Sprintf("PRAGMA application_id = %d", applicationID),
		"PRAGMA user_version = 1",
	} {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
	require.NoError(t, db.Close())

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
