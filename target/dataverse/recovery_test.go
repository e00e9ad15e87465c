package dataverse_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

// A store that is lost (deleted) after a batch was published is recovered
// through the look each deposit makes first: the search finds every
// dataset by its marker, and nothing is created again.
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
	perDataset := float64(f.srv.Stats().Requests-before) / float64(len(titles))
	// The look, the file list, the publish refused as already released,
	// and its check's two reads.
	require.Equal(t, 5.0, perDataset)
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
	f.published(1, files...)
}

// The limit of a lost store: a dataset the search never shows is not
// found by the look, so a run on a new store creates it again. The store
// is what stands between a batch and a second dataset there; the docs say
// so.
func TestALostStoreCannotFindWhatSearchNeverShows(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Unindexed: 1})
	_, err := f.deposit(dataverse.Target{Token: token}, "Hidden", nil)
	require.NoError(t, err)
	require.NoError(t, os.Remove(f.db))
	_, err = f.deposit(dataverse.Target{Token: token}, "Hidden", nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), f.srv.Stats().DuplicateMarkers, "the stated limit")
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
