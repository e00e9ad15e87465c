package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// draftTarget is a target of this test only, shaped like a repository that
// dedups nothing (InvenioRDM): create a draft (POST /drafts, a new draft
// every time), then publish it (POST /drafts/{id}/publish). It proves that
// the step model expresses what such targets need: a step that uses an
// earlier step's result, checks that send requests and wait out an index
// lag, and steps whose outcome is durable before the next request.
type draftTarget struct {
	endpoint string
	settle   time.Duration
}

func (t draftTarget) Driver() (driver.Driver, error) { return t, nil }
func (t draftTarget) Name() string                   { return "test-drafts " + t.endpoint }
func (t draftTarget) draftTarget() string            { return "test-drafts-draft " + t.endpoint }
func (t draftTarget) StepTargets() []string          { return []string{t.draftTarget()} }
func (draftTarget) SecretFingerprint() string        { return "" }
func (draftTarget) Guards(name string) bool          { return driver.Guarded(name) }

func (t draftTarget) Steps(k canonical.Keyed, _ string) ([]step, error) {
	idOf := func(body []byte, member string) string {
		var m map[string]string
		_ = json.Unmarshal(body, &m)
		return m[member]
	}
	draft := step{
		Label: "draft", Target: t.draftTarget(), Key: k.Key, Durable: true,
		Build: func([]string) (request, error) {
			h := http.Header{"X-Marker": {k.Key}}
			return request{Method: http.MethodPost, URL: t.endpoint + "/drafts", Header: h, Body: k.Body}, nil
		},
		Judge: func(a answer) verdict {
			v := verdict{Class: driver.Classify(a)}
			if v.Class == driver.Created {
				v.ID = idOf(a.Body, "id")
			}
			return v
		},
		Check: &check{
			Settle: t.settle,
			Build: func([]string) (request, error) {
				return request{Method: http.MethodGet, URL: t.endpoint + "/search?marker=" + k.Key}, nil
			},
			Judge: func(a answer) finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
				}
				var hits []string
				if json.Unmarshal(a.Body, &hits) != nil {
					return finding{Kind: driver.Unknown, Class: driver.Ambiguous}
				}
				switch len(hits) {
				case 0:
					return finding{Kind: driver.Absent}
				case 1:
					return finding{Kind: driver.Present, ID: hits[0]}
				}
				return finding{Kind: driver.Foreign, Problem: fmt.Sprintf("%d drafts carry this marker", len(hits))}
			},
		},
	}
	publish := step{
		Target: t.Name(), Key: k.Key, Primary: true, Durable: true,
		Build: func(prior []string) (request, error) {
			return request{Method: http.MethodPost, URL: t.endpoint + "/drafts/" + prior[0] + "/publish"}, nil
		},
		Judge: func(a answer) verdict {
			v := verdict{Class: driver.Classify(a)}
			if v.Class == driver.Created {
				v.ID = idOf(a.Body, "record")
			}
			return v
		},
		Check: &check{
			Build: func(prior []string) (request, error) {
				return request{Method: http.MethodGet, URL: t.endpoint + "/records/" + prior[0]}, nil
			},
			Judge: func(a answer) finding {
				switch {
				case a.Err == nil && a.Status == http.StatusOK:
					return finding{Kind: driver.Present, ID: idOf(a.Body, "record")}
				case a.Err == nil && a.Status == http.StatusNotFound:
					return finding{Kind: driver.Absent}
				}
				return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
			},
		},
	}
	return []step{draft, publish}, nil
}

// draftServer creates a draft on every POST, indexes it for search only
// after lag, and drops the connection after committing the first create and
// the first publish. Each publish checks that the client recorded the draft
// in its store before publishing.
type draftServer struct {
	*httptest.Server
	lag   time.Duration
	store *dedup.SQLite
	tgt   draftTarget

	mu        sync.Mutex
	drafts    map[string]string    // id -> marker
	created   map[string]time.Time // id -> when
	records   map[string]string    // draft id -> record id
	creates   int
	publishes int
	unguarded int // publishes that arrived before the draft was done in the store
	dropped   map[string]bool
}

func newDraftServer(t *testing.T, store *dedup.SQLite, lag time.Duration) *draftServer {
	s := &draftServer{lag: lag, store: store, drafts: map[string]string{}, created: map[string]time.Time{},
		records: map[string]string{}, dropped: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	s.tgt = draftTarget{endpoint: s.URL, settle: 4 * lag}
	return s
}

func (s *draftServer) drop(w http.ResponseWriter, what string) bool {
	if s.dropped[what] {
		return false
	}
	s.dropped[what] = true
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
	return true
}

func (s *draftServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := strings.TrimPrefix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodPost && path == "drafts":
		s.creates++
		id := fmt.Sprintf("d%d", s.creates)
		s.drafts[id], s.created[id] = r.Header.Get("X-Marker"), time.Now()
		if s.drop(w, "create") {
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	case r.Method == http.MethodGet && path == "search":
		hits := []string{}
		for id, marker := range s.drafts {
			if marker == r.URL.Query().Get("marker") && time.Since(s.created[id]) >= s.lag {
				hits = append(hits, id)
			}
		}
		json.NewEncoder(w).Encode(hits)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/publish"):
		id := strings.TrimSuffix(strings.TrimPrefix(path, "drafts/"), "/publish")
		s.publishes++
		rec, err := s.store.Lookup(context.Background(), s.tgt.draftTarget(), s.drafts[id])
		if err != nil || rec.State != dedup.StateDone || rec.Identifier != id {
			s.unguarded++
		}
		if s.records[id] == "" {
			s.records[id] = "rec-" + id
		}
		if s.drop(w, "publish") {
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, `{"record":%q}`, s.records[id])
	case r.Method == http.MethodGet && strings.HasPrefix(path, "records/"):
		if rec := s.records[strings.TrimPrefix(path, "records/")]; rec != "" {
			fmt.Fprintf(w, `{"record":%q}`, rec)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (s *draftServer) counts() (creates, drafts, records, unguarded int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.creates, len(s.drafts), len(s.records), s.unguarded
}

func TestStepsOfATargetThatDedupsNothing(t *testing.T) {
	store := openStore(t)
	srv := newDraftServer(t, store, 30*time.Millisecond)
	c, err := New(Config{Target: srv.tgt, Store: store, Retry: fastRetry})
	require.NoError(t, err)

	res, err := c.Deposit(context.Background(), []byte(`{"title":"one"}`))
	require.NoError(t, err)
	creates, drafts, records, unguarded := srv.counts()
	require.Equal(t, 1, creates, "the dropped create was found by its marker, after the index lag, not sent again")
	require.Equal(t, 1, drafts)
	require.Equal(t, 1, records)
	require.Equal(t, 0, unguarded, "a publish arrived before the draft id was durable")
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, "rec-d1", res.Identifier)

	draft, err := store.Lookup(context.Background(), srv.tgt.draftTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, draft.State)
	require.Equal(t, "d1", draft.Identifier)

	again, err := c.Deposit(context.Background(), []byte(`{"title":"one"}`))
	require.NoError(t, err)
	require.Equal(t, OutcomeReplayed, again.Outcome)
	require.Equal(t, "rec-d1", again.Identifier)
	require.Equal(t, 0, again.Requests)
}

// A run that died after sending the create, before recording its answer,
// left both rows pending: the next run looks for the draft (waiting out
// the index lag) instead of creating a second one, then publishes it.
func TestStepResumesAnUncertainCreateByItsMarker(t *testing.T) {
	store := openStore(t)
	srv := newDraftServer(t, store, 30*time.Millisecond)
	c, err := New(Config{Target: srv.tgt, Store: store, Retry: fastRetry})
	require.NoError(t, err)
	k, err := c.Key([]byte(`{"title":"two"}`))
	require.NoError(t, err)

	// What the dead run left: its intents, and the draft it created.
	ctx := context.Background()
	_, err = store.Begin(ctx, srv.tgt.Name(), k.Key, nil)
	require.NoError(t, err)
	_, err = store.Begin(ctx, srv.tgt.draftTarget(), k.Key, nil)
	require.NoError(t, err)
	srv.mu.Lock()
	srv.creates, srv.drafts["d1"], srv.created["d1"] = 1, k.Key, time.Now()
	srv.dropped["create"] = true
	srv.mu.Unlock()

	res, err := c.Deposit(ctx, []byte(`{"title":"two"}`))
	require.NoError(t, err)
	creates, _, records, unguarded := srv.counts()
	require.Equal(t, 1, creates, "no second create")
	require.Equal(t, 1, records)
	require.Equal(t, 0, unguarded)
	require.True(t, res.Recovered)
	require.Equal(t, "rec-d1", res.Identifier)
}

// Two drafts with one marker are a conflict, reported and never resolved
// by picking one.
func TestTwoDraftsWithOneMarkerAreAConflict(t *testing.T) {
	store := openStore(t)
	srv := newDraftServer(t, store, 0)
	c, err := New(Config{Target: srv.tgt, Store: store, Retry: fastRetry})
	require.NoError(t, err)
	k, err := c.Key([]byte(`{"title":"three"}`))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = store.Begin(ctx, srv.tgt.draftTarget(), k.Key, nil)
	require.NoError(t, err)
	srv.mu.Lock()
	past := time.Now().Add(-time.Second)
	srv.drafts["x1"], srv.created["x1"] = k.Key, past
	srv.drafts["x2"], srv.created["x2"] = k.Key, past
	srv.mu.Unlock()

	_, err = c.Deposit(ctx, []byte(`{"title":"three"}`))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "2 drafts carry this marker")
	creates, _, records, _ := srv.counts()
	require.Equal(t, 0, creates)
	require.Equal(t, 0, records)
	rec, err := store.Lookup(ctx, srv.tgt.Name(), k.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateFailed, rec.State)
}
