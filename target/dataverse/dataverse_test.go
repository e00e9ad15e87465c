package dataverse_test

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

var fastRetry = backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 6, MaxElapsed: 20 * time.Second}

const token = "secret-token"

// metadata is a dataset in Dataverse's native form with the five required
// citation fields, titled title.
func metadata(title string) []byte {
	return []byte(fmt.Sprintf(`{"datasetVersion":{"license":{"name":"CC0 1.0"},"metadataBlocks":{"citation":{"fields":[
{"typeName":"title","multiple":false,"typeClass":"primitive","value":%q},
{"typeName":"author","multiple":true,"typeClass":"compound","value":[{"authorName":{"typeName":"authorName","multiple":false,"typeClass":"primitive","value":"Finch, Fiona"}}]},
{"typeName":"datasetContact","multiple":true,"typeClass":"compound","value":[{"datasetContactEmail":{"typeName":"datasetContactEmail","multiple":false,"typeClass":"primitive","value":"finch@example.edu"}}]},
{"typeName":"dsDescription","multiple":true,"typeClass":"compound","value":[{"dsDescriptionValue":{"typeName":"dsDescriptionValue","multiple":false,"typeClass":"primitive","value":"Birds."}}]},
{"typeName":"subject","multiple":true,"typeClass":"controlledVocabulary","value":["Other"]}]}}}}`, title))
}

// fixture is a stub server, a store file and a folder of files.
type fixture struct {
	t     *testing.T
	srv   *repotest.DataverseServer
	db    string
	dir   string
	files map[string][]byte
}

func newFixture(t *testing.T, cfg repotest.DataverseConfig) *fixture {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = token
	}
	srv, err := repotest.NewDataverseServer(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	f := &fixture{t: t, srv: srv, db: filepath.Join(t.TempDir(), "deposit.db"), dir: t.TempDir(), files: map[string][]byte{}}
	return f
}

// file writes a file of the dataset folder.
func (f *fixture) file(name, content string) string {
	p := filepath.Join(f.dir, filepath.FromSlash(name))
	require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(f.t, os.WriteFile(p, []byte(content), 0o644))
	f.files[name] = []byte(content)
	return name
}

// client is a client on the fixture's store with target t (Endpoint and
// Token set when empty).
func (f *fixture) client(t dataverse.Target) *client.Client {
	f.t.Helper()
	if t.Endpoint == "" {
		t.Endpoint = f.srv.URL
	}
	if t.Collection == "" {
		t.Collection = "root"
	}
	if t.Token == "" {
		t.Token = token
	}
	if t.SettleTime == 0 {
		t.SettleTime = time.Millisecond
	}
	store, err := dedup.Open(f.db)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { store.Close() })
	c, err := client.New(client.Config{Target: t, Store: store, Retry: fastRetry, Rate: -1})
	require.NoError(f.t, err)
	return c
}

// published checks that the stub holds exactly one released dataset per
// title, each with every file once with the right bytes.
func (f *fixture) published(n int, files ...string) []repotest.DataverseDataset {
	f.t.Helper()
	all := f.srv.Datasets()
	require.Len(f.t, all, n, "one dataset per payload")
	for _, ds := range all {
		require.Equal(f.t, "RELEASED", ds.VersionState, ds.PersistentID)
		require.Len(f.t, ds.Files, len(files), "each file once: %+v", ds.Files)
		for i, name := range files {
			sum := md5.Sum(f.files[name])
			dir, base := path.Split(name)
			require.Equal(f.t, base, ds.Files[i].Label)
			require.Equal(f.t, strings.TrimSuffix(dir, "/"), ds.Files[i].DirectoryLabel)
			require.Equal(f.t, hex.EncodeToString(sum[:]), ds.Files[i].MD5, name)
		}
	}
	s := f.srv.Stats()
	require.Zero(f.t, s.DuplicateMarkers)
	require.Zero(f.t, s.DuplicateFiles)
	require.Zero(f.t, s.RenamedFiles)
	return all
}

// A dataset with two files, one in a folder, is created, its files added
// and published; a replay is answered from the store with no request.
func TestADatasetWithFilesIsPublishedOnceAndReplayedFromTheStore(t *testing.T) {
	f := newFixture(t, repotest.DataverseConfig{})
	files := []string{f.file("data.csv", "a,b\n1,2\n"), f.file("docs/readme.txt", "read me")}
	c := f.client(dataverse.Target{})
	res, err := c.DepositDataset(t.Context(), f.dir, metadata("Finches"), files)
	require.NoError(t, err)
	require.Equal(t, client.OutcomeCreated, res.Outcome)
	all := f.published(1, files...)
	require.Equal(t, all[0].PersistentID, res.Identifier)
	require.Contains(t, all[0].OtherIDs, dataverse.Marker(res.Key))

	before := f.srv.Stats().Requests
	again, err := c.DepositDataset(t.Context(), f.dir, metadata("Finches"), files)
	require.NoError(t, err)
	require.Equal(t, client.OutcomeReplayed, again.Outcome)
	require.Equal(t, res.Identifier, again.Identifier)
	require.Equal(t, before, f.srv.Stats().Requests, "a replay sends nothing")
}
