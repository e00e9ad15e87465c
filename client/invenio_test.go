package client

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

const invenioTestToken = "s3cret"

// invenioSettle is the settle time of these tests: longer than the stub's
// index lag unless a test wants it shorter.
const invenioSettle = 40 * time.Millisecond

func startInvenioStub(t testing.TB, cfg repotest.InvenioConfig) *repotest.InvenioServer {
	t.Helper()
	cfg.Token = invenioTestToken
	s, err := repotest.NewInvenioServer(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// invenioClient is a client of the stub with a store at dbPath.
func invenioClient(t testing.TB, s *repotest.InvenioServer, store Store, tgt invenio.Target, retry backoff.Policy) *Client {
	t.Helper()
	tgt.Endpoint = s.API
	if tgt.SettleTime == 0 {
		tgt.SettleTime = invenioSettle
	}
	if tgt.SearchRate == 0 {
		tgt.SearchRate = -1
	}
	c, err := New(Config{Target: tgt, Store: store, Retry: retry, Rate: -1, HTTPClient: s.Client(),
		Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}})
	require.NoError(t, err)
	return c
}

func openStoreAt(t testing.TB, path string) *dedup.SQLite {
	t.Helper()
	st, err := dedup.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// invenioRecord is a payload InvenioRDM publishes: the four required
// fields.
func invenioRecord(i int) []byte {
	return fmt.Appendf(nil, `{"metadata":{"title":"Series %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-11-30","resource_type":{"id":"dataset"}},"access":{"record":"public","files":"public"}}`, i)
}

// invenioDataset writes n datasets of files files each under dir and
// returns them as batch items, with the MD5 of every file by name.
func invenioDatasets(t testing.TB, dir string, n, files int) ([]Item, map[string]string) {
	t.Helper()
	sums := map[string]string{}
	var its []Item
	for i := range n {
		var names []string
		for j := range files {
			name := fmt.Sprintf("d%d/part %d.csv", i, j)
			data := fmt.Appendf(nil, "dataset %d, file %d\n", i, j)
			require.NoError(t, os.MkdirAll(filepath.Join(dir, fmt.Sprintf("d%d", i)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o600))
			sum := md5.Sum(data)
			sums[name] = "md5:" + hex.EncodeToString(sum[:])
			names = append(names, name)
		}
		its = append(its, Item{Line: int64(i + 1), Dataset: &Dataset{Dir: dir, Metadata: invenioRecord(i), Files: names}})
	}
	return its, sums
}

func seqOf(its []Item) iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for _, it := range its {
			if !yield(it) {
				return
			}
		}
	}
}

// requireOnePublishedEach checks the server against the batch: exactly one
// record per marker, published, holding exactly its files, committed with
// the right checksums, and no other draft.
func requireOnePublishedEach(t testing.TB, s *repotest.InvenioServer, its []Item, sums map[string]string) map[string]repotest.InvenioRecord {
	t.Helper()
	byMarker := map[string][]repotest.InvenioRecord{}
	for _, r := range s.Records() {
		for _, id := range r.Identifiers {
			byMarker[id] = append(byMarker[id], r)
		}
	}
	out := map[string]repotest.InvenioRecord{}
	for m, recs := range byMarker {
		require.Len(t, recs, 1, "records with marker %s", m)
		r := recs[0]
		require.True(t, r.Published, "record %s is published", r.ID)
		out[m] = r
	}
	require.Len(t, out, len(its), "one record per distinct payload, no orphan draft")
	require.Len(t, s.Records(), len(its))
	if sums != nil {
		seen := map[string]bool{}
		for _, r := range out {
			for _, f := range r.Files {
				require.Equal(t, "completed", f.Status)
				require.Equal(t, sums[f.Key], f.Checksum, "file %s of %s", f.Key, r.ID)
				require.False(t, seen[f.Key], "file %s in two records", f.Key)
				seen[f.Key] = true
			}
		}
		require.Len(t, seen, len(sums), "every file is on its record")
	}
	return out
}

func TestInvenioDepositsAndReplays(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	store := openStore(t)
	c := invenioClient(t, s, store, invenio.Target{}, fastRetry)
	ctx := context.Background()

	res, err := c.Deposit(ctx, invenioRecord(1))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	recs := s.Records()
	require.Len(t, recs, 1)
	require.True(t, recs[0].Published)
	require.Equal(t, recs[0].DOI, res.Identifier)
	require.Equal(t, recs[0].ID, res.RecordID)
	key, err := c.Key(invenioRecord(1))
	require.NoError(t, err)
	require.Contains(t, recs[0].Identifiers, invenio.Marker(key.Key, nil))
	require.Equal(t, int64(1), s.Stats().Searches, "the store was new: one scan, and no search without ambiguity")

	again, err := c.Deposit(ctx, invenioRecord(1))
	require.NoError(t, err)
	require.Equal(t, OutcomeReplayed, again.Outcome)
	require.Equal(t, res.Identifier, again.Identifier)
	require.Equal(t, res.RecordID, again.RecordID)
	require.Zero(t, again.Requests)
}

func TestInvenioDatasetUploadsEachFileOnce(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	store := openStore(t)
	c := invenioClient(t, s, store, invenio.Target{}, fastRetry)
	its, sums := invenioDatasets(t, t.TempDir(), 3, 3)
	sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, 3, sum.Created)
	requireOnePublishedEach(t, s, its, sums)
	st := s.Stats()
	require.Equal(t, int64(9), st.Uploads)
	require.Equal(t, int64(9), st.Commits)
	require.Equal(t, int64(3), st.Published)
}

func TestInvenioTooManyFilesIsInvalidBeforeAnyRequest(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	c := invenioClient(t, s, openStore(t), invenio.Target{MaxFiles: 2}, fastRetry)
	its, _ := invenioDatasets(t, t.TempDir(), 1, 3)
	d := its[0].Dataset
	_, err := c.DepositDataset(context.Background(), d.Dir, d.Metadata, d.Files)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "at most 2")
	require.Zero(t, s.Stats().Requests)
}

// runUntilSettled runs the batch again while items are unresolved, as a
// user would, at most rounds times, and returns every item's last result
// by line.
func runUntilSettled(t testing.TB, c *Client, its []Item, rounds int) map[int64]ItemResult {
	t.Helper()
	last := map[int64]ItemResult{}
	for round := range rounds {
		sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4, OnResult: func(r ItemResult) { last[r.Line] = r }})
		require.NoError(t, err)
		if sum.Unresolved == 0 {
			require.Zero(t, sum.Failed+sum.Invalid, "round %d: %+v", round, sum)
			return last
		}
	}
	t.Fatalf("items still unresolved after %d rounds", rounds)
	return nil
}

// Faults at every step: the create, each file's init, upload and commit,
// and the publish are dropped after they commit, refused with 5xx, 429 and
// 503, and a publish is answered 504 after it went through; reads fail too.
// The server ends with exactly one published record per dataset, each with
// exactly its files, and no other draft.
func TestInvenioChaosAtEveryStep(t *testing.T) {
	for _, spec := range []string{
		"nth=1:drop",
		"nth=1:504",
		"drop=0.1,500=0.05,504=0.08,503=0.05,429=0.04,reset=0.03,reads",
	} {
		t.Run(spec, func(t *testing.T) {
			s := startInvenioStub(t, repotest.InvenioConfig{Faults: spec, Seed: 7, IndexLag: 10 * time.Millisecond})
			store := openStore(t)
			c := invenioClient(t, s, store, invenio.Target{}, fastRetry)
			its, sums := invenioDatasets(t, t.TempDir(), 12, 2)
			first := runUntilSettled(t, c, its, 10)
			byMarker := requireOnePublishedEach(t, s, its, sums)
			require.Positive(t, s.Stats().Faults)

			ids := map[string]bool{}
			for _, r := range byMarker {
				ids[r.DOI] = true
			}
			creates := s.Stats().Drafts
			// The first replay searches again for the drafts created after
			// a search had found nothing; the second sends nothing. Both
			// run once the index has caught up with the last publish: a
			// search before that finds nothing and proves nothing, so the
			// note would stay for the next run.
			time.Sleep(5 * 10 * time.Millisecond)
			for round := range 2 {
				var got []ItemResult
				sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4, OnResult: func(r ItemResult) {
					got = append(got, r)
				}})
				require.NoError(t, err)
				for _, r := range got {
					require.Equal(t, OutcomeReplayed, r.Outcome)
					require.Equal(t, first[r.Line].Identifier, r.Identifier, "line %d", r.Line)
					require.Equal(t, first[r.Line].RecordID, r.RecordID, "line %d", r.Line)
					require.True(t, ids[r.Identifier], "identifier %s is a published record's DOI", r.Identifier)
				}
				require.Equal(t, len(its), sum.Replayed)
				if round == 1 {
					require.Zero(t, sum.Requests)
				}
			}
			require.Equal(t, creates, s.Stats().Drafts)
		})
	}
}

// The store lost after a finished batch: the next run scans the user's
// records once, seeds the store, creates nothing and recalls every
// identifier. With a key secret the marker is the HMAC form, and the same
// holds.
func TestInvenioLostStoreCreatesNothingNew(t *testing.T) {
	for _, secret := range []string{"", "k3y"} {
		t.Run("secret="+secret, func(t *testing.T) {
			s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 10 * time.Millisecond})
			tgt := invenio.Target{KeySecret: []byte(secret)}
			dir := t.TempDir()
			its, _ := invenioDatasets(t, dir, 6, 2)
			its = append(its, Item{Line: 7, Payload: invenioRecord(7)})
			first := runUntilSettled(t, invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "a.db")), tgt, fastRetry), its, 3)
			before := s.Stats()
			for _, r := range s.Records() {
				for _, id := range r.Identifiers {
					if secret != "" {
						require.Contains(t, id, "hmac-sha256:")
					}
				}
			}

			lost := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "b.db")), tgt, fastRetry)
			var got []ItemResult
			sum, err := lost.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4, OnResult: func(r ItemResult) {
				got = append(got, r)
			}})
			require.NoError(t, err)
			for _, r := range got {
				require.NoError(t, r.Err)
				require.Equal(t, first[r.Line].Identifier, r.Identifier, "line %d", r.Line)
				require.Equal(t, first[r.Line].RecordID, r.RecordID, "line %d", r.Line)
			}
			require.Equal(t, len(its), sum.Replayed)
			after := s.Stats()
			require.Equal(t, before.Drafts, after.Drafts, "nothing new created")
			require.Equal(t, before.Uploads, after.Uploads)
			require.Equal(t, before.Published, after.Published)
			require.Equal(t, int64(1), after.Searches-before.Searches, "one page of scan, no per-key search")
			require.Zero(t, after.FallbackQueries)
		})
	}
}

// A store lost while a dataset was half uploaded: its draft is found by
// the scan, and every file step looks at the file's entry before sending
// anything, so a committed file is not uploaded again.
func TestInvenioLostStoreResumesAHalfUploadedDraft(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 5 * time.Millisecond})
	dir := t.TempDir()
	its, sums := invenioDatasets(t, dir, 1, 3)
	c := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "a.db")), invenio.Target{}, fastRetry)
	// The first run ends once the first file is committed (the only POST
	// answered 200), as a kill would end it.
	ctx, cancel := context.WithCancel(context.Background())
	c.hooks.OnRequest = func(e RequestEvent) {
		if e.Method == http.MethodPost && e.Status == http.StatusOK {
			cancel()
		}
	}
	d := its[0].Dataset
	_, err := c.DepositDataset(ctx, d.Dir, d.Metadata, d.Files)
	require.Error(t, err)
	before := s.Stats()
	require.Equal(t, int64(1), before.Drafts)
	require.Equal(t, int64(1), before.Commits)
	require.Zero(t, before.Published)

	lost := invenioClient(t, s, openStoreAt(t, filepath.Join(dir, "b.db")), invenio.Target{}, fastRetry)
	res, err := lost.DepositDataset(context.Background(), d.Dir, d.Metadata, d.Files)
	require.NoError(t, err)
	require.True(t, res.Recovered)
	requireOnePublishedEach(t, s, its, sums)
	after := s.Stats()
	require.Equal(t, int64(1), after.Drafts, "the draft was found, not created again")
	require.Equal(t, int64(3), after.Commits)
	require.Equal(t, int64(3), after.Uploads, "no file uploaded twice")
}

// A search index that lags more than the settle time hides the draft a
// dropped create made: the client creates a second one, and the next run
// finds both by the marker and reports the conflict instead of picking one.
// The lag is ten times the settle time and long enough that the first run's
// search, however slow the machine, comes before the index shows the draft.
func TestInvenioDuplicateFromIndexLagIsReportedByTheNextRun(t *testing.T) {
	const lag = time.Second
	s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop", IndexLag: lag})
	store := openStore(t)
	c := invenioClient(t, s, store, invenio.Target{SettleTime: lag / 10}, fastRetry)
	ctx := context.Background()

	res, err := c.Deposit(ctx, invenioRecord(3))
	require.NoError(t, err, "the first run cannot see the duplicate")
	require.Equal(t, int64(2), s.Stats().Drafts)

	time.Sleep(lag) // the index catches up
	again := invenioClient(t, s, store, invenio.Target{SettleTime: lag / 10}, fastRetry)
	_, err = again.Deposit(ctx, invenioRecord(3))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "2 records carry the marker")
	var ids []string
	for _, r := range s.Records() {
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		require.ErrorContains(t, err, id)
	}
	require.Contains(t, ids, res.RecordID)
	require.Equal(t, int64(2), s.Stats().Drafts, "nothing resolved by creating or deleting")

	// Reported on every run until the surplus draft is deleted; then a
	// deliberate retry settles it.
	_, err = again.Deposit(ctx, invenioRecord(3))
	require.ErrorIs(t, err, ErrTerminal)
	for _, r := range s.Records() {
		if !r.Published {
			req, _ := http.NewRequest(http.MethodDelete, s.API+"/records/"+r.ID+"/draft", nil)
			req.Header.Set("Authorization", "Bearer "+invenioTestToken)
			resp, err := s.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)
		}
	}
	fixed, err := New(Config{Target: invenio.Target{Endpoint: s.API, SettleTime: lag / 10, SearchRate: -1}, Store: store, Retry: fastRetry,
		Rate: -1, HTTPClient: s.Client(), RetryFailed: true, Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}})
	require.NoError(t, err)
	out, err := fixed.Deposit(ctx, invenioRecord(3))
	require.NoError(t, err)
	require.Equal(t, res.Identifier, out.Identifier)
}

// A run killed after sending the create, before recording its answer, left
// the draft's intent pending: the next run finds the draft by its marker
// instead of creating a second one.
func TestInvenioResumesAKilledCreateByItsMarker(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop", IndexLag: 10 * time.Millisecond})
	store := openStore(t)
	one := backoff.Policy{Base: time.Millisecond, MaxAttempts: 1, MaxElapsed: time.Second}
	c := invenioClient(t, s, store, invenio.Target{SettleTime: time.Millisecond}, one)
	ctx, cancel := context.WithCancel(context.Background())
	// The drop ends the first run: the context is cancelled as the check
	// starts, as a kill would end it.
	c.hooks.OnRequest = func(e RequestEvent) {
		if e.Method == http.MethodPost && e.Status == 0 {
			cancel()
		}
	}
	_, err := c.Deposit(ctx, invenioRecord(4))
	require.Error(t, err)
	require.Equal(t, int64(1), s.Stats().Drafts)
	key, err := c.Key(invenioRecord(4))
	require.NoError(t, err)
	rec, err := store.Lookup(context.Background(), invenioStoreTarget(s.API, "-draft"), key.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)

	res, err := invenioClient(t, s, store, invenio.Target{}, fastRetry).Deposit(context.Background(), invenioRecord(4))
	require.NoError(t, err)
	require.True(t, res.Recovered)
	require.Equal(t, int64(1), s.Stats().Drafts, "no second create")
	require.Equal(t, int64(1), s.Stats().Published)
}

// 429s of the server's rate limit are waited out until X-RateLimit-Reset.
func TestInvenioWaitsOutTheRateLimit(t *testing.T) {
	// A window of a second: on a loaded machine five requests still fall
	// in one, so the limit is met (300 ms was not always).
	s := startInvenioStub(t, repotest.InvenioConfig{Limit: 5, SearchLimit: 1, Window: time.Second})
	retry := backoff.Policy{Base: time.Millisecond, Cap: 3 * time.Second, MaxAttempts: 8, MaxElapsed: time.Minute}
	c := invenioClient(t, s, openStore(t), invenio.Target{}, retry)
	var its []Item
	for i := range 4 {
		its = append(its, Item{Line: int64(i + 1), Payload: invenioRecord(i)})
	}
	runUntilSettled(t, c, its, 1)
	requireOnePublishedEach(t, s, its, nil)
	require.Positive(t, s.Stats().RateLimited)
}

// Two drafts found with one marker in a lost store's scan are a conflict:
// reported, nothing created or published.
func TestInvenioLostStoreWithTwoDraftsOfOneMarkerIsAConflict(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	c := invenioClient(t, s, openStore(t), invenio.Target{}, fastRetry)
	k, err := c.Key(invenioRecord(5))
	require.NoError(t, err)
	body, err := invenioDraftBody(t, s.API, k)
	require.NoError(t, err)
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, s.API+"/records", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+invenioTestToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	_, err = c.Deposit(context.Background(), invenioRecord(5))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "2 records carry the marker")
	require.Equal(t, int64(2), s.Stats().Drafts)
	require.Zero(t, s.Stats().Published)
}

// A payload InvenioRDM accepts as a draft but refuses to publish fails the
// deposit with the server's validation messages, and the failure is
// answered from the store on a re-run, without a second draft.
func TestInvenioPublishRefusalFailsOnceAndKeepsTheDraft(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	c := invenioClient(t, s, openStore(t), invenio.Target{}, fastRetry)
	payload := []byte(`{"title":"no creators"}`)
	_, err := c.Deposit(context.Background(), payload)
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "metadata.creators")
	require.ErrorContains(t, err, "the draft stays")
	_, err = c.Deposit(context.Background(), payload)
	require.ErrorIs(t, err, ErrTerminal)
	require.Equal(t, int64(1), s.Stats().Drafts)
}

// --no-publish stops at drafts with their files; a later run that
// publishes finds them done and only publishes.
func TestInvenioDraftsFirstPublishLater(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	store := openStore(t)
	its, sums := invenioDatasets(t, t.TempDir(), 2, 2)
	drafts := runUntilSettled(t, invenioClient(t, s, store, invenio.Target{NoPublish: true}, fastRetry), its, 1)
	require.Zero(t, s.Stats().Published)
	for _, r := range drafts {
		require.Equal(t, r.RecordID, r.Identifier, "a draft's identifier is its record id")
	}
	before := s.Stats()
	published := runUntilSettled(t, invenioClient(t, s, store, invenio.Target{}, fastRetry), its, 1)
	requireOnePublishedEach(t, s, its, sums)
	after := s.Stats()
	require.Equal(t, before.Drafts, after.Drafts)
	require.Equal(t, before.Uploads, after.Uploads)
	for line, r := range published {
		require.Equal(t, drafts[line].RecordID, r.RecordID)
		require.NotEqual(t, r.RecordID, r.Identifier, "now a DOI")
	}
}

// Two processes sharing one store deposit the same datasets at once, with
// faults at every step. InvenioRDM dedups nothing, so only the key's lease
// keeps a deposit in one of them: the server ends with one published record
// per dataset, exactly its files, and no second draft; a later run replays
// everything.
func TestInvenioTwoProcessesOnOneStoreCreateEachRecordOnce(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{Faults: "drop=0.08,500=0.05,504=0.05,503=0.05", Seed: 3,
		IndexLag: 2 * time.Millisecond, Latency: time.Millisecond})
	path := filepath.Join(t.TempDir(), "shared.db")
	its, sums := invenioDatasets(t, t.TempDir(), 24, 2)
	done := make(chan error, 2)
	for range 2 {
		c := invenioClient(t, s, openStoreAt(t, path), invenio.Target{}, fastRetry)
		go func() {
			for range 10 {
				sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4})
				if err != nil || sum.Unresolved == 0 {
					done <- err
					return
				}
			}
			done <- errors.New("items still unresolved after 10 rounds")
		}()
	}
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	requireOnePublishedEach(t, s, its, sums)
	require.Equal(t, int64(len(its)), s.Stats().Drafts, "one draft per dataset, none twice")

	later := invenioClient(t, s, openStoreAt(t, path), invenio.Target{}, fastRetry)
	sum, err := later.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4})
	require.NoError(t, err)
	require.Equal(t, len(its), sum.Replayed)
}

// A publish answered 404 (the draft was published meanwhile, by another
// process) is confirmed by reading the record back, not failed.
func TestInvenioPublishOfAPublishedDraftIsConfirmed(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	store := openStore(t)
	c := invenioClient(t, s, store, invenio.Target{NoPublish: true}, fastRetry)
	res, err := c.Deposit(context.Background(), invenioRecord(8))
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodPost, s.API+"/records/"+res.RecordID+"/draft/actions/publish", nil)
	req.Header.Set("Authorization", "Bearer "+invenioTestToken)
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode)

	out, err := invenioClient(t, s, store, invenio.Target{}, fastRetry).Deposit(context.Background(), invenioRecord(8))
	require.NoError(t, err)
	require.Equal(t, OutcomeExisting, out.Outcome)
	require.Equal(t, s.Records()[0].DOI, out.Identifier)
	require.Equal(t, int64(1), s.Stats().Published)
}
