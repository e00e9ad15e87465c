package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// objectServer is the reference server on loopback under put.
func objectServer(t *testing.T, cfg repotest.Config) (*repotest.Handler, *httptest.Server) {
	t.Helper()
	h, err := repotest.NewHandler(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv
}

func objectClient(t *testing.T, endpoint string, store Store, cfg Config) *Client {
	t.Helper()
	cfg.Target, cfg.Store, cfg.Retry = put.Target{Endpoint: endpoint}, store, fastRetry
	if cfg.Identity == nil {
		cfg.Identity = []string{"/id"}
	}
	c, err := New(cfg)
	require.NoError(t, err)
	return c
}

func deposit(t *testing.T, c *Client, payload string) Result {
	t.Helper()
	res, err := c.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err, payload)
	return res
}

// recordBody is the body the server holds for the one record it has.
func recordBody(t *testing.T, h *repotest.Handler) string {
	t.Helper()
	recs := h.Records()
	require.Len(t, recs, 1, "one record per object")
	return string(recs[0].Body)
}

func TestAnObjectKeepsOneRecordAndEachChangeIsAppliedOnce(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	c := objectClient(t, srv.URL, openStore(t), Config{})
	v1, v2 := `{"id":"obj-1","title":"first"}`, `{"id":"obj-1","title":"corrected"}`

	first := deposit(t, c, v1)
	require.Equal(t, OutcomeCreated, first.Outcome)
	require.NotEmpty(t, first.Object)
	require.NotEqual(t, first.Object, first.Key, "the object key names the record, the content key the version")

	again := deposit(t, c, v1)
	require.Equal(t, OutcomeReplayed, again.Outcome)
	require.Zero(t, again.Requests, "the version held is answered from the store")

	upd := deposit(t, c, v2)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, first.Identifier, upd.Identifier, "the same record, the same identifier")
	require.Equal(t, 1, upd.Requests, "one conditional PUT on the ETag the store recorded")
	require.JSONEq(t, v2, recordBody(t, h))

	old := deposit(t, c, v1)
	require.Equal(t, OutcomeStale, old.Outcome, "an old version is never rolled back")
	require.Zero(t, old.Requests)
	require.Equal(t, upd.Key, old.Current, "the line says which version is current")
	require.False(t, old.CurrentSince.IsZero())

	require.Equal(t, OutcomeReplayed, deposit(t, c, v2).Outcome)
	st := h.Stats()
	require.Equal(t, int64(1), st.Creates)
	require.Equal(t, int64(1), st.Updates)
	require.JSONEq(t, v2, recordBody(t, h))
}

func TestAllowRevertMakesAnOldVersionAnUpdate(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	c := objectClient(t, srv.URL, store, Config{})
	v1, v2 := `{"id":7,"v":1}`, `{"id":7,"v":2}`
	deposit(t, c, v1)
	deposit(t, c, v2)
	r := objectClient(t, srv.URL, store, Config{AllowRevert: true})
	require.Equal(t, OutcomeUpdated, deposit(t, r, v1).Outcome)
	require.JSONEq(t, v1, recordBody(t, h))
	require.Equal(t, int64(2), h.Stats().Updates)
}

func TestALostStoreReadsTheRecordBackAndGoesOn(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	v1, v2, v3 := `{"id":"a","n":1}`, `{"id":"a","n":2}`, `{"id":"a","n":3}`
	c := objectClient(t, srv.URL, openStore(t), Config{})
	deposit(t, c, v1)
	deposit(t, c, v2)

	// A new store: the same version is found, nothing written.
	lost := objectClient(t, srv.URL, openStore(t), Config{})
	same := deposit(t, lost, v2)
	require.Equal(t, OutcomeExisting, same.Outcome)
	require.Equal(t, int64(1), h.Stats().Creates)
	require.Equal(t, int64(1), h.Stats().Updates, "no write for the version the server holds")

	// Another new store and a newer version: one update, no second record.
	lost = objectClient(t, srv.URL, openStore(t), Config{})
	require.Equal(t, OutcomeUpdated, deposit(t, lost, v3).Outcome)
	require.JSONEq(t, v3, recordBody(t, h))
	require.Equal(t, int64(2), h.Stats().Updates)
}

func TestAVersionPointerMakesAnUnseenOlderVersionStale(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	c := objectClient(t, srv.URL, openStore(t), Config{VersionPointer: "/modified"})
	newer := `{"id":"x","modified":"2026-11-02T10:00:00Z","t":"b"}`
	older := `{"id":"x","modified":"2026-11-01T10:00:00+02:00","t":"a"}`
	deposit(t, c, newer)
	res := deposit(t, c, older)
	require.Equal(t, OutcomeStale, res.Outcome, "an older version is stale although never seen")
	require.JSONEq(t, newer, recordBody(t, h))

	// After a lost store, the version pointer of the record read back
	// orders them too.
	lost := objectClient(t, srv.URL, openStore(t), Config{VersionPointer: "/modified"})
	require.Equal(t, OutcomeStale, deposit(t, lost, older).Outcome)
	require.Equal(t, int64(0), h.Stats().Updates)
	require.JSONEq(t, newer, recordBody(t, h))
}

func TestAnUpdateDoesNotOverwriteAnotherWritersChange(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	c := objectClient(t, srv.URL, openStore(t), Config{})
	v1 := `{"id":"shared","by":"us"}`
	res := deposit(t, c, v1)

	// Another tool replaces the record behind the store's back.
	get, err := http.Get(srv.URL + "/" + res.Object)
	require.NoError(t, err)
	get.Body.Close()
	req, err := http.NewRequest(http.MethodPut, srv.URL+"/"+res.Object, bytes.NewReader([]byte(`{"id":"shared","by":"them"}`)))
	require.NoError(t, err)
	req.Header.Set("If-Match", get.Header.Get("ETag"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	_, err = c.Deposit(context.Background(), []byte(`{"id":"shared","by":"us, corrected"}`))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "changed elsewhere")
	require.JSONEq(t, `{"id":"shared","by":"them"}`, recordBody(t, h), "their change stands")
	require.Equal(t, int64(1), h.Stats().Updates, "theirs only")
}

func TestAnAmbiguousUpdateIsAppliedOnce(t *testing.T) {
	// Every update's first answer is lost after the server committed it.
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	dropped := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-Match") != "" && !dropped[r.URL.Path] {
			dropped[r.URL.Path] = true
			h.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := objectClient(t, srv.URL, openStore(t), Config{})
	deposit(t, c, `{"id":1,"v":"a"}`)
	res := deposit(t, c, `{"id":1,"v":"b"}`)
	require.Equal(t, OutcomeUpdated, res.Outcome, "the 412 of the retry reads the record, which holds this version")
	require.Equal(t, int64(1), h.Stats().Updates)
	require.Equal(t, int64(1), h.Stats().Mismatches)
}

func TestABatchAppliesAnObjectsLinesInInputOrder(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	c := objectClient(t, srv.URL, openStore(t), Config{})
	var items []Item
	const objects, versions = 20, 5
	for v := 1; v <= versions; v++ {
		for o := 1; o <= objects; o++ {
			items = append(items, Item{Line: int64(len(items) + 1), Payload: []byte(fmt.Sprintf(`{"id":%d,"v":%d}`, o, v))})
		}
	}
	// The first version again at the end: stale.
	for o := 1; o <= objects; o++ {
		items = append(items, Item{Line: int64(len(items) + 1), Payload: []byte(fmt.Sprintf(`{"id":%d,"v":1}`, o))})
	}
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for _, it := range items {
			if !yield(it) {
				return
			}
		}
	}, BatchOptions{Concurrency: 8})
	require.NoError(t, err)
	require.Equal(t, objects, sum.Created)
	require.Equal(t, objects*(versions-1), sum.Updated)
	require.Equal(t, objects, sum.Stale)
	st := h.Stats()
	require.Equal(t, int64(objects), st.Records)
	require.Equal(t, int64(objects*(versions-1)), st.Updates)
	for _, r := range h.Records() {
		require.Contains(t, string(r.Body), fmt.Sprintf(`"v":%d`, versions), "each object holds its last version")
	}
}

// A process killed after it recorded an object's version and before it
// let go of the object's lease leaves the lease's row pending, and the
// object's later lines, answered from the store, never take the lease to
// remove it: a run removes such rows as it starts. A lapsed lease's row
// is taken over and let go; a live owner's is left alone.
func TestARunRemovesTheObjectLeasesOfDeadProcesses(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	c := objectClient(t, srv.URL, store, Config{})
	ctx := context.Background()
	a, b := `{"id":"a","n":1}`, `{"id":"b","n":1}`
	ra, rb := deposit(t, c, a), deposit(t, c, b)
	target := objectLeaseTarget(c.target.Name())
	_, err := store.Claim(ctx, target, ra.Object, nil, dedup.Lease{Owner: "killed", TTL: time.Microsecond})
	require.NoError(t, err)
	_, err = store.Claim(ctx, target, rb.Object, nil, dedup.Lease{Owner: "alive", TTL: time.Hour})
	require.NoError(t, err)

	sum, err := c.Run(ctx, func(yield func(Item) bool) {
		_ = yield(Item{Line: 1, Payload: []byte(a)}) && yield(Item{Line: 2, Payload: []byte(b)})
	}, BatchOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, sum.Replayed)
	require.Zero(t, sum.Requests)
	var left []string
	for rec, err := range store.List(ctx, target, "") {
		require.NoError(t, err)
		left = append(left, rec.Key+" "+string(rec.State)+" "+rec.LeaseOwner)
	}
	require.Equal(t, []string{rb.Object + " pending alive"}, left, "the dead process's row removed, the live one's kept")
	require.Equal(t, int64(2), h.Stats().Creates)
}

func TestAPayloadWithoutItsIdentityIsInvalid(t *testing.T) {
	_, srv := objectServer(t, repotest.Config{})
	c := objectClient(t, srv.URL, openStore(t), Config{})
	_, err := c.Deposit(context.Background(), []byte(`{"title":"no id"}`))
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "identity /id: names no string or integer")
}

func TestAnotherIdentityIsAnotherKeySetting(t *testing.T) {
	_, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	objectClient(t, srv.URL, store, Config{})
	_, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Identity: []string{"/doi"}})
	require.ErrorIs(t, err, ErrSettingsMismatch)
	_, err = New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	require.ErrorIs(t, err, ErrSettingsMismatch, "a store of objects refuses payloads without an identity, as another --ignore")
}

func TestATargetThatCannotUpdateTakesNoIdentity(t *testing.T) {
	st, err := dedup.Open(t.TempDir() + "/d.db")
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	_, err = New(Config{Target: targetFor("idempotency-key", "http://127.0.0.1:1"), Store: st, Identity: []string{"/id"}})
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "takes no identity")
}
