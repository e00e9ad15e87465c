package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/target/put"
)

// logLines is a log handler that keeps each record as one line of text
// (message and attributes) and tells signal of each message that contains
// watch.
type logLines struct {
	watch  string
	signal chan struct{}

	mu       sync.Mutex
	lines    []string
	expireBy []time.Time // the expire_by attributes logged
}

// attr returns the attribute key of r.
func attr(r slog.Record, key string) (slog.Value, bool) {
	var v slog.Value
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, found = a.Value, true
		}
		return !found
	})
	return v, found
}

func (h *logLines) Enabled(context.Context, slog.Level) bool { return true }

func (h *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.mu.Lock()
	h.lines = append(h.lines, b.String())
	if v, ok := attr(r, "expire_by"); ok {
		h.expireBy = append(h.expireBy, v.Time())
	}
	h.mu.Unlock()
	if h.watch != "" && strings.Contains(r.Message, h.watch) {
		select {
		case h.signal <- struct{}{}:
		default:
		}
	}
	return nil
}

func (h *logLines) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logLines) WithGroup(string) slog.Handler      { return h }

// matching returns the lines that contain s.
func (h *logLines) matching(s string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// leasesIn sums the leases=N attributes of lines.
func leasesIn(t *testing.T, lines []string) int {
	t.Helper()
	n := 0
	for _, l := range lines {
		m := regexp.MustCompile(` leases=(\d+)`).FindStringSubmatch(l)
		require.NotNil(t, m, "no leases= in %q", l)
		k, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		n += k
	}
	return n
}

// slowClaimStore is a real store whose second ClaimMany waits until the
// lease the first one took has been renewed `enough` times: the caller that
// led the first group carries the second meanwhile. It counts renewals per
// key.
type slowClaimStore struct {
	*dedup.SQLite
	first  dedup.Ref
	enough int

	mu       sync.Mutex
	claims   int
	renewals map[dedup.Ref]int
	renewed  chan struct{} // closed once first was renewed enough times
}

func (s *slowClaimStore) ClaimMany(ctx context.Context, lease dedup.Lease, intents []dedup.Intent) ([]dedup.Claimed, error) {
	s.mu.Lock()
	s.claims++
	second := s.claims == 2
	s.mu.Unlock()
	if second {
		<-s.renewed // a store call that takes its time, past its deadline too
	}
	return s.SQLite.ClaimMany(ctx, lease, intents)
}

func (s *slowClaimStore) Renew(ctx context.Context, lease dedup.Lease, refs []dedup.Ref) ([]dedup.Ref, error) {
	lost, err := s.SQLite.Renew(ctx, lease, refs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range refs {
		s.renewals[r]++
	}
	if s.renewals[s.first] == s.enough {
		close(s.renewed)
	}
	return lost, err
}

// A lease is renewed from its claim, whoever carries it: the deposit whose
// claim led a group of claims goes on to run the next group, queued
// meanwhile, before it gets to its own request. Here that next group takes
// longer than the whole lease; the leader's lease is renewed all along and
// is still this client's when the leader gets back to its deposit. The
// clock is synctest's: a lease left unrenewed would block the bubble
// instead (the slow claim waits for renewals that never come).
func TestALeaseIsRenewedWhileItsClaimerCarriesOthersClaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = time.Second
		first, second := dedup.Ref{Target: "t", Key: "first"}, dedup.Ref{Target: "t", Key: "second"}
		// 12 renewals, a tenth of the lease apart: longer than the lease.
		store := &slowClaimStore{SQLite: openStore(t), first: first, enough: 12,
			renewals: map[dedup.Ref]int{}, renewed: make(chan struct{})}
		c, err := New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store, Lease: ttl})
		require.NoError(t, err)
		cl := newClaims(store, c.leases)

		// The first caller leads; the second queues while the first's
		// group runs, so the leader carries it.
		gate := make(chan struct{})
		cl.group.run = func(group []*claimCall) {
			if group[0].in.Ref == first {
				<-gate
			}
			cl.run(group)
		}
		leader := make(chan error, 1)
		go func() {
			got, err := cl.claim(first, nil, false)
			if err == nil {
				err = got.Err()
			}
			leader <- err
		}()
		synctest.Wait() // the leader waits at the gate, its group taken
		follower := make(chan error, 1)
		go func() {
			_, err := cl.claim(second, nil, false)
			follower <- err
		}()
		synctest.Wait() // the second call is queued
		claimedAt := time.Now()
		close(gate)

		require.NoError(t, <-leader)
		require.NoError(t, <-follower)
		carried := time.Since(claimedAt)
		require.Greater(t, carried, ttl, "the leader carried the second group for longer than the lease")
		rec, err := store.Lookup(t.Context(), first.Target, first.Key)
		require.NoError(t, err)
		require.Equal(t, c.leases.lease.Owner, rec.LeaseOwner)
		require.True(t, rec.LeaseExpires.After(time.Now()), "the leader's lease expired while it carried the others' claims")
		store.mu.Lock()
		require.GreaterOrEqual(t, store.renewals[first], store.enough)
		store.mu.Unlock()

		// The deposits hold their leases, and end.
		for _, ref := range []dedup.Ref{first, second} {
			_, drop := c.leases.hold(t.Context(), ref)
			drop()
		}
		time.Sleep(ttl) // the renewer's next tick: it ends
	})
}

// frozenStore is a real store that can be frozen: then renewals and
// releases fail, and recording outcomes waits until outcomesFail is
// closed, then fails too.
type frozenStore struct {
	*dedup.SQLite
	frozen       atomic.Bool
	outcomesFail chan struct{}
	releases     atomic.Int64 // releases refused
}

var errFrozen = errors.New("the store does not answer")

func (s *frozenStore) Renew(ctx context.Context, lease dedup.Lease, refs []dedup.Ref) ([]dedup.Ref, error) {
	if s.frozen.Load() {
		return nil, errFrozen
	}
	return s.SQLite.Renew(ctx, lease, refs)
}

func (s *frozenStore) ConfirmMany(ctx context.Context, target string, items map[string]dedup.Confirmation) (map[string]string, error) {
	if s.frozen.Load() {
		<-s.outcomesFail
		return nil, errFrozen
	}
	return s.SQLite.ConfirmMany(ctx, target, items)
}

func (s *frozenStore) Release(ctx context.Context, owner string, ref dedup.Ref, unsent bool) error {
	if s.frozen.Load() {
		s.releases.Add(1)
		return errFrozen
	}
	return s.SQLite.Release(ctx, owner, ref, unsent)
}

// distinctItems returns an iterator of n distinct payloads.
func distinctItems(n int) func(func(Item) bool) {
	return func(yield func(Item) bool) {
		for i := range n {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"n":%d}`, i)}) {
				return
			}
		}
	}
}

// Leases given up while their deposits wait for their outcomes to be
// recorded (the store stopped answering: renewals fail for half the
// lease) are counted in the batch's LeasesLost, as many as the log says
// were given up, although those deposits end with the store's error and
// not with ErrLeaseLost.
func TestLeasesLostCountsEveryLeaseTheLogSaysWasGivenUp(t *testing.T) {
	srv := newGatedServer(t)
	store := &frozenStore{SQLite: openStore(t), outcomesFail: make(chan struct{})}
	log := &logLines{watch: "gave up", signal: make(chan struct{}, 1)}
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Retry: fastRetry,
		Lease: 400 * time.Millisecond, Logger: slog.New(log)})
	require.NoError(t, err)

	type ran struct {
		sum Summary
		err error
	}
	done := make(chan ran, 1)
	go func() {
		sum, err := c.Run(context.Background(), distinctItems(16), BatchOptions{Concurrency: 4})
		done <- ran{sum, err}
	}()
	for range 4 {
		<-srv.arrivals // four deposits hold their leases, their writes at the server
	}
	store.frozen.Store(true)
	close(srv.gate) // their outcomes wait for the store
	<-log.signal    // their leases are given up
	close(store.outcomesFail)
	r := <-done
	require.ErrorIs(t, r.err, ErrStopRun)

	given := leasesIn(t, log.matching("gave up"))
	require.GreaterOrEqual(t, given, 4, "the leases of the four deposits waiting for their outcomes were given up")
	require.Equal(t, given, r.sum.LeasesLost)
	require.Equal(t, int64(given), c.LeasesLost())
}

// A batch stopped by a store that refuses to release leases (closed under
// it here) says once, at its end, how many leases it left to expire and
// by when, instead of a line for each.
func TestLeasesLeftToExpireAreReportedInOneLine(t *testing.T) {
	srv := newGatedServer(t)
	sqlite := openStore(t)
	store := &releaseCounter{SQLite: sqlite}
	log := &logLines{}
	const ttl = 30 * time.Second
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Retry: fastRetry,
		Lease: ttl, Logger: slog.New(log)})
	require.NoError(t, err)

	done := make(chan error, 1)
	started := time.Now()
	go func() {
		_, err := c.Run(context.Background(), distinctItems(16), BatchOptions{Concurrency: 4})
		done <- err
	}()
	for range 4 {
		<-srv.arrivals
	}
	require.NoError(t, sqlite.Close())
	closedAt := time.Now()
	close(srv.gate)
	require.ErrorIs(t, <-done, ErrStopRun)

	refused := int(store.refused.Load())
	require.GreaterOrEqual(t, refused, 4, "the four deposits whose outcomes the closed store refused release their leases")
	require.Empty(t, log.matching("could not release"))
	report := log.matching("could not be released")
	require.Len(t, report, 1, "one line for every lease left to expire")
	require.Equal(t, refused, leasesIn(t, report))
	require.Len(t, log.expireBy, 1)
	by := log.expireBy[0]
	require.Contains(t, report[0], fmt.Sprintf("%d leases could not be released (store closed); they expire by %s", refused, by.Format(time.TimeOnly)))
	// They expire a lease after their last claim or renewal, all made
	// after the batch started and before the store was closed.
	require.False(t, by.After(closedAt.Add(ttl)), "%s is later than a lease after the store closed (%s)", by, closedAt)
	require.True(t, by.After(started.Add(ttl)), "%s is earlier than a lease after the batch started (%s)", by, started)
}

// releaseCounter counts the releases its store refused.
type releaseCounter struct {
	*dedup.SQLite
	refused atomic.Int64
}

func (s *releaseCounter) Release(ctx context.Context, owner string, ref dedup.Ref, unsent bool) error {
	err := s.SQLite.Release(ctx, owner, ref, unsent)
	if err != nil {
		s.refused.Add(1)
	}
	return err
}
