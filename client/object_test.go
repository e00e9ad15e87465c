package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
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

// replaceBehind replaces the record at url with body, on its current
// ETag, as another tool would, behind the store's back.
func replaceBehind(t *testing.T, url string, body []byte) {
	t.Helper()
	get, err := http.Get(url)
	require.NoError(t, err)
	get.Body.Close()
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("If-Match", get.Header.Get("ETag"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// serveThenDrop lets h handle r, then closes the connection before any
// answer: a write that took effect and whose answer was lost.
func serveThenDrop(h http.Handler, w http.ResponseWriter, r *http.Request) {
	h.ServeHTTP(httptest.NewRecorder(), r)
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
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
	replaceBehind(t, srv.URL+"/"+res.Object, []byte(`{"id":"shared","by":"them"}`))

	_, err := c.Deposit(context.Background(), []byte(`{"id":"shared","by":"us, corrected"}`))
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
			serveThenDrop(h, w, r)
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

// A run killed after its update took effect, and before it recorded it,
// leaves the update pending; a later run with a newer version reads the
// record first, so the killed run's version stays known and the newer one
// is applied on its tag.
func TestAKilledUpdateIsSettledBeforeTheNextOne(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	c := objectClient(t, srv.URL, store, Config{})
	v1, v2, v3 := `{"id":"k","n":1}`, `{"id":"k","n":2}`, `{"id":"k","n":3}`
	first := deposit(t, c, v1)
	k2, err := c.Key([]byte(v2))
	require.NoError(t, err)

	// The killed run: its intent recorded, its PUT applied, nothing more.
	_, err = store.BeginUpdate(context.Background(), c.StoreTarget(), first.Object, k2.Key, "")
	require.NoError(t, err)
	replaceBehind(t, srv.URL+"/"+first.Object, k2.Body)

	require.Equal(t, OutcomeUpdated, deposit(t, c, v3).Outcome)
	require.JSONEq(t, v3, recordBody(t, h))
	require.Equal(t, int64(2), h.Stats().Updates, "the killed run's and this one's")
	v, err := store.LookupVersion(context.Background(), c.StoreTarget(), first.Object, k2.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, v.State, "the killed run's version is known")
	require.Equal(t, OutcomeStale, deposit(t, c, v2).Outcome)
}

// keptLeases is a store whose releases of object leases do nothing, as
// for a process killed after it recorded an object's version and before
// it let go of the object's lease.
type keptLeases struct{ *dedup.SQLite }

func (s keptLeases) Release(ctx context.Context, owner string, ref dedup.Ref, unsent bool) error {
	if strings.HasPrefix(ref.Target, "put-object ") {
		return nil
	}
	return s.SQLite.Release(ctx, owner, ref, unsent)
}

// The lease a dead process left on an object whose version it recorded
// is let go by the next batch, although the store answers the object
// without its lease; a lease another process holds is left alone.
func TestABatchLetsGoOfTheObjectLeasesDeadProcessesLeft(t *testing.T) {
	_, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	killed := objectClient(t, srv.URL, keptLeases{store}, Config{Lease: 10 * time.Millisecond})
	line := `{"id":"kept","v":1}`
	require.Equal(t, OutcomeCreated, deposit(t, killed, line).Outcome)
	leaseTarget := "put-object " + srv.URL
	rows := pendingRows(t, store, leaseTarget)
	require.Len(t, rows, 1, "the dead process's lease on the object")
	time.Sleep(time.Until(rows[0].LeaseExpires) + time.Millisecond) // nobody renews it: it expires
	live := dedup.Lease{Owner: "live-elsewhere", TTL: time.Hour}
	_, err := store.Claim(context.Background(), leaseTarget, "held", nil, live)
	require.NoError(t, err)

	c := objectClient(t, srv.URL, store, Config{})
	sum, err := c.Run(context.Background(), items([][]byte{[]byte(line)}), BatchOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, sum.Replayed)
	rows = pendingRows(t, store, leaseTarget)
	require.Len(t, rows, 1, "only the live lease is left")
	require.Equal(t, "held", rows[0].Key)
	require.Equal(t, live.Owner, rows[0].LeaseOwner)
}

// pendingRows are the pending rows of target.
func pendingRows(t *testing.T, store *dedup.SQLite, target string) []dedup.Record {
	t.Helper()
	var out []dedup.Record
	for rec, err := range store.List(context.Background(), target, dedup.StatePending) {
		require.NoError(t, err)
		out = append(out, rec)
	}
	return out
}

// serialPut is put's driver whose deposits all share one serial name, as
// InvenioRDM's new versions of one record do.
type serialPut struct{ driver.Driver }

func (s serialPut) SerialTarget() string          { return driver.StepTarget(s.Name(), "serial") }
func (s serialPut) Serial(canonical.Keyed) string { return "one" }

type serialTarget struct{ put.Target }

func (t serialTarget) Driver() (driver.Driver, error) {
	d, err := t.Target.Driver()
	return serialPut{d}, err
}

// A serial name's row that a killed process left (its deposit finished,
// its lease not let go) is let go by the next batch too, and a live one is
// kept: no later deposit of a finished key takes the serial name again.
func TestABatchLetsGoOfTheSerialLeasesDeadProcessesLeft(t *testing.T) {
	_, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	c, err := New(Config{Target: serialTarget{put.Target{Endpoint: srv.URL}}, Store: store, Retry: fastRetry})
	require.NoError(t, err)
	serial := c.target.(driver.Serializer).SerialTarget()
	ctx := context.Background()
	_, err = store.Claim(ctx, serial, "left", nil, dedup.Lease{Owner: "killed", TTL: time.Millisecond})
	require.NoError(t, err)
	_, err = store.Claim(ctx, serial, "held", nil, dedup.Lease{Owner: "live-elsewhere", TTL: time.Hour})
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond) // the killed one's lease expires

	sum, err := c.Run(ctx, items([][]byte{[]byte(`{"a":1}`), []byte(`{"a":2}`)}), BatchOptions{})
	require.NoError(t, err)
	require.Equal(t, 2, sum.Created)
	rows := pendingRows(t, store, serial)
	require.Len(t, rows, 1, "only the live lease is left")
	require.Equal(t, "held", rows[0].Key)
}

// readFirstPut is put's driver as a server that checks no precondition
// would be driven: every update is sent with If-Match: * (which the
// reference server takes as "any version"), after a read whose version
// the record's marker names: here the key of its payload.
type readFirstPut struct{ driver.Updater }

func (readFirstPut) ReadsBeforeUpdate() bool { return true }

func (p readFirstPut) Update(k canonical.Keyed, _ string) (driver.Request, error) {
	return p.Updater.Update(k, "*")
}

func (p readFirstPut) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	state, f := p.Updater.JudgeRead(a)
	if f.Kind == driver.Present {
		body, err := canonical.JCS(state.Body)
		if err != nil {
			return state, driver.Finding{Kind: driver.Foreign, Problem: err.Error()}
		}
		state.Version, state.Body = canonical.Key(body), []byte(`{"rendered":"by the server"}`)
	}
	return state, f
}

type readFirstTarget struct{ put.Target }

func (t readFirstTarget) Driver() (driver.Driver, error) {
	d, err := t.Target.Driver()
	if err != nil {
		return nil, err
	}
	return struct {
		driver.Driver
		readFirstPut
	}{d, readFirstPut{d.(driver.Updater)}}, nil
}

// Where the server checks no precondition, the record is read before each
// update: its version marker must be the one the store applied, else the
// update is another writer's change and is not sent.
func TestAServerWithoutAPreconditionIsReadBeforeEachUpdate(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	c, err := New(Config{Target: readFirstTarget{put.Target{Endpoint: srv.URL}}, Store: openStore(t), Retry: fastRetry, Identity: []string{"/id"}})
	require.NoError(t, err)
	first := deposit(t, c, `{"id":"r","n":1}`)
	upd := deposit(t, c, `{"id":"r","n":2}`)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, 2, upd.Requests, "a read, then the update")
	require.JSONEq(t, `{"id":"r","n":2}`, recordBody(t, h))

	// Another writer: the server would take anything, the read refuses it.
	req, err := http.NewRequest(http.MethodPut, srv.URL+"/"+first.Object, strings.NewReader(`{"id":"r","n":"theirs"}`))
	require.NoError(t, err)
	req.Header.Set("If-Match", "*")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	_, err = c.Deposit(context.Background(), []byte(`{"id":"r","n":3}`))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "changed elsewhere")
	require.JSONEq(t, `{"id":"r","n":"theirs"}`, recordBody(t, h))
}

// An update sent on no condition whose answer is lost is not sent again
// as it is: the read that follows finds this content, and the update is
// settled as applied, once.
func TestAnAmbiguousUpdateWithoutAPreconditionIsReadNotResent(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	dropped := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-Match") == "*" && !dropped {
			dropped = true
			serveThenDrop(h, w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{Target: readFirstTarget{put.Target{Endpoint: srv.URL}}, Store: openStore(t), Retry: fastRetry, Identity: []string{"/id"}})
	require.NoError(t, err)
	deposit(t, c, `{"id":"r","n":1}`)
	upd := deposit(t, c, `{"id":"r","n":2}`)
	require.True(t, dropped)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, 3, upd.Requests, "a read, the update whose answer was lost, the read that settles it")
	require.Equal(t, int64(1), h.Stats().Updates, "applied once, never sent again")
	require.JSONEq(t, `{"id":"r","n":2}`, recordBody(t, h))
}
