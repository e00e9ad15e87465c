package client

import (
	"context"
	"crypto/md5"
	"encoding/hex"
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
func invenioClient(t testing.TB, s *repotest.InvenioServer, store Store, tgt Invenio, retry backoff.Policy) *Client {
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
	c := invenioClient(t, s, store, Invenio{}, fastRetry)
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
	require.Contains(t, recs[0].Identifiers, InvenioMarker(key.Key, nil))
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
	c := invenioClient(t, s, store, Invenio{}, fastRetry)
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
	c := invenioClient(t, s, openStore(t), Invenio{MaxFiles: 2}, fastRetry)
	its, _ := invenioDatasets(t, t.TempDir(), 1, 3)
	d := its[0].Dataset
	_, err := c.DepositDataset(context.Background(), d.Dir, d.Metadata, d.Files)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "at most 2")
	require.Zero(t, s.Stats().Requests)
}
