package dataverse_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

// labID is the identity of objMetadata's lines: the lab's otherId, read
// in the dataset's metadata.
const labID = "/datasetVersion/metadataBlocks/citation/fields/5/value/0/otherIdValue/value"

// objMetadata is metadata(title) with the lab's own otherId, id.
func objMetadata(id, title string) []byte {
	md := bytes.TrimSuffix(metadata(title), []byte("]}}}}"))
	return append(md, fmt.Sprintf(`,{"typeName":"otherId","multiple":true,"typeClass":"compound","value":[{"otherIdAgency":{"typeName":"otherIdAgency","multiple":false,"typeClass":"primitive","value":"lab"},"otherIdValue":{"typeName":"otherIdValue","multiple":false,"typeClass":"primitive","value":%q}}]}]}}}}`, id)...)
}

// objectClient is a client with the lab's identity on f's store.
func (f *fixture) objectClient() *client.Client {
	f.t.Helper()
	store, err := dedup.Open(f.db)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { store.Close() })
	c, err := client.New(client.Config{Target: dataverse.Target{Endpoint: f.srv.URL, Collection: "root", Token: token, SettleTime: 1},
		Store: store, Retry: fastRetry, Rate: -1, Identity: []string{labID}})
	require.NoError(f.t, err)
	return c
}

// A dataset named by an identity: a metadata correction is a minor
// version (1.1), a change of files a major one (2.0) that replaces,
// adds and deletes only what differs by checksum; an old line is stale
// with no request; a lost store, the last line again, writes nothing.
func TestADatasetObjectIsUpdatedAsMinorAndMajorVersions(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{Faults: "drop=0.15,503=0.1,reads", Seed: 3})
	f.file("a.txt", "one")
	f.file("b.txt", "two")
	c := f.objectClient()
	first, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches"), []string{"a.txt", "b.txt"})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeCreated, first.Outcome)
	pid := first.Identifier
	ds := f.srv.Datasets()[0]
	require.Contains(t, ds.OtherIDs, dataverse.Marker(first.Object))
	require.Contains(t, ds.OtherIDs, dataverse.VersionMarker(first.Key))

	fixed, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches, corrected"), []string{"a.txt", "b.txt"})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeUpdated, fixed.Outcome)
	require.Equal(t, pid, fixed.Identifier, "the same dataset")
	require.Equal(t, "1.1", fixed.RecordID, "a minor version")

	f.file("a.txt", "one, again")
	f.file("c.txt", "three")
	before := f.srv.Stats()
	changed, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches, corrected"), []string{"a.txt", "c.txt"})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeUpdated, changed.Outcome)
	require.Equal(t, "2.0", changed.RecordID, "a major version")
	after := f.srv.Stats()
	require.Equal(t, int64(1), after.Replaced-before.Replaced, "a.txt replaced")
	require.Equal(t, int64(1), after.Files-before.Files, "c.txt added, b.txt not sent again")
	require.Equal(t, int64(1), after.Deleted-before.Deleted, "b.txt deleted")
	require.Zero(t, after.DuplicateFiles)
	require.Zero(t, after.Drafts)
	require.NotZero(t, after.Faults, "faults were injected")

	ds = f.srv.Datasets()[0]
	require.Len(t, f.srv.Datasets(), 1)
	require.Equal(t, []string{"1.0", "1.1", "2.0"}, ds.Versions)
	require.Equal(t, "Finches, corrected", ds.Title)
	require.Len(t, ds.Files, 2)
	require.Contains(t, ds.OtherIDs, dataverse.VersionMarker(changed.Key))
	require.NotContains(t, ds.OtherIDs, dataverse.VersionMarker(fixed.Key), "one version marker")

	requests := f.srv.Stats().Requests
	f.file("a.txt", "one")
	f.file("b.txt", "two")
	old, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches"), []string{"a.txt", "b.txt"})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeStale, old.Outcome)
	require.Equal(t, requests, f.srv.Stats().Requests, "a stale line sends nothing")

	// The store lost: the last line again writes nothing.
	f.file("a.txt", "one, again")
	f.db += ".lost"
	c = f.objectClient()
	before = f.srv.Stats()
	again, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches, corrected"), []string{"a.txt", "c.txt"})
	require.NoError(t, err)
	require.Contains(t, []client.Outcome{client.OutcomeExisting, client.OutcomeReplayed}, again.Outcome)
	require.Equal(t, pid, again.Identifier)
	after = f.srv.Stats()
	require.Equal(t, before.Files+before.Replaced+before.Deleted+before.DraftWrites+before.Publishes+before.Datasets,
		after.Files+after.Replaced+after.Deleted+after.DraftWrites+after.Publishes+after.Datasets, "no write")
}

// putDraft writes a draft of the dataset pid by hand, with otherIds.
func putDraft(t *testing.T, srv *repotest.DataverseServer, pid, title string, otherIDs ...string) {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal(metadata(title), &doc))
	version := doc["datasetVersion"].(map[string]any)
	cit := version["metadataBlocks"].(map[string]any)["citation"].(map[string]any)
	var values []any
	for _, v := range otherIDs {
		values = append(values, map[string]any{"otherIdValue": map[string]any{"typeName": "otherIdValue", "value": v}})
	}
	cit["fields"] = append(cit["fields"].([]any), map[string]any{"typeName": "otherId", "multiple": true, "typeClass": "compound", "value": values})
	body, _ := json.Marshal(version)
	req, _ := http.NewRequest(http.MethodPut, srv.URL+"/api/datasets/:persistentId/versions/:draft?persistentId="+url.QueryEscape(pid), bytes.NewReader(body))
	req.Header.Set("X-Dataverse-key", token)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// A draft someone opened from the release (its markers the release's)
// stops the update, which writes nothing; a draft of ours for another
// version (an update that never finished) is deleted and the update
// made afresh.
func TestAnUpdateStopsAtAForeignDraftAndDiscardsAStaleOneOfOurs(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{})
	f.file("a.txt", "one")
	c := f.objectClient()
	first, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches"), []string{"a.txt"})
	require.NoError(t, err)
	pid := first.Identifier
	putDraft(t, f.srv, pid, "Someone's edit", "LAB-1", dataverse.Marker(first.Object), dataverse.VersionMarker(first.Key))

	before := f.srv.Stats()
	_, err = c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches, corrected"), []string{"a.txt"})
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "draft version this deposit did not make")
	after := f.srv.Stats()
	require.Equal(t, before.DraftWrites, after.DraftWrites, "not overwritten")
	require.Equal(t, before.Publishes, after.Publishes)
	require.Equal(t, "Someone's edit", f.srv.Datasets()[0].Title)

	putDraft(t, f.srv, pid, "An update never finished", "LAB-1", dataverse.Marker(first.Object), dataverse.VersionMarker("0123"))
	res, err := c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", "Finches, again"), []string{"a.txt"})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeUpdated, res.Outcome)
	require.Equal(t, "1.1", res.RecordID)
	require.Equal(t, int64(1), f.srv.Stats().Discarded)
	require.Equal(t, "Finches, again", f.srv.Datasets()[0].Title)
}

// An update whose publication outlasts the run (accepted, its lock still
// held) is unresolved; once Dataverse finishes it, the next run finds the
// version published, and settles the update's rows instead of leaving
// them pending: its result names the version.
func TestAnUpdateLeftPublishingIsSettledByTheNextRun(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{PublishLag: 300 * time.Millisecond})
	f.file("a.txt", "one")
	store, err := dedup.Open(f.db)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	c, err := client.New(client.Config{Target: dataverse.Target{Endpoint: f.srv.URL, Collection: "root", Token: token, SettleTime: 1, LockWait: 20 * time.Millisecond},
		Store: store, Retry: fastRetry, Rate: -1, Identity: []string{labID}})
	require.NoError(t, err)
	deposit := func(title string) (client.Result, error) {
		return c.DepositDataset(t.Context(), f.dir, objMetadata("LAB-1", title), []string{"a.txt"})
	}
	for n := 0; ; n++ { // the create, past its own publication's lock
		require.Less(t, n, 100)
		if _, err := deposit("Finches"); err == nil {
			break
		}
	}
	_, err = deposit("Finches, corrected")
	require.ErrorIs(t, err, client.ErrUnresolved, "accepted, not yet settled")
	for n := 0; f.srv.Datasets()[0].VersionState != "RELEASED"; n++ {
		require.Less(t, n, 200, "the stub never released the version")
		time.Sleep(10 * time.Millisecond)
	}
	before := f.srv.Stats()
	res, err := deposit("Finches, corrected")
	require.NoError(t, err)
	require.Equal(t, client.OutcomeUpdated, res.Outcome)
	require.Equal(t, "1.1", res.RecordID)
	require.Equal(t, before.Publishes, f.srv.Stats().Publishes, "not published again")
	d, err := dataverse.Target{Endpoint: f.srv.URL, Collection: "root"}.Driver()
	require.NoError(t, err)
	for _, target := range d.StepTargets() {
		for rec, err := range store.List(t.Context(), target, dedup.StatePending) {
			require.NoError(t, err)
			require.Failf(t, "a row left pending", "%s %s", rec.Target, rec.Key)
		}
	}
}
