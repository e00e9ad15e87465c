package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

// invenioNewVersion is a line asking for a new version of record, with
// metadata of its own.
func invenioNewVersion(i int, record string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"title":"Series %d, second release","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}},"access":{"record":"public","files":"public"},"deposit":{"new_version_of":%q}}`, i, record)
}

// publishFirstVersions deposits n datasets of one file each and returns their items and results by line.
func publishFirstVersions(t *testing.T, s *repotest.InvenioServer, n int) ([]Item, map[int64]ItemResult) {
	t.Helper()
	its, _ := invenioDatasets(t, t.TempDir(), n, 1)
	c := invenioClient(t, s, openStore(t), invenio.Target{}, fastRetry)
	return its, runUntilSettled(t, c, its, 10)
}

// newVersionLines are one new-version line per first version, numbered
// after them.
func newVersionLines(first map[int64]ItemResult) []Item {
	var its []Item
	for line, r := range first {
		its = append(its, Item{Line: 100 + line, Payload: invenioNewVersion(int(line), r.RecordID)})
	}
	slices.SortFunc(its, func(a, b Item) int { return int(a.Line - b.Line) })
	return its
}

// requireOneNewVersionEach checks the server after the new-version lines
// its settled with results got: each line's marker on exactly one record,
// the second version of its first version's parent, published, carrying
// that marker alone, with the first version's files; and no draft left.
func requireOneNewVersionEach(t *testing.T, s *repotest.InvenioServer, its []Item, first, got map[int64]ItemResult) {
	t.Helper()
	recs := s.Records()
	byID := map[string]repotest.InvenioRecord{}
	for _, r := range recs {
		byID[r.ID] = r
		require.True(t, r.Published, "no draft left: %s (version %d) %v", r.ID, r.Version, r.Identifiers)
	}
	for _, it := range its {
		res := got[it.Line]
		require.NoError(t, res.Err, "line %d", it.Line)
		v2, ok := byID[res.RecordID]
		require.True(t, ok, "line %d: record %s", it.Line, res.RecordID)
		v1 := byID[first[it.Line-100].RecordID]
		require.Equal(t, v1.Parent, v2.Parent, "line %d: a version of the record it names", it.Line)
		require.Equal(t, 2, v2.Version)
		require.Len(t, v2.Identifiers, 1, "line %d: its own marker alone", it.Line)
		require.True(t, strings.HasPrefix(v2.Identifiers[0], "urn:deposit:sha256:"))
		require.NotEqual(t, v1.Identifiers, v2.Identifiers)
		require.Equal(t, v2.DOI, res.Identifier)
		require.Len(t, v2.Files, len(v1.Files), "line %d: the first version's files imported", it.Line)
		for i, f := range v2.Files {
			require.Equal(t, v1.Files[i].Checksum, f.Checksum)
		}
		var carrying int
		for _, r := range recs {
			if slices.Contains(r.Identifiers, v2.Identifiers[0]) {
				carrying++
			}
		}
		require.Equal(t, 1, carrying, "line %d: one record carries its marker", it.Line)
	}
	require.Len(t, recs, len(first)+len(its), "one new version per line, nothing else")
}

// New versions under faults at every step (the resolve, the new draft,
// the marker, the import and the publish, dropped after they commit,
// refused with 5xx, 429, 503; reads failing too): one new version per
// line, each carrying only its own marker and the first version's files;
// replays send nothing and make no version; a lost store, then a re-run,
// makes no version either.
func TestInvenioNewVersionOncePerLineUnderFaults(t *testing.T) {
	for _, spec := range []string{
		"nth=1:drop",
		"nth=1:504",
		"nth=1:500,nth=2:drop",
		"drop=0.1,500=0.05,504=0.08,503=0.05,429=0.04,reset=0.03,reads",
	} {
		t.Run(spec, func(t *testing.T) {
			s := startInvenioStub(t, repotest.InvenioConfig{Faults: spec, Seed: 11, IndexLag: 5 * time.Millisecond})
			_, first := publishFirstVersions(t, s, 6)

			its := newVersionLines(first)
			dir := t.TempDir()
			c := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "a.db")), invenio.Target{}, fastRetry)
			got := runUntilSettled(t, c, its, 12)
			requireOneNewVersionEach(t, s, its, first, got)
			st := s.Stats()
			t.Logf("stats %+v", st)
			require.Positive(t, st.Faults)
			require.Equal(t, int64(len(its)), st.FileImports, "each import took effect once")

			versions := s.Stats().Versions
			for round := range 2 {
				again := runUntilSettled(t, c, its, 1)
				require.Zero(t, s.Stats().Versions-versions, "round %d", round)
				for _, it := range its {
					require.Equal(t, OutcomeReplayed, again[it.Line].Outcome, "round %d line %d", round, it.Line)
					require.Equal(t, got[it.Line].Identifier, again[it.Line].Identifier)
				}
			}

			lost := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "b.db")), invenio.Target{}, fastRetry)
			recovered := runUntilSettled(t, lost, its, 8)
			for _, it := range its {
				require.Equal(t, got[it.Line].Identifier, recovered[it.Line].Identifier, "line %d", it.Line)
			}
			require.Equal(t, versions, s.Stats().Versions, "no new version after replays or a lost store")
			requireOneNewVersionEach(t, s, its, first, got)
		})
	}
}

// invenioSubmission is a line submitting record i to community.
func invenioSubmission(i int, community string) []byte {
	return fmt.Appendf(nil, `{"metadata":{"title":"Series %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-11-30","resource_type":{"id":"dataset"}},"access":{"record":"public","files":"public"},"deposit":{"community":%q}}`, i, community)
}

// Community submissions under faults at every step (the draft, the
// review, the submit, dropped after they commit, 5xx, 429, 503; reads
// too): one review request per line, to its community, submitted once;
// replays send nothing. A curator then accepts one and declines another:
// neither a re-run nor a run on a lost store acts on it.
func TestInvenioCommunitySubmissionOncePerLine(t *testing.T) {
	for _, spec := range []string{
		"nth=1:drop",
		"nth=1:500,nth=2:drop",
		"drop=0.1,500=0.05,504=0.08,503=0.05,429=0.04,reset=0.03,reads",
	} {
		t.Run(spec, func(t *testing.T) {
			communities := []string{"c-1", "c-2"}
			s := startInvenioStub(t, repotest.InvenioConfig{Faults: spec, Seed: 5, IndexLag: 5 * time.Millisecond, Communities: communities})
			var its []Item
			for i := range 6 {
				its = append(its, Item{Line: int64(i + 1), Payload: invenioSubmission(i, communities[i%2])})
			}
			dir := t.TempDir()
			c := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "a.db")), invenio.Target{}, fastRetry)
			got := runUntilSettled(t, c, its, 12)
			require.Positive(t, s.Stats().Faults)

			reqs := requireOneSubmittedEach(t, s, its, got, communities)
			st := s.Stats()
			require.Equal(t, int64(len(its)), st.Submitted, "each request submitted once")
			require.Equal(t, int64(len(its)), st.Reviews, "one review request per line")
			require.Zero(t, st.Published)

			require.NoError(t, s.AcceptReview(reqs[1]))
			require.NoError(t, s.DeclineReview(reqs[2]))
			again := runUntilSettled(t, c, its, 1)
			for _, it := range its {
				require.Equal(t, OutcomeReplayed, again[it.Line].Outcome)
				require.Equal(t, got[it.Line].Identifier, again[it.Line].Identifier)
			}
			lost := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "b.db")), invenio.Target{}, fastRetry)
			recovered := runUntilSettled(t, lost, its, 8)
			for _, it := range its {
				require.NoError(t, recovered[it.Line].Err, "line %d", it.Line)
			}
			after := s.Stats()
			require.Equal(t, st.Submitted, after.Submitted, "nothing submitted again")
			require.Equal(t, st.Reviews, after.Reviews, "no review request made again")
			require.Equal(t, st.Drafts, after.Drafts)
			require.Equal(t, int64(1), after.Published, "the accepted one alone")
		})
	}
}

// requireOneSubmittedEach checks that each line's draft has one review
// request, to its community, submitted, and returns the requests by line.
func requireOneSubmittedEach(t *testing.T, s *repotest.InvenioServer, its []Item, got map[int64]ItemResult, communities []string) map[int64]string {
	t.Helper()
	byRecord := map[string][]repotest.InvenioRequest{}
	for _, q := range s.Requests() {
		byRecord[q.Record] = append(byRecord[q.Record], q)
	}
	require.Len(t, s.Requests(), len(its), "one request per line")
	out := map[int64]string{}
	for _, it := range its {
		r := got[it.Line]
		require.NoError(t, r.Err, "line %d", it.Line)
		require.Equal(t, r.RecordID, r.Identifier, "line %d: the record under review", it.Line)
		qs := byRecord[r.RecordID]
		require.Len(t, qs, 1, "line %d", it.Line)
		require.Equal(t, "submitted", qs[0].Status)
		require.Equal(t, communities[(it.Line-1)%2], qs[0].Community)
		out[it.Line] = qs[0].ID
	}
	return out
}

// Several lines making new versions of one record, in one process and in
// two clients sharing a store, under faults: they run one at a time (the
// record's serial lease), so none adopts another's draft; every line gets
// a version of its own, carrying its marker alone.
func TestInvenioNewVersionsOfOneRecordAreSerialised(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop,500=0.05,503=0.05", Seed: 3, IndexLag: 5 * time.Millisecond})
	_, first := publishFirstVersions(t, s, 1)
	record := first[1].RecordID
	var its []Item
	for i := range 6 {
		its = append(its, Item{Line: int64(i + 1), Payload: invenioNewVersion(i, record)})
	}
	path := filepath.Join(t.TempDir(), "deposit.db")
	a := invenioClient(t, s, openStoreAt(t, path), invenio.Target{}, fastRetry)
	b := invenioClient(t, s, openStoreAt(t, path), invenio.Target{}, fastRetry)
	results := make(chan map[int64]ItemResult, 2)
	errs := make(chan error, 2)
	for _, c := range []*Client{a, b} {
		go func() {
			got := map[int64]ItemResult{}
			for range 12 {
				sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4, OnResult: func(r ItemResult) { got[r.Line] = r }})
				if err != nil || sum.Unresolved == 0 {
					results <- got
					errs <- err
					return
				}
			}
			results <- got
			errs <- fmt.Errorf("still unresolved after 12 runs")
		}()
	}
	var got []map[int64]ItemResult
	for range 2 {
		got = append(got, <-results)
		require.NoError(t, <-errs)
	}
	byMarker := map[string]repotest.InvenioRecord{}
	versions := map[int]bool{}
	for _, r := range s.Records() {
		require.True(t, r.Published, "no draft left: %s", r.ID)
		require.Len(t, r.Identifiers, 1, "record %s carries one marker", r.ID)
		_, twice := byMarker[r.Identifiers[0]]
		require.False(t, twice, "marker %s on two records", r.Identifiers[0])
		byMarker[r.Identifiers[0]] = r
		versions[r.Version] = true
	}
	require.Len(t, byMarker, 1+len(its), "the first version and one per line")
	require.Len(t, versions, 1+len(its), "versions 1 to %d", 1+len(its))
	for _, it := range its {
		require.NoError(t, got[0][it.Line].Err, "line %d", it.Line)
		require.Equal(t, got[0][it.Line].Identifier, got[1][it.Line].Identifier, "line %d: both clients agree", it.Line)
	}
}

// invenioCall sends one authorised JSON request to the stub and returns
// the answer's status and body.
func invenioCall(t *testing.T, s *repotest.InvenioServer, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, s.API+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+invenioTestToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// An open draft of the record's next version that carries another
// deposit's marker, or none while the version it came from carries one,
// is reported and never written to: the line stays unresolved, the draft
// as it was. Once that draft is gone, the line makes its version.
func TestInvenioNewVersionNeverAdoptsAnotherDraft(t *testing.T) {
	for name, identifiers := range map[string]string{
		"another marker": `[{"scheme":"urn","identifier":"urn:deposit:sha256:0000000000000000000000000000000000000000000000000000000000000000"}]`,
		"no marker":      `[]`,
	} {
		t.Run(name, func(t *testing.T) {
			s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 5 * time.Millisecond})
			_, first := publishFirstVersions(t, s, 1)
			record := first[1].RecordID
			status, draft := invenioCall(t, s, http.MethodPost, "/records/"+record+"/versions", "")
			require.Equal(t, http.StatusCreated, status)
			open := draft["id"].(string)
			body := `{"metadata":{"title":"By hand","creators":[{"person_or_org":{"type":"personal","family_name":"Ruiz"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"},"identifiers":` + identifiers + `},"files":{"enabled":true}}`
			status, _ = invenioCall(t, s, http.MethodPut, "/records/"+open+"/draft", body)
			require.Equal(t, http.StatusOK, status)

			its := []Item{{Line: 1, Payload: invenioNewVersion(1, record)}}
			c := invenioClient(t, s, openStore(t), invenio.Target{}, fastRetry)
			var got ItemResult
			sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{OnResult: func(r ItemResult) { got = r }})
			require.NoError(t, err)
			require.Equal(t, 1, sum.Unresolved)
			require.ErrorIs(t, got.Err, ErrUnresolved)
			require.Contains(t, got.Err.Error(), "another deposit's draft, not adopted")
			_, after := invenioCall(t, s, http.MethodGet, "/records/"+open+"/draft", "")
			require.Equal(t, "By hand", after["metadata"].(map[string]any)["title"], "the draft is left as it was")

			status, _ = invenioCall(t, s, http.MethodDelete, "/records/"+open+"/draft", "")
			require.Equal(t, http.StatusNoContent, status)
			again := runUntilSettled(t, c, its, 1)
			requireOneNewVersionEach(t, s, []Item{{Line: 101, Payload: its[0].Payload}}, first, map[int64]ItemResult{101: again[1]})
		})
	}
}
