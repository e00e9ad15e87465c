package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/target/put"
)

// gatedServer is a PUT server that holds each write until its gate opens,
// and counts the writes it received while another was being handled. The
// time each write arrived is sent on arrivals (the first 64 of them).
type gatedServer struct {
	*httptest.Server
	gate     chan struct{}
	arrivals chan time.Time
	writes   atomic.Int64
	inFlight atomic.Int64
	overlaps atomic.Int64
}

func newGatedServer(t *testing.T) *gatedServer {
	g := &gatedServer{gate: make(chan struct{}), arrivals: make(chan time.Time, 64)}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body first: only then does the server notice a client
		// that hangs up.
		io.Copy(io.Discard, r.Body)
		select {
		case g.arrivals <- time.Now():
		default:
		}
		g.writes.Add(1)
		if g.inFlight.Add(1) > 1 {
			g.overlaps.Add(1)
		}
		defer g.inFlight.Add(-1)
		select {
		case <-g.gate:
			w.WriteHeader(http.StatusCreated)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(g.Close)
	return g
}

func newLeaseClient(t *testing.T, endpoint string, store Store, lease time.Duration) *Client {
	t.Helper()
	c, err := New(Config{Target: put.Target{Endpoint: endpoint}, Store: store, Retry: fastRetry, Lease: lease})
	require.NoError(t, err)
	return c
}

// lookWatch is a store that tells of each look-up the engine makes.
type lookWatch struct {
	*dedup.SQLite
	looked chan struct{}
}

func (s *lookWatch) Lookup(ctx context.Context, target, key string) (dedup.Record, error) {
	rec, err := s.SQLite.Lookup(ctx, target, key)
	s.looked <- struct{}{}
	return rec, err
}

// deposited is what a deposit run on another goroutine returns.
type deposited struct {
	res Result
	err error
}

// depositAsync runs c.Deposit of p on another goroutine; its result comes
// on the channel returned.
func depositAsync(c *Client, p []byte) <-chan deposited {
	done := make(chan deposited, 1)
	go func() {
		res, err := c.Deposit(context.Background(), p)
		done <- deposited{res, err}
	}()
	return done
}

// Two clients sharing a store, as two processes would, deposit one payload
// at once: the second does not send while the first holds the key's lease
// (it looks three times, and parks in between), and replays the first
// one's result once it is settled.
func TestALeasedKeyIsNotSentByAnotherProcess(t *testing.T) {
	srv := newGatedServer(t)
	store := openStore(t)
	first := newLeaseClient(t, srv.URL, store, time.Minute)
	watch := &lookWatch{SQLite: store, looked: make(chan struct{})}
	second := newLeaseClient(t, srv.URL, watch, time.Minute)

	firstDone := depositAsync(first, []byte(payload))
	<-srv.arrivals // the first holds the lease and its write is at the server
	secondDone := depositAsync(second, []byte(payload))
	for looks := 0; looks < 3; {
		select {
		case <-watch.looked:
			looks++
		case <-srv.arrivals:
			t.Fatalf("the second client sent a key leased by the first after %d look-ups", looks)
		}
	}
	close(srv.gate)
	go func() { // the second's look-ups after the gate opens
		for range watch.looked {
		}
	}()

	a, b := <-firstDone, <-secondDone
	close(watch.looked)
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	require.Equal(t, OutcomeCreated, a.res.Outcome)
	require.Equal(t, OutcomeReplayed, b.res.Outcome)
	require.Equal(t, a.res.Identifier, b.res.Identifier)
	require.Zero(t, b.res.Requests)
	require.False(t, b.res.Recovered, "the key was settled by a live process, not recovered")
	require.Zero(t, srv.overlaps.Load())
	require.Equal(t, int64(1), srv.writes.Load())
}

// A lease whose owner died (it stopped renewing) is taken over once it
// expires: the key is sent again and reported recovered.
func TestAnExpiredLeaseIsTakenOver(t *testing.T) {
	srv := newGatedServer(t)
	close(srv.gate)
	store := openStore(t)
	c := newLeaseClient(t, srv.URL, store, time.Minute)
	k, err := c.Key([]byte(payload))
	require.NoError(t, err)
	// The dead process: it claimed the key for 300 ms and never renewed.
	dead, err := store.Claim(context.Background(), c.StoreTarget(), k.Key, k.Body, dedup.Lease{Owner: "dead", TTL: 300 * time.Millisecond})
	require.NoError(t, err)

	res, err := c.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.True(t, res.Recovered)
	require.Equal(t, int64(1), srv.writes.Load())
	sent := <-srv.arrivals
	require.False(t, sent.Before(dead.LeaseExpires), "sent at %v, before the dead process's lease expired at %v", sent, dead.LeaseExpires)
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), k.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, rec.State)
	require.Equal(t, 2, rec.Attempts)
}

// lossyStore is a store whose renewals report every lease lost, or fail.
type lossyStore struct {
	*dedup.SQLite
	fail atomic.Bool // renewals fail instead of reporting losses
}

func (s *lossyStore) Renew(ctx context.Context, l dedup.Lease, refs []dedup.Ref) ([]dedup.Ref, error) {
	if s.fail.Load() {
		return nil, errors.New("connection to the store lost")
	}
	return refs, nil
}

// A deposit whose lease is lost (taken over after this process stalled, or
// no longer renewable) stops sending: it ends unresolved with ErrLeaseLost,
// and the loss is counted.
func TestALostLeaseStopsTheDeposit(t *testing.T) {
	for _, renewFails := range []bool{false, true} {
		name := "taken over"
		if renewFails {
			name = "store unreachable"
		}
		t.Run(name, func(t *testing.T) {
			srv := newGatedServer(t) // never opened: the write hangs
			store := &lossyStore{SQLite: openStore(t)}
			store.fail.Store(renewFails)
			c := newLeaseClient(t, srv.URL, store, 100*time.Millisecond)
			res, err := c.Deposit(context.Background(), []byte(payload))
			require.ErrorIs(t, err, ErrLeaseLost)
			require.ErrorIs(t, err, ErrUnresolved)
			require.Equal(t, int64(1), c.LeasesLost())
			rec, lerr := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
			require.NoError(t, lerr)
			require.Equal(t, dedup.StatePending, rec.State, "the request may have landed: the intent stays")
		})
	}
}

// An endpoint that refuses connections received nothing: the key is not
// left uncertain, so a later run does not report it recovered.
func TestARefusedConnectionLeavesNoIntent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: endpoint}, Store: store,
		Retry: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 2}})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(payload))
	require.ErrorIs(t, err, ErrUnresolved)
	_, lerr := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.ErrorIs(t, lerr, dedup.ErrNotFound)
}

// recovered means "an earlier run or another process may have sent it": a
// key this client itself left unresolved earlier is not recovered when it
// comes round again; a new client (the next run) finds it recovered.
func TestRecoveredMeansAnotherRunOrProcess(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	policy := backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 1}
	newClient := func() *Client {
		c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Retry: policy})
		require.NoError(t, err)
		return c
	}
	run := newClient()
	_, err := run.Deposit(context.Background(), []byte(payload))
	require.ErrorIs(t, err, ErrUnresolved)
	_, err = run.Deposit(context.Background(), []byte(payload))
	require.ErrorIs(t, err, ErrUnresolved)

	fail.Store(false)
	res, err := run.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err)
	require.False(t, res.Recovered, "this run itself left the key uncertain")

	// The same story across runs.
	fail.Store(true)
	other := []byte(`{"title":"another"}`)
	_, err = run.Deposit(context.Background(), other)
	require.ErrorIs(t, err, ErrUnresolved)
	fail.Store(false)
	res, err = newClient().Deposit(context.Background(), other)
	require.NoError(t, err)
	require.True(t, res.Recovered)
}

// Many goroutines in two clients on one store deposit the same payloads:
// the server never sees two writes of one key at once.
func TestClientsSharingAStoreNeverOverlapOnAKey(t *testing.T) {
	var mu sync.Mutex
	active := map[string]bool{}
	var overlaps, writes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writes.Add(1)
		mu.Lock()
		if active[r.URL.Path] {
			overlaps.Add(1)
		}
		active[r.URL.Path] = true
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		delete(active, r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	clients := []*Client{newLeaseClient(t, srv.URL, store, time.Minute), newLeaseClient(t, srv.URL, store, time.Minute)}
	const items = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*3*items)
	for _, c := range clients {
		for g := range 3 {
			wg.Go(func() {
				for i := range items {
					p := fmt.Appendf(nil, `{"n":%d}`, i)
					if _, err := c.Deposit(context.Background(), p); err != nil {
						errs <- fmt.Errorf("goroutine %d, item %d: %w", g, i, err)
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, overlaps.Load())
	require.Equal(t, int64(items), writes.Load(), "each key written once")
}

// blindStore is a store whose look-ups find nothing: what a deposit sees
// when another process begins the key between its look-up and its claim.
type blindStore struct{ *dedup.SQLite }

func (blindStore) Lookup(context.Context, string, string) (dedup.Record, error) {
	return dedup.Record{}, dedup.ErrNotFound
}

func (blindStore) LookupMany(context.Context, string, []string) (map[string]dedup.Record, error) {
	return map[string]dedup.Record{}, nil
}

// A key the look-up did not find but the claim found already attempted was
// begun by another process in between: its deposit is recovered, so that
// recovered never under-reports.
func TestAKeyBegunBetweenLookupAndClaimIsRecovered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: blindStore{store}})
	require.NoError(t, err)
	k, err := c.Key([]byte(payload))
	require.NoError(t, err)
	other := dedup.Lease{Owner: "another process", TTL: time.Minute}
	_, err = store.Claim(context.Background(), c.StoreTarget(), k.Key, k.Body, other)
	require.NoError(t, err)
	// Its lease has ended; the request it may have sent stays counted.
	require.NoError(t, store.Release(context.Background(), other.Owner, dedup.Ref{Target: c.StoreTarget(), Key: k.Key}, false))

	res, err := c.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err)
	require.True(t, res.Recovered)
}

// lookCounter is a store that counts the engine's look-ups (the
// look-ahead's LookupDone is not counted).
type lookCounter struct {
	*dedup.SQLite
	looks atomic.Int64
}

func (s *lookCounter) Lookup(ctx context.Context, target, key string) (dedup.Record, error) {
	s.looks.Add(1)
	return s.SQLite.Lookup(ctx, target, key)
}

func (s *lookCounter) LookupMany(ctx context.Context, target string, keys []string) (map[string]dedup.Record, error) {
	s.looks.Add(1)
	return s.SQLite.LookupMany(ctx, target, keys)
}

// In a batch, a deposit of one step claims its key without looking it up
// first, and the claim's prior owner decides whether a pending key counts
// as recovered: one another process left pending does, one this client
// left pending does not, and neither does a new one.
func TestABatchClaimsWithoutALookUpAndCountsOnlyOthersKeysRecovered(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	store := &lookCounter{SQLite: openStore(t)}
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	ctx := context.Background()
	payloads := []string{`{"title":"theirs"}`, `{"title":"ours"}`, `{"title":"new"}`}
	keys := make([]string, len(payloads))
	for i, p := range payloads {
		keys[i] = c.mustKey(t, p).Key
	}
	ref := func(i int) dedup.Ref { return dedup.Ref{Target: c.StoreTarget(), Key: keys[i]} }
	_, err = store.Claim(ctx, ref(0).Target, ref(0).Key, nil, dedup.Lease{Owner: "another process", TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, store.Release(ctx, "another process", ref(0), false))
	_, err = store.Claim(ctx, ref(1).Target, ref(1).Key, nil, c.leases.lease)
	require.NoError(t, err)
	require.NoError(t, store.Release(ctx, c.leases.lease.Owner, ref(1), false))

	recovered := map[string]bool{}
	var errs []error
	sum, err := c.Run(ctx, func(yield func(Item) bool) {
		for i, p := range payloads {
			if !yield(Item{Line: int64(i + 1), Payload: []byte(p)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: 2, OnResult: func(r ItemResult) {
		errs = append(errs, r.Err)
		recovered[r.Key] = r.Recovered
	}})
	require.NoError(t, err)
	require.NoError(t, errors.Join(errs...))
	require.Equal(t, 3, sum.Created)
	require.Equal(t, map[string]bool{keys[0]: true, keys[1]: false, keys[2]: false}, recovered)
	require.Zero(t, store.looks.Load(), "the engine looked keys up before claiming them")
}

// parkWatch is a log handler that ends a batch the moment a deposit is
// parked, which the test then reports.
type parkWatch struct {
	stop   context.CancelFunc
	parked atomic.Bool
}

func (h *parkWatch) Enabled(context.Context, slog.Level) bool { return true }
func (h *parkWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "parked" {
		h.parked.Store(true)
		h.stop()
	}
	return nil
}
func (h *parkWatch) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *parkWatch) WithGroup(string) slog.Handler      { return h }

// A key another process settled, whose row still carries that process's
// live lease, is answered at once in a batch: done is replayed, failed is
// the recorded failure. Nothing is sent and nothing waits for the lease.
func TestAKeySettledElsewhereIsAnsweredWithoutWaitingForItsLease(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := &parkWatch{stop: cancel}
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Logger: slog.New(watch)})
	require.NoError(t, err)
	other := dedup.Lease{Owner: "another process", TTL: time.Hour}
	done, failed := c.mustKey(t, `{"n":"done"}`), c.mustKey(t, `{"n":"failed"}`)
	for _, k := range []canonical.Keyed{done, failed} {
		_, err := store.Claim(ctx, c.StoreTarget(), k.Key, nil, other)
		require.NoError(t, err)
	}
	_, err = store.Complete(ctx, c.StoreTarget(), done.Key, dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "id-done", Status: 201})
	require.NoError(t, err)
	_, err = store.Fail(ctx, c.StoreTarget(), failed.Key, dedup.Failure{Status: 422, Problem: "refused"})
	require.NoError(t, err)

	got := map[string]ItemResult{}
	_, err = c.Run(ctx, func(yield func(Item) bool) {
		yield(Item{Line: 1, Payload: []byte(`{"n":"done"}`)})
		yield(Item{Line: 2, Payload: []byte(`{"n":"failed"}`)})
	}, BatchOptions{Concurrency: 2, OnResult: func(r ItemResult) { got[r.Key] = r }})
	require.False(t, watch.parked.Load(), "a settled key waited for another process's lease")
	require.NoError(t, err)
	require.Equal(t, OutcomeReplayed, got[done.Key].Outcome)
	require.Equal(t, "id-done", got[done.Key].Identifier)
	require.Equal(t, OutcomeFailed, got[failed.Key].Outcome)
	require.Equal(t, 422, got[failed.Key].Status)
}
