package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

// errCrashed is what a crashedStore answers once it has crashed.
var errCrashed = errors.New("store crashed")

// crashedStore is the real store that crashes right after the commit of a
// confirmation of a target whose name starts with after: that commit is
// durable, and nothing is written after it, as when the process is killed
// between two commits.
type crashedStore struct {
	*dedup.SQLite
	after   string
	crashed atomic.Bool
}

func (s *crashedStore) Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error) {
	if s.crashed.Load() {
		return dedup.Record{}, errCrashed
	}
	return s.SQLite.Begin(ctx, target, key, body)
}

func (s *crashedStore) Complete(ctx context.Context, target, key string, c dedup.Confirmation) (dedup.Record, error) {
	if s.crashed.Load() {
		return dedup.Record{}, errCrashed
	}
	rec, err := s.SQLite.Complete(ctx, target, key, c)
	if err == nil && strings.HasPrefix(target, s.after) {
		s.crashed.Store(true)
		return dedup.Record{}, errCrashed
	}
	return rec, err
}

// refreshIndex makes every write the stub holds searchable, as InvenioRDM
// does when a draft is deleted: it creates a draft and deletes it.
func refreshIndex(t *testing.T, s *repotest.InvenioServer) {
	t.Helper()
	do := func(method, url, body string) (*http.Response, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+invenioTestToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := s.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	before := len(s.Records())
	// The create may meet a drop fault, which commits it all the same.
	_, _ = do(http.MethodPost, s.API+"/records", `{"metadata":{"title":"to delete"}}`)
	recs := s.Records()
	require.Len(t, recs, before+1)
	var id string
	for _, r := range recs {
		if len(r.Identifiers) == 0 && !r.Published {
			id = r.ID
		}
	}
	require.NotEmpty(t, id)
	resp, err := do(http.MethodDelete, s.API+"/records/"+id+"/draft", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// A draft created after its search found nothing (the index lagged past
// the settle time) is noted for a later search before its confirmation is
// committed: a process killed between the two commits still leaves the
// note, and the next run reports the duplicate the index hid.
func TestInvenioRecheckNoteIsDurableBeforeTheConfirmation(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop", IndexLag: time.Hour})
	store := openStore(t)
	tgt := invenio.Target{SettleTime: time.Millisecond}
	crashing := &crashedStore{SQLite: store, after: invenioStoreTarget(s.API, "-draft")}
	c := invenioClient(t, s, crashing, tgt, fastRetry)
	ctx := context.Background()

	_, err := c.Deposit(ctx, invenioRecord(5))
	require.ErrorIs(t, err, errCrashed)
	require.True(t, crashing.crashed.Load(), "the run reached the crash point")
	require.Equal(t, int64(2), s.Stats().Drafts, "the dropped create and the one after the miss")

	key, err := c.Key(invenioRecord(5))
	require.NoError(t, err)
	draft, err := store.Lookup(ctx, invenioStoreTarget(s.API, "-draft"), key.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, draft.State, "the confirmation was committed")
	note, err := store.Lookup(ctx, invenioStoreTarget(s.API, protocol.RecheckSuffix), key.Key)
	require.NoError(t, err, "the note to search again is in the store")
	require.Equal(t, dedup.StatePending, note.State)

	refreshIndex(t, s)
	_, err = invenioClient(t, s, store, tgt, fastRetry).Deposit(ctx, invenioRecord(5))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "2 records carry the marker")
}

// largeRecord is a payload of realistic size: a description of about
// 1,000 characters, so that a page of 100 search hits is over 100 KiB.
func largeRecord(i int) []byte {
	desc := strings.Repeat(fmt.Sprintf("Sea surface temperature, series %d, sampled hourly. ", i), 20)
	return fmt.Appendf(nil, `{"metadata":{"title":"Series %d","description":%q,"creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-11-30","resource_type":{"id":"dataset"}},"access":{"record":"public","files":"public"}}`, i, desc)
}

func largeRecords(n int) []Item {
	its := make([]Item, n)
	for i := range its {
		its[i] = Item{Line: int64(i + 1), Payload: largeRecord(i)}
	}
	return its
}

// recoveryBatches are two batches for one store: records, and datasets.
func recoveryBatches(t *testing.T, records int) (recs, sets []Item) {
	dir := t.TempDir()
	sets, _ = invenioDatasets(t, dir, 3, 2)
	return largeRecords(records), sets
}

// runBatch runs its on c and returns the summary, every item settled.
func runBatch(t *testing.T, c *Client, its []Item, opts BatchOptions) Summary {
	t.Helper()
	opts.Concurrency = 4
	opts.OnResult = func(r ItemResult) { require.NoError(t, r.Err, "line %d", r.Line) }
	sum, err := c.Run(context.Background(), seqOf(its), opts)
	require.NoError(t, err)
	require.Zero(t, sum.Unresolved+sum.Failed+sum.Invalid)
	return sum
}

// One store, two batches (records, then datasets); the store is lost and
// both batches run again, in either order, whole or sharded: nothing new is
// created, every item is replayed, and the server was scanned once, its
// pages (100 hits of over 100 KiB) read whole.
func TestInvenioLostStoreRecoversEveryBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards int
	}{{"whole", 1}, {"sharded", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 5 * time.Millisecond})
			recs, sets := recoveryBatches(t, 150)
			first := openStore(t)
			runBatch(t, invenioClient(t, s, first, invenio.Target{}, fastRetry), recs, BatchOptions{})
			runBatch(t, invenioClient(t, s, first, invenio.Target{}, fastRetry), sets, BatchOptions{})
			before := s.Stats()
			require.Equal(t, int64(153), before.Published)

			lost := openStore(t)
			for _, batch := range [][]Item{sets, recs} {
				for i := range tc.shards {
					opts := BatchOptions{}
					if tc.shards > 1 {
						opts.Shard = Shard{Index: i, Count: tc.shards}
					}
					sum := runBatch(t, invenioClient(t, s, lost, invenio.Target{}, fastRetry), batch, opts)
					require.Equal(t, sum.Total, sum.Replayed)
				}
			}
			after := s.Stats()
			require.Equal(t, before.Drafts, after.Drafts, "no new draft")
			require.Equal(t, before.Published, after.Published, "no new record")
			require.Equal(t, before.Uploads, after.Uploads)
			require.Equal(t, int64(2), after.Searches-before.Searches, "one scan of two pages, no per-key search")
		})
	}
}

// crashingScanStore is the real store whose FinishScan fails without
// writing anything: a scan killed before it is kept.
type crashingScanStore struct {
	*dedup.SQLite
	reached atomic.Bool
}

func (s *crashingScanStore) FinishScan(context.Context, string, []dedup.Found) error {
	s.reached.Store(true)
	return errCrashed
}

// A recovery run cut short during its scan keeps nothing of it: the next
// run scans again, and creates nothing.
func TestInvenioScanCutShortKeepsNothing(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 5 * time.Millisecond})
	recs := largeRecords(120)
	runBatch(t, invenioClient(t, s, openStore(t), invenio.Target{}, fastRetry), recs, BatchOptions{})
	before := s.Stats()

	lost := openStore(t)
	crash := &crashingScanStore{SQLite: lost}
	sum, err := invenioClient(t, s, crash, invenio.Target{}, fastRetry).Run(context.Background(), seqOf(recs), BatchOptions{Concurrency: 4})
	require.ErrorIs(t, err, errCrashed)
	require.True(t, crash.reached.Load())
	require.Zero(t, sum.Created+sum.Replayed)
	require.Equal(t, before.Drafts, s.Stats().Drafts)

	scanned, err := lost.ClaimScan(context.Background(), invenioStoreTarget(s.API, "-scan"), dedup.Lease{Owner: "test", TTL: time.Minute})
	require.NoError(t, err, "the killed scan's lease was released")
	require.False(t, scanned, "nothing of the scan was kept")
	require.NoError(t, lost.ReleaseScan(context.Background(), invenioStoreTarget(s.API, "-scan"), "test"))

	sum = runBatch(t, invenioClient(t, s, lost, invenio.Target{}, fastRetry), recs, BatchOptions{})
	require.Equal(t, len(recs), sum.Replayed)
	after := s.Stats()
	require.Equal(t, before.Drafts, after.Drafts, "no new draft")
	require.Equal(t, int64(4), after.Searches-before.Searches, "the scan of two pages, twice")
}

// Two clients on one lost store (two handles on its file, as two
// processes) recover at once: one scans, the other waits for its mark, and
// nothing is created.
func TestInvenioTwoClientsRecoverOneStoreAtOnce(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 5 * time.Millisecond})
	recs, sets := recoveryBatches(t, 150)
	first := openStore(t)
	runBatch(t, invenioClient(t, s, first, invenio.Target{}, fastRetry), recs, BatchOptions{})
	runBatch(t, invenioClient(t, s, first, invenio.Target{}, fastRetry), sets, BatchOptions{})
	before := s.Stats()

	path := t.TempDir() + "/lost.db"
	a := invenioClient(t, s, openStoreAt(t, path), invenio.Target{}, fastRetry)
	b := invenioClient(t, s, openStoreAt(t, path), invenio.Target{}, fastRetry)
	sums := make(chan Summary, 2)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for c, batch := range map[*Client][]Item{a: recs, b: sets} {
		wg.Go(func() {
			sum, err := c.Run(context.Background(), seqOf(batch), BatchOptions{Concurrency: 4})
			sums <- sum
			errs <- err
		})
	}
	wg.Wait()
	close(sums)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for sum := range sums {
		require.Equal(t, sum.Total, sum.Replayed, "%+v", sum)
	}
	after := s.Stats()
	require.Equal(t, before.Drafts, after.Drafts, "no new draft")
	require.Equal(t, before.Published, after.Published)
	require.Equal(t, int64(2), after.Searches-before.Searches, "one scan for both")
}

// An account past the search's 10,000-hit window stops the run before
// anything is created, saying why. The server is a fake that answers every
// search with a page whose total is 10,001 (the stub would need 10,001
// records) and counts the creates it is sent.
func TestInvenioScanPastTheSearchWindowStopsTheRun(t *testing.T) {
	var creates atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			creates.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"hits":{"hits":[{"id":"x1","is_published":true,"metadata":{"identifiers":[]}}],"total":10001}}`)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Target: invenio.Target{Endpoint: srv.URL + "/api", SettleTime: time.Nanosecond, SearchRate: -1}, Store: openStore(t), Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), invenioRecord(1))
	require.ErrorIs(t, err, ErrStopRun)
	require.ErrorIs(t, err, errScanWindow)
	require.ErrorContains(t, err, "10001 records")
	require.Zero(t, creates.Load())
}

// An answer read for more than its class (the create's, which names the
// draft) larger than the limit is refused and stops the run; the draft's
// intent stays pending, for the next run's search.
func TestInvenioAnswerOverTheLimitStopsTheRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"abc","pad":"%s"}`, strings.Repeat("x", maxFullAnswerBytes))
			return
		}
		fmt.Fprint(w, `{"hits":{"hits":[],"total":0}}`)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c, err := New(Config{Target: invenio.Target{Endpoint: srv.URL + "/api", SettleTime: time.Nanosecond, SearchRate: -1}, Store: store, Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), invenioRecord(1))
	require.ErrorIs(t, err, ErrStopRun)
	require.ErrorIs(t, err, errAnswerTooLarge)
	require.Empty(t, res.Identifier)
	key, err := c.Key(invenioRecord(1))
	require.NoError(t, err)
	rec, err := store.Lookup(context.Background(), invenioStoreTarget(srv.URL+"/api", "-draft"), key.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)
}
