package dataverse_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

// A store that is lost (deleted) after a batch was published is recovered
// through the scan of the collection its first deposit makes: its
// contents listing, then one search page that shows every dataset with
// its marker; each deposit's look is seeded from it, and nothing is
// created again.
func TestALostStoreCreatesNothingAgain(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{})
	files := []string{f.file("a.txt", "alpha"), f.file("b.txt", "beta")}
	titles := []string{"One", "Two", "Three"}
	ids := map[string]string{}
	for _, title := range titles {
		res, err := f.deposit(dataverse.Target{Token: token}, title, files)
		require.NoError(t, err)
		ids[title] = res.Identifier
	}
	require.NoError(t, os.Remove(f.db))
	before := f.srv.Stats().Requests
	for _, title := range titles {
		res, err := f.deposit(dataverse.Target{Token: token}, title, files)
		require.NoError(t, err)
		require.Equal(t, ids[title], res.Identifier, "the same dataset")
		require.Equal(t, client.OutcomeExisting, res.Outcome)
	}
	f.published(len(titles), files...)
	// The scan (contents, one search page), then per dataset the file
	// list, the publish refused as already released, and its check's two
	// reads.
	require.Equal(t, int64(2+4*len(titles)), f.srv.Stats().Requests-before)
}

// A store lost while its datasets were drafts with their files: the look
// finds each draft, its file list shows both files, so none is added
// again, and the draft is published.
func TestALostStoreOfDraftsAddsNoFileTwice(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{})
	files := []string{f.file("a.txt", "alpha"), f.file("dir/b.txt", "beta")}
	var mu sync.Mutex
	refuse := true
	ep := proxy(t, f.srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if !refuse || !strings.HasSuffix(r.URL.Path, "/actions/:publish") {
			return false
		}
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"status":"ERROR","message":"Bad API key"}`)
		return true
	})
	_, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token}, "Draft", files)
	require.ErrorIs(t, err, client.ErrStopRun)
	require.Equal(t, "DRAFT", f.srv.Datasets()[0].VersionState)

	require.NoError(t, os.Remove(f.db))
	mu.Lock()
	refuse = false
	mu.Unlock()
	res, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token}, "Draft", files)
	require.NoError(t, err)
	require.Equal(t, f.srv.Datasets()[0].PersistentID, res.Identifier)
	require.Equal(t, client.OutcomeCreated, res.Outcome, "published by this run")
	f.published(1, files...)
}

// A dataset the search never shows is found after a lost store by the
// scan: the contents listing names it, and it is read, since no search
// page shows it; nothing is created again. Child collections in the
// listing are passed over.
func TestALostStoreFindsWhatSearchNeverShows(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Unindexed: 1, Subcollections: []string{"Field notes", "Archive"}})
	first, err := f.deposit(dataverse.Target{Token: token}, "Hidden", nil)
	require.NoError(t, err)
	_, err = f.deposit(dataverse.Target{Token: token}, "Hidden too", nil)
	require.NoError(t, err)
	require.NoError(t, os.Remove(f.db))
	before := f.srv.Stats().Requests
	again, err := f.deposit(dataverse.Target{Token: token}, "Hidden", nil)
	require.NoError(t, err)
	require.Equal(t, first.Identifier, again.Identifier, "the same dataset")
	require.Zero(t, f.srv.Stats().DuplicateMarkers)
	require.Equal(t, int64(2), f.srv.Stats().Datasets)
	// The scan: the contents, one search page (it shows neither), a read
	// of each; then the publish refused as already released and its
	// check's two reads.
	require.Equal(t, int64(1+1+2+3), f.srv.Stats().Requests-before)
}

// A scan of more looks than a request's attempt limit, each look's first
// attempt answered 503, is not cut short: each look is retried within
// limits of its own, and the lost store's deposit is found.
func TestAScanOfManyLooksRetriesEachWithinItsOwnLimit(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Unindexed: 1})
	for i := range 8 {
		_, err := f.deposit(dataverse.Target{Token: token}, fmt.Sprint("Hidden ", i), nil)
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	ep := proxy(t, f.srv.URL, func(w http.ResponseWriter, r *http.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if r.Method != http.MethodGet || seen[r.URL.String()] {
			return false
		}
		seen[r.URL.String()] = true
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	require.NoError(t, os.Remove(f.db))
	before := f.srv.Stats().Datasets
	res, err := f.deposit(dataverse.Target{Endpoint: ep, Token: token}, "Hidden 0", nil)
	require.NoError(t, err)
	require.Equal(t, f.srv.Datasets()[0].PersistentID, res.Identifier)
	require.Equal(t, before, f.srv.Stats().Datasets)
	require.Greater(t, len(seen), fastRetry.MaxAttempts, "more looks than one request's attempts")
}

// Two datasets that carry one deposit's marker (made before the scan
// existed, by a lost store) are reported when the scan of a new store
// finds them: the deposit fails, naming both, and nothing is created or
// published; a later run reports the same without a request.
func TestALostStoreReportsTwoDatasetsWithOneMarker(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Unindexed: 1})
	first, err := f.deposit(dataverse.Target{Token: token}, "Twice", nil)
	require.NoError(t, err)
	twin := createMarked(t, f.srv.URL, "Twice", dataverse.Marker(first.Key))
	require.NoError(t, os.Remove(f.db))
	before := f.srv.Stats()
	_, err = f.deposit(dataverse.Target{Token: token}, "Twice", nil)
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "found 2 datasets with the marker "+dataverse.Marker(first.Key))
	require.ErrorContains(t, err, first.Identifier)
	require.ErrorContains(t, err, twin)
	after := f.srv.Stats()
	require.Equal(t, before.Datasets, after.Datasets)
	require.Equal(t, before.Publishes, after.Publishes)

	_, err = f.deposit(dataverse.Target{Token: token}, "Twice", nil)
	require.ErrorIs(t, err, client.ErrTerminal)
	require.Equal(t, after.Requests, f.srv.Stats().Requests, "recorded: nothing is sent")
}

// createMarked creates a draft titled title that carries marker, as a
// deposit whose store was lost did before the scan, and returns its
// persistent identifier.
func createMarked(t *testing.T, endpoint, title, marker string) string {
	t.Helper()
	md := string(metadata(title))
	other := `,{"typeName":"otherId","multiple":true,"typeClass":"compound","value":[{"otherIdAgency":{"typeName":"otherIdAgency","multiple":false,"typeClass":"primitive","value":"deposit"},"otherIdValue":{"typeName":"otherIdValue","multiple":false,"typeClass":"primitive","value":"` + marker + `"}}]}`
	i := strings.LastIndex(md, "]}}}}")
	req, err := http.NewRequest(http.MethodPost, endpoint+"/api/dataverses/root/datasets", strings.NewReader(md[:i]+other+md[i:]))
	require.NoError(t, err)
	req.Header.Set("X-Dataverse-key", token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	var created struct {
		Data struct {
			PersistentID string `json:"persistentId"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	return created.Data.PersistentID
}

// A batch deposited under faults (answers lost after commit, 500, 503,
// 429, 504 after a publish; reads faulted too) to a collection whose
// search never shows 13% of its datasets, then its store lost and the
// batch run again under the same faults, until both runs are done: no
// dataset is created twice, none is published again. Before the scan, a
// run like this created about 15 of 116 datasets again.
func TestALostStoreUnderFaultsCreatesNoDatasetTwice(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Unindexed: 0.13, Seed: 9, Faults: "drop=0.08,503=0.05,500=0.05,429=0.05,504=0.05,reads"})
	const n = 116
	items := func(yield func(client.Item) bool) {
		for i := range n {
			if !yield(client.Item{Line: int64(i + 1), Payload: metadata(fmt.Sprint("Chaos ", i))}) {
				return
			}
		}
	}
	runAll := func() {
		t.Helper()
		for round := 1; ; round++ {
			require.LessOrEqual(t, round, 10, "the batch never finished")
			store, err := dedup.Open(f.db)
			require.NoError(t, err)
			c, err := client.New(client.Config{Target: dataverse.Target{Endpoint: f.srv.URL, Collection: "root", Token: token, SettleTime: time.Millisecond},
				Store: store, Retry: fastRetry, Rate: -1})
			require.NoError(t, err)
			sum, err := c.Run(t.Context(), items, client.BatchOptions{Concurrency: 8})
			require.NoError(t, store.Close())
			require.NoError(t, err)
			require.Zero(t, sum.Failed)
			if sum.Unresolved == 0 {
				return
			}
		}
	}
	runAll()
	f.published(n)
	hidden, shown := 0, shownBySearch(t, f.srv.URL)
	for _, ds := range f.srv.Datasets() {
		if !shown[ds.PersistentID] {
			hidden++
		}
	}
	require.NotZero(t, hidden, "some datasets are never indexed")

	require.NoError(t, os.Remove(f.db))
	before := f.srv.Stats()
	runAll()
	after := f.srv.Stats()
	require.Equal(t, before.Datasets, after.Datasets, "no dataset created twice")
	require.Zero(t, after.DuplicateMarkers, "no dataset created twice")
	require.Equal(t, before.Publishes, after.Publishes, "none published again")
	f.published(n)
	require.NotZero(t, after.Faults-before.Faults, "the re-run met faults")
	t.Logf("%d of %d datasets never indexed; the re-run sent %d requests", hidden, n, after.Requests-before.Requests)
}

// shownBySearch are the persistent identifiers the stub's search shows,
// asked until an answer comes through the faults.
func shownBySearch(t *testing.T, endpoint string) map[string]bool {
	t.Helper()
	for try := 0; ; try++ {
		require.Less(t, try, 100, "no search answer came through the faults")
		req, err := http.NewRequest(http.MethodGet, endpoint+"/api/search?q=*&type=dataset&per_page=1000", nil)
		require.NoError(t, err)
		req.Header.Set("X-Dataverse-key", token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // an injected drop or reset
		}
		var page struct {
			Data struct {
				Items []struct {
					GlobalID string `json:"global_id"`
				} `json:"items"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			continue
		}
		shown := map[string]bool{}
		for _, it := range page.Data.Items {
			shown[it.GlobalID] = true
		}
		return shown
	}
}

// Two clients sharing one store deposit the same batch at once: one
// dataset per payload, each file once.
func TestTwoClientsOnOneStoreDepositEachDatasetOnce(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Faults: "drop=0.1,500=0.05,503=0.05", Seed: 3})
	files := []string{f.file("a.txt", "alpha"), f.file("b.txt", "beta")}
	var wg sync.WaitGroup
	errs := make(chan error, 2*6)
	for range 2 {
		wg.Go(func() {
			for i := range 6 {
				_, err := f.tryDeposit(dataverse.Target{Token: token}, fmt.Sprint("Shared ", i), files)
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			require.ErrorIs(t, err, client.ErrUnresolved)
		}
	}
	// A run after both settles whatever either left unresolved.
	for i := range 6 {
		_, err := f.deposit(dataverse.Target{Token: token}, fmt.Sprint("Shared ", i), files)
		require.NoError(t, err)
	}
	f.published(6, files...)
}
