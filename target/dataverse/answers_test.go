package dataverse_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

// deposit deposits metadata titled title with files through a client of
// target t on the fixture's store, configured further by with.
func (f *fixture) deposit(t dataverse.Target, title string, files []string, with ...func(*client.Config)) (client.Result, error) {
	f.t.Helper()
	res, err := f.tryDeposit(t, title, files, with...)
	require.NotErrorIs(f.t, err, errSetUp)
	return res, err
}

// errSetUp marks an error of tryDeposit's own set-up.
var errSetUp = errors.New("set-up")

// tryDeposit is deposit for any goroutine: it requires nothing.
func (f *fixture) tryDeposit(t dataverse.Target, title string, files []string, with ...func(*client.Config)) (client.Result, error) {
	if t.Endpoint == "" {
		t.Endpoint = f.srv.URL
	}
	if t.Collection == "" {
		t.Collection = "root"
	}
	if t.SettleTime == 0 {
		t.SettleTime = time.Millisecond
	}
	store, err := dedup.Open(f.db)
	if err != nil {
		return client.Result{}, fmt.Errorf("%w: %w", errSetUp, err)
	}
	defer store.Close()
	cfg := client.Config{Target: t, Store: store, Retry: fastRetry, Rate: -1}
	for _, w := range with {
		w(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		return client.Result{}, fmt.Errorf("%w: %w", errSetUp, err)
	}
	if len(files) == 0 {
		return c.Deposit(f.t.Context(), metadata(title))
	}
	return c.DepositDataset(f.t.Context(), f.dir, metadata(title), files)
}

// Each answer Dataverse gives is classified by its message: a validation
// failure (403, or 400 for a subject outside the vocabulary) fails the
// deposit, named; a wrong token, the guest and an unknown collection stop
// the run with a message that says which.
func TestAnswersAreClassifiedByTheirMessage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		target   dataverse.Target
		payload  string
		stop     bool
		contains string
	}{
		{name: "a missing required field fails the deposit", target: dataverse.Target{Token: token},
			payload:  `{"datasetVersion":{"metadataBlocks":{"citation":{"fields":[{"typeName":"title","multiple":false,"typeClass":"primitive","value":"T"}]}}}}`,
			contains: "invalid metadata: Validation Failed: Author is required"},
		{name: "a subject outside the vocabulary fails the deposit", target: dataverse.Target{Token: token},
			payload:  strings.Replace(string(metadata("Subject")), `["Other"]`, `["Birds"]`, 1),
			contains: "invalid metadata: Error parsing Json: Value 'Birds' does not exist in type 'subject'"},
		{name: "a wrong token stops the run", target: dataverse.Target{Token: "wrong"}, payload: string(metadata("T")),
			stop: true, contains: "Bad API key"},
		{name: "the guest stops the run", target: dataverse.Target{}, payload: string(metadata("T")),
			stop: true, contains: "for want of a permission"},
		{name: "an unknown collection stops the run", target: dataverse.Target{Token: token, Collection: "nowhere"},
			payload: string(metadata("T")), stop: true, contains: "no such collection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, repotest.DataverseConfig{})
			tc.target.Endpoint, tc.target.SettleTime = f.srv.URL, time.Millisecond
			if tc.target.Collection == "" {
				tc.target.Collection = "root"
			}
			store, err := dedup.Open(f.db)
			require.NoError(t, err)
			defer store.Close()
			c, err := client.New(client.Config{Target: tc.target, Store: store, Retry: fastRetry, Rate: -1})
			require.NoError(t, err)
			_, err = c.Deposit(t.Context(), []byte(tc.payload))
			require.ErrorContains(t, err, tc.contains)
			if tc.stop {
				require.ErrorIs(t, err, client.ErrStopRun)
			} else {
				require.ErrorIs(t, err, client.ErrTerminal)
				before := f.srv.Stats().Requests
				_, again := c.Deposit(t.Context(), []byte(tc.payload))
				require.ErrorIs(t, again, client.ErrTerminal, "recorded")
				require.Equal(t, before, f.srv.Stats().Requests, "never sent again")
			}
			require.Zero(t, f.srv.Stats().Datasets)
			require.NotContains(t, err.Error(), token)
		})
	}
}

// Dataverse 6.x rate limits answer 429 to a create and 400 to an add,
// without Retry-After, before the command runs: the client slows down and
// every dataset is published once, with each file once.
func TestRateLimitsSlowTheRunDownAndAddNothingTwice(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Limit: 1, Window: 20 * time.Millisecond})
	files := []string{f.file("a.txt", "alpha"), f.file("b.txt", "beta")}
	slow := func(cfg *client.Config) {
		cfg.Retry = backoff.Policy{Base: 5 * time.Millisecond, Cap: 40 * time.Millisecond, MaxAttempts: 30, MaxElapsed: 20 * time.Second}
	}
	for _, title := range []string{"One", "Two"} {
		_, err := f.deposit(dataverse.Target{Token: token}, title, files, slow)
		require.NoError(t, err)
	}
	f.published(2, files...)
	require.NotZero(t, f.srv.Stats().RateLimited, "the limit was met")
}

// A publish is accepted and finished in the background under a
// finalizePublication lock: the client polls until the version is
// released, and publishes once.
func TestAPublishLockIsWaitedOut(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{PublishLag: 150 * time.Millisecond})
	res, err := f.deposit(dataverse.Target{Token: token}, "Locked", nil)
	require.NoError(t, err)
	all := f.published(1)
	require.Equal(t, all[0].PersistentID, res.Identifier)
	require.Equal(t, int64(1), f.srv.Stats().Publishes)
}

// A lock that outlasts LockWait leaves the deposit unresolved as stuck,
// naming the dataset; a later run polls again and never publishes twice.
func TestALockThatOutlastsTheBoundLeavesTheDepositUnresolvedNamingTheDataset(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{PublishLag: time.Hour})
	for range 2 {
		_, err := f.deposit(dataverse.Target{Token: token, LockWait: 50 * time.Millisecond}, "Stuck", nil)
		require.ErrorIs(t, err, client.ErrUnresolved)
		pid := f.srv.Datasets()[0].PersistentID
		require.ErrorContains(t, err, "dataset "+pid+" is locked (finalizePublication)")
	}
	s := f.srv.Stats()
	require.Equal(t, int64(1), s.Datasets)
	require.Equal(t, int64(1), s.Publishes, "polled, never sent again")
}

// An ingest lock refuses the publish ("locked. Reason: Ingest"): the
// client waits and publishes once the ingest ends; the ingested file,
// renamed .tab, is recognised by its original checksum after a lost add
// answer.
func TestAnIngestLockIsWaitedForAndTheIngestedFileIsRecognised(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{IngestLag: 100 * time.Millisecond, Faults: "nth=1:drop"})
	files := []string{f.file("table.csv", "a,b\n1,2\n")}
	_, err := f.deposit(dataverse.Target{Token: token, Ingest: true}, "Tables", files)
	require.NoError(t, err)
	all := f.srv.Datasets()
	require.Len(t, all, 1)
	require.Len(t, all[0].Files, 1, "added once")
	require.Equal(t, "table.tab", all[0].Files[0].Label)
	require.Equal(t, "RELEASED", all[0].VersionState)
	s := f.srv.Stats()
	require.Zero(t, s.DuplicateMarkers)
	require.NotZero(t, s.PublishRefused, "the ingest lock refused a publish")
}

// A create whose answer is lost after it committed is found by the check's
// chain, though search never shows the dataset: the contents listing,
// then the datasets created since the look. So is every file add and the
// publish whose answers are lost; nothing is sent twice.
func TestLostAnswersAreFoundByTheChecksThoughSearchNeverIndexes(t *testing.T) {
	for _, spec := range []string{"nth=1:drop", "nth=1:500", "nth=1:504"} {
		t.Run(spec, func(t *testing.T) {
			f := newFixture(t, repotest.DataverseConfig{Unindexed: 1, Faults: spec})
			files := []string{f.file("a.txt", "alpha"), f.file("sub/b.txt", "beta")}
			res, err := f.deposit(dataverse.Target{Token: token}, "Lost", files)
			require.NoError(t, err)
			require.Equal(t, client.OutcomeCreated, res.Outcome)
			all := f.published(1, files...)
			require.Equal(t, all[0].PersistentID, res.Identifier)
			require.NotZero(t, f.srv.Stats().Faults)
		})
	}
}

// proxy is a server on 127.0.0.1 in front of the stub: intercept answers
// a request itself when it returns true.
func proxy(t *testing.T, target string, intercept func(w http.ResponseWriter, r *http.Request) bool) string {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !intercept(w, r) {
			rp.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func isCreate(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/datasets")
}

// An answer whose message the target does not know is taken as
// ambiguous for a create (looked for, then sent again), never as done,
// and logged once.
func TestAnUnrecognisedMessageIsAmbiguousAndLoggedOnce(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{})
	var mu sync.Mutex
	odd := 2
	ep := proxy(t, f.srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if !isCreate(r) || odd == 0 {
			return false
		}
		odd--
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"status":"ERROR","message":"Something nobody has seen."}`)
		return true
	})
	var logs bytes.Buffer
	logger := func(cfg *client.Config) { cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil)) }
	res, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token}, "Odd", nil, logger)
	require.NoError(t, err)
	require.Equal(t, client.OutcomeCreated, res.Outcome)
	f.published(1)
	require.Equal(t, 1, strings.Count(logs.String(), "does not recognise"), logs.String())
}

// A lost create answer, followed by more datasets than the bound created
// by others before the check, leaves the deposit unresolved with a message
// naming the bound: nothing is sent again.
func TestAChecksBoundLeavesTheDepositUnresolved(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Unindexed: 1})
	var mu sync.Mutex
	dropped := false
	ep := proxy(t, f.srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if !isCreate(r) || dropped {
			return false
		}
		dropped = true
		body, err := io.ReadAll(r.Body)
		if err != nil {
			panic(err)
		}
		for i := range 3 { // ours, then two of someone else's
			payload := body
			if i > 0 {
				payload = metadata("Someone else's")
			}
			req, _ := http.NewRequest(http.MethodPost, f.srv.URL+r.URL.Path, bytes.NewReader(payload))
			req.Header.Set("X-Dataverse-key", token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				panic(err)
			}
			resp.Body.Close()
		}
		panic(http.ErrAbortHandler) // the answer is lost
	})
	_, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token, ListBound: 2}, "Busy", nil)
	require.ErrorIs(t, err, client.ErrUnresolved)
	require.ErrorContains(t, err, "of which 2 search does not show were read")
	require.Equal(t, int64(3), f.srv.Stats().Datasets, "not sent again")

	// With a bound that reaches it, the next run finds it.
	res, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token, ListBound: 3}, "Busy", nil)
	require.NoError(t, err)
	require.Equal(t, f.srv.Datasets()[0].PersistentID, res.Identifier)
	require.Equal(t, int64(3), f.srv.Stats().Datasets)
}

// A create refused with a 500 before it took effect is proven absent
// without a read per dataset: one page of the newest datasets search shows
// (each with its otherId, read from the database) covers those created
// about when it was tried, whatever the bound on datasets read one by
// one; then it is sent again, once.
func TestAnAbsentCreateIsProvenByOnePageOfSearch(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Faults: "nth=1:500"})
	for i := range 5 {
		_, err := f.deposit(dataverse.Target{Token: token}, fmt.Sprint("Other ", i), nil)
		require.NoError(t, err) // each refused once, then found absent
	}
	var mu sync.Mutex
	reads := 0
	ep := proxy(t, f.srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		id, one := strings.CutPrefix(r.URL.Path, "/api/datasets/")
		if _, err := strconv.Atoi(id); one && err == nil && r.Method == http.MethodGet {
			mu.Lock()
			reads++
			mu.Unlock()
		}
		return false
	})
	res, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token, ListBound: 1}, "Refused", nil)
	require.NoError(t, err)
	require.Equal(t, client.OutcomeCreated, res.Outcome)
	f.published(6)
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, reads, "no dataset read one by one")
}

// An add refused by a lock (400 "Failed to add file to dataset.", as
// Dataverse answers an add while a lock other than Ingest is held) is
// waited for and sent again: the file is added once.
func TestAnAddRefusedByALockIsSentAgainOnce(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{})
	files := []string{f.file("a.txt", "alpha")}
	var mu sync.Mutex
	refused := 0
	ep := proxy(t, f.srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasSuffix(r.URL.Path, "/add") || refused > 0 {
			return false
		}
		refused++
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"status":"ERROR","message":"Failed to add file to dataset."}`)
		return true
	})
	_, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token}, "Locked add", files)
	require.NoError(t, err)
	f.published(1, files...)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, refused)
}
