package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// stagedPut drives the reference server as a target whose update takes
// two steps, as an edit draft and its publication do: the new version is
// first staged as a record of the update's own (a conditional create),
// then the object's record is replaced on no condition (If-Match: *),
// which a read of the record looks for when its answer is lost.
type stagedPut struct {
	driver.Driver
	reader   driver.ObjectReader
	endpoint string
}

func (s stagedPut) stage() string  { return driver.StepTarget(s.Name(), "stage") }
func (s stagedPut) commit() string { return driver.StepTarget(s.Name(), "commit") }

func (s stagedPut) StepTargets() []string { return []string{s.stage(), s.commit()} }

func (s stagedPut) ReadObject(k canonical.Keyed) (driver.Request, error) {
	return s.reader.ReadObject(k)
}

func (s stagedPut) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	return s.reader.JudgeRead(a)
}

func (s stagedPut) UpdateSteps(k canonical.Keyed, u driver.ObjectUpdate) ([]driver.Step, error) {
	staged := s.endpoint + "/staged-" + u.Key
	record := s.endpoint + "/" + k.Object
	put := func(url, cond, value string) driver.Request {
		h := http.Header{}
		h.Set(cond, value)
		h.Set("Content-Type", "application/json")
		return driver.Request{Method: http.MethodPut, URL: url, Header: h, Body: k.Body}
	}
	return []driver.Step{{
		Label: "stage", Target: s.stage(), Key: u.Key, Durable: true, Arbitrated: true, Fallback: staged,
		Build: func([]string) (driver.Request, error) { return put(staged, "If-None-Match", "*"), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusPreconditionFailed {
				return driver.Verdict{Class: driver.Exists}
			}
			return driver.Verdict{Class: driver.Classify(a)}
		},
	}, {
		Label: "commit", Target: s.commit(), Key: u.Key, Primary: true, Durable: true, Fallback: u.Record,
		Build: func([]string) (driver.Request, error) { return put(record, "If-Match", "*"), nil },
		Judge: func(a driver.Answer) driver.Verdict { return driver.Verdict{Class: driver.Classify(a)} },
		Check: &driver.Check{
			Build: func([]string) (driver.Request, error) { return s.reader.ReadObject(k) },
			Judge: func(a driver.Answer) driver.Finding {
				state, f := s.reader.JudgeRead(a)
				if f.Kind != driver.Present {
					return f
				}
				if body, err := canonical.JCS(state.Body); err != nil || canonical.Key(body) != k.Key {
					return driver.Finding{Kind: driver.Absent}
				}
				return driver.Finding{Kind: driver.Present, ID: u.Record}
			},
		},
	}}, nil
}

type stagedTarget struct{ put.Target }

func (t stagedTarget) Driver() (driver.Driver, error) {
	d, err := t.Target.Driver()
	if err != nil {
		return nil, err
	}
	return stagedPut{Driver: d, reader: d.(driver.ObjectReader), endpoint: t.Endpoint}, nil
}

func stagedClient(t *testing.T, endpoint string, store Store, cfg Config) *Client {
	t.Helper()
	cfg.Target, cfg.Store, cfg.Retry, cfg.Identity = stagedTarget{put.Target{Endpoint: endpoint}}, store, fastRetry, []string{"/id"}
	c, err := New(cfg)
	require.NoError(t, err)
	return c
}

// records counts the server's records whose URL path starts with prefix
// after the endpoint ("staged-" for the staged copies).
func records(h *repotest.Handler, prefix string) (n int) {
	for _, r := range h.Records() {
		if strings.HasPrefix(r.Key, prefix) {
			n++
		}
	}
	return n
}

func TestAnUpdateOfSeveralStepsIsAppliedOnceEachStepGuarded(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	c := stagedClient(t, srv.URL, openStore(t), Config{})
	v1, v2, v3 := `{"id":"s-1","n":1}`, `{"id":"s-1","n":2}`, `{"id":"s-1","n":3}`

	first := deposit(t, c, v1)
	require.Equal(t, OutcomeCreated, first.Outcome)
	upd := deposit(t, c, v2)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, first.Identifier, upd.Identifier, "the primary step's identifier: the same record")
	require.Equal(t, 3, upd.Requests, "a read, the stage, the commit")
	require.Equal(t, OutcomeReplayed, deposit(t, c, v2).Outcome)
	require.Equal(t, OutcomeUpdated, deposit(t, c, v3).Outcome)
	old := deposit(t, c, v1)
	require.Equal(t, OutcomeStale, old.Outcome)
	require.Zero(t, old.Requests)

	require.Equal(t, 2, records(h, "staged-"), "one staged copy per update")
	require.Equal(t, int64(2), h.Stats().Updates)
	require.JSONEq(t, v3, string(h.Records()[indexOf(t, h, first.Object)].Body))
}

func indexOf(t *testing.T, h *repotest.Handler, key string) int {
	t.Helper()
	for i, r := range h.Records() {
		if r.Key == key {
			return i
		}
	}
	t.Fatalf("no record %s", key)
	return -1
}

// A commit whose answer is lost is looked for by its check, never sent
// again once the record holds the version.
func TestAnAmbiguousStepOfAnUpdateIsCheckedNotResent(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var dropped atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-Match") == "*" && !dropped.Swap(true) {
			serveThenDrop(h, w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := stagedClient(t, srv.URL, openStore(t), Config{})
	deposit(t, c, `{"id":"s-2","n":1}`)
	upd := deposit(t, c, `{"id":"s-2","n":2}`)
	require.True(t, dropped.Load())
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, int64(1), h.Stats().Updates, "the commit took effect once, and was not sent again")
}

// An update cut short after its first step resumes at the second in the
// next run: the staged copy is answered from the store, not made again.
func TestAnUpdateCutShortResumesAtItsUnfinishedStep(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var down atomic.Bool
	down.Store(true)
	var stages atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "staged-") {
			stages.Add(1)
		}
		if r.Method == http.MethodPut && r.Header.Get("If-Match") == "*" && down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c := stagedClient(t, srv.URL, store, Config{})
	deposit(t, c, `{"id":"s-3","n":1}`)
	_, err = c.Deposit(context.Background(), []byte(`{"id":"s-3","n":2}`))
	require.ErrorIs(t, err, ErrUnresolved, "the commit never got through")
	obj, err := store.LookupObject(context.Background(), c.target.Name(), objectKeyOf(t, c, `{"id":"s-3","n":2}`))
	require.NoError(t, err)
	require.NotEmpty(t, obj.Pending, "the update's intent is recorded")

	down.Store(false)
	again := stagedClient(t, srv.URL, store, Config{})
	upd := deposit(t, again, `{"id":"s-3","n":2}`)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, int64(1), stages.Load(), "the staged copy was made once")
	require.Equal(t, int64(1), h.Stats().Updates)
}

func objectKeyOf(t *testing.T, c *Client, payload string) string {
	t.Helper()
	k, err := c.keyPayload([]byte(payload))
	require.NoError(t, err)
	return k.Object
}

// A version applied again after a revert is an update of its own: its
// steps run again under another key, rather than being answered by the
// first application's rows.
func TestARevertedVersionIsANewUpdateBySteps(t *testing.T) {
	h, srv := objectServer(t, repotest.Config{})
	store := openStore(t)
	c := stagedClient(t, srv.URL, store, Config{})
	v1, v2 := `{"id":"s-4","n":1}`, `{"id":"s-4","n":2}`
	deposit(t, c, v1)
	deposit(t, c, v2)
	r := stagedClient(t, srv.URL, store, Config{AllowRevert: true})
	back := deposit(t, r, v1)
	require.Equal(t, OutcomeUpdated, back.Outcome)
	require.Equal(t, 3, back.Requests, "a read, the stage, the commit: nothing answered from the first application")
	require.Equal(t, int64(2), h.Stats().Updates)
	require.JSONEq(t, v1, string(h.Records()[indexOf(t, h, back.Object)].Body))
}

// A step refused for good fails the version: a re-run answers it from the
// store, sending nothing.
func TestAStepRefusedForGoodFailsTheVersion(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var puts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "staged-") {
			puts.Add(1)
			http.Error(w, "no staging here", http.StatusUnprocessableEntity)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c := stagedClient(t, srv.URL, store, Config{})
	deposit(t, c, `{"id":"s-5","n":1}`)
	_, err = c.Deposit(context.Background(), []byte(`{"id":"s-5","n":2}`))
	require.ErrorIs(t, err, ErrTerminal)
	v, err := store.LookupVersion(context.Background(), c.target.Name(), objectKeyOf(t, c, `{"id":"s-5","n":1}`), mustKey(t, c, `{"id":"s-5","n":2}`))
	require.NoError(t, err)
	require.Equal(t, dedup.StateFailed, v.State)
	require.Equal(t, http.StatusUnprocessableEntity, v.Status)

	res, err := stagedClient(t, srv.URL, store, Config{}).Deposit(context.Background(), []byte(`{"id":"s-5","n":2}`))
	require.ErrorIs(t, err, ErrTerminal)
	require.Zero(t, res.Requests, "answered from the store")
	require.Equal(t, int64(1), puts.Load())
}

func mustKey(t *testing.T, c *Client, payload string) string {
	t.Helper()
	k, err := c.keyPayload([]byte(payload))
	require.NoError(t, err)
	return k.Key
}

// An update whose last step took effect while its run could not learn so
// (the answer lost, the reads that would settle it failing) leaves its
// rows pending; the next run's read finds the version applied and closes
// them as done, sending no step again.
func TestAnUpdateAppliedUnbeknownIsSettledWithoutASend(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var readsDown atomic.Bool
	var commits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.Header.Get("If-Match") == "*":
			if commits.Add(1) == 1 {
				h.ServeHTTP(httptest.NewRecorder(), r)
				readsDown.Store(true)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
				return
			}
		case r.Method == http.MethodGet && readsDown.Load():
			http.Error(w, "reads down", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c := stagedClient(t, srv.URL, store, Config{})
	v2 := `{"id":"s-6","n":2}`
	deposit(t, c, `{"id":"s-6","n":1}`)
	_, err = c.Deposit(context.Background(), []byte(v2))
	require.ErrorIs(t, err, ErrUnresolved, "the commit took effect, but nothing could say so")
	object, key := objectKeyOf(t, c, v2), mustKey(t, c, v2)
	commit := driver.StepTarget(c.target.Name(), "commit")
	rec, err := store.Lookup(context.Background(), commit, updateKey(object, 1, key))
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)

	readsDown.Store(false)
	upd := deposit(t, stagedClient(t, srv.URL, store, Config{}), v2)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	require.Equal(t, 1, upd.Requests, "the read alone: no step is sent again")
	require.Equal(t, int64(1), commits.Load())
	rec, err = store.Lookup(context.Background(), commit, updateKey(object, 1, key))
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, rec.State, "the commit's row is closed, not left pending")
	require.Equal(t, int64(1), h.Stats().Updates)
}

// An update cut short and never settled, then superseded by a later
// version of the object, is closed: its rows failed as superseded (their
// key never runs again), not left pending for deposit status to count.
func TestASupersededUpdateIsClosedNotLeftPending(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var down atomic.Bool
	down.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.Header.Get("If-Match") == "*" && down.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	store := openStore(t)
	c := stagedClient(t, srv.URL, store, Config{})
	v2, v3 := `{"id":"s-7","n":2}`, `{"id":"s-7","n":3}`
	deposit(t, c, `{"id":"s-7","n":1}`)
	_, err = c.Deposit(context.Background(), []byte(v2))
	require.ErrorIs(t, err, ErrUnresolved)

	down.Store(false)
	upd := deposit(t, stagedClient(t, srv.URL, store, Config{}), v3)
	require.Equal(t, OutcomeUpdated, upd.Outcome)
	commit := driver.StepTarget(c.target.Name(), "commit")
	rec, err := store.Lookup(context.Background(), commit, updateKey(upd.Object, 1, mustKey(t, c, v2)))
	require.NoError(t, err)
	require.Equal(t, dedup.StateFailed, rec.State)
	require.Contains(t, rec.Problem, "superseded")
	require.Empty(t, pendingRows(t, store, commit), "no update's row left pending")
	require.Equal(t, int64(1), h.Stats().Updates, "v3 alone was committed")
	require.JSONEq(t, v3, string(h.Records()[indexOf(t, h, upd.Object)].Body))
}
