package client

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/s3"
)

// datasetDir writes files (path -> content) under a new directory.
func datasetDir(t *testing.T, files map[string]string) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		names = append(names, name)
	}
	return dir, names
}

func TestS3DatasetOnVersity(t *testing.T) {
	t.Parallel()
	s := peertest.Versity(t)
	bucket := s.Endpoint + "/" + s.Bucket
	files := map[string]string{
		"data/temperature.csv":   "t,c\n0,12.5\n1,12.7\n",
		"dir with space/é+x.txt": "odd names are escaped the way SigV4 signs them",
		"README":                 strings.Repeat("large enough to stream. ", 4096),
	}
	dir, names := datasetDir(t, files)
	ctx := context.Background()

	c := peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)})
	res, err := c.DepositDataset(ctx, dir, []byte(`{"title":"Reef"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, bucket+"/"+res.Key+".json", res.Identifier)
	require.Equal(t, len(files)+1, res.Requests)

	signed := signedClient(versityAWS(s))
	for name, content := range files {
		status, body := get(t, signed, s3ObjectURL(t, bucket, res.Key, name))
		require.Equal(t, http.StatusOK, status, name)
		require.Equal(t, content[:min(len(content), maxAnswerBytes)], body, name)
	}
	status, doc := get(t, signed, res.Identifier)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, doc, `"metadata":{"title":"Reef"}`)

	again, err := c.DepositDataset(ctx, dir, []byte(`{"title":"Reef"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeReplayed, again.Outcome)
	require.Equal(t, 0, again.Requests)

	fresh, err := peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)}).DepositDataset(ctx, dir, []byte(`{"title":"Reef"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeExisting, fresh.Outcome)
	require.Equal(t, res.Identifier, fresh.Identifier)
}

// requireContentLength checks that r was sent with Content-Length: n and
// without chunked encoding, the only framing S3 accepts for a PutObject.
func requireContentLength(t *testing.T, n string, r *http.Request) {
	t.Helper()
	require.Equal(t, n, r.Header.Get("Content-Length"), "%s %s", r.Method, r.URL.Path)
	require.Empty(t, r.TransferEncoding, "%s %s", r.Method, r.URL.Path)
}

func TestS3DatasetSendsAnEmptyFileWithContentLength(t *testing.T) {
	dir, names := datasetDir(t, map[string]string{"empty.txt": "", "hi.txt": "hi\n"})
	t.Run("every PutObject carries its length, 0 included", func(t *testing.T) {
		srv := newStorageServer(t, storageAnswer{status: 200})
		c := storageClient(t, srv.URL+"/bucket", protocol.S3)
		res, err := c.DepositDataset(context.Background(), dir, []byte(`{"t":1}`), names)
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, res.Outcome)
		reqs := srv.requests()
		require.Len(t, reqs, 3)
		require.Equal(t, "/bucket/"+res.Key+"/empty.txt", reqs[0].URL.Path)
		requireContentLength(t, "0", reqs[0])
		require.Empty(t, srv.bodies[0])
		require.Equal(t, emptySHA256Hex, reqs[0].Header.Get("X-Amz-Content-Sha256"))
		requireContentLength(t, "3", reqs[1])
	})
	t.Run("a retry of the empty file carries it again", func(t *testing.T) {
		srv := newStorageServer(t, s3Err(503, "SlowDown", "slow down"), storageAnswer{status: 200})
		c := storageClient(t, srv.URL+"/bucket", protocol.S3)
		res, err := c.DepositDataset(context.Background(), dir, []byte(`{"t":1}`), names)
		require.NoError(t, err)
		require.Equal(t, 1, res.Retries)
		reqs := srv.requests()
		require.Equal(t, reqs[0].URL.Path, reqs[1].URL.Path)
		requireContentLength(t, "0", reqs[0])
		requireContentLength(t, "0", reqs[1])
	})
}

// The dataset of the issue that found the empty-file bug: versitygw, like
// AWS, refuses a chunked PutObject without a length (411
// MissingContentLength).
func TestS3DatasetWithAnEmptyFileOnVersity(t *testing.T) {
	t.Parallel()
	s := peertest.Versity(t)
	bucket := s.Endpoint + "/" + s.Bucket
	files := map[string]string{"empty.txt": "", "hi.txt": "hi\n"}
	dir, names := datasetDir(t, files)
	ctx := context.Background()

	c := peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)})
	res, err := c.DepositDataset(ctx, dir, []byte(`{"t":1}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, 3, res.Requests)

	signed := signedClient(versityAWS(s))
	for name, content := range files {
		status, body := get(t, signed, s3ObjectURL(t, bucket, res.Key, name))
		require.Equal(t, http.StatusOK, status, name)
		require.Equal(t, content, body, name)
	}

	again, err := c.DepositDataset(ctx, dir, []byte(`{"t":1}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeReplayed, again.Outcome)
	require.Equal(t, 0, again.Requests)
}

func TestS3DatasetWritesTheDocumentLast(t *testing.T) {
	dir, names := datasetDir(t, map[string]string{"a.txt": "a", "b/c.txt": "c"})
	t.Run("files first, then the document", func(t *testing.T) {
		srv := newStorageServer(t, storageAnswer{status: 200})
		c := storageClient(t, srv.URL+"/bucket", protocol.S3)
		res, err := c.DepositDataset(context.Background(), dir, []byte(`{}`), names)
		require.NoError(t, err)
		var paths []string
		for _, r := range srv.requests() {
			paths = append(paths, r.URL.Path)
		}
		p := "/bucket/" + res.Key
		require.Equal(t, []string{p + "/a.txt", p + "/b/c.txt", p + ".json"}, paths)
		require.Equal(t, "a", string(srv.bodies[0]))
		require.Equal(t, "1", srv.requests()[0].Header.Get("Content-Length"))
	})
	t.Run("a refused file fails the dataset and writes no document", func(t *testing.T) {
		srv := newStorageServer(t, storageAnswer{status: 200}, s3Err(400, "XAmzContentSHA256Mismatch", "The provided x-amz-content-sha256 header does not match what was computed."))
		c := storageClient(t, srv.URL+"/bucket", protocol.S3)
		res, err := c.DepositDataset(context.Background(), dir, []byte(`{}`), names)
		require.ErrorIs(t, err, ErrTerminal)
		require.ErrorContains(t, err, "XAmzContentSHA256Mismatch")
		require.Equal(t, 2, len(srv.requests()))
		again, err := c.DepositDataset(context.Background(), dir, []byte(`{}`), names)
		require.ErrorIs(t, err, ErrTerminal, "recorded as failed")
		require.Equal(t, 0, again.Requests)
		require.Equal(t, res.Key, again.Key)
	})
	t.Run("a file retried after 503 is sent whole again", func(t *testing.T) {
		srv := newStorageServer(t, s3Err(503, "SlowDown", "slow down"), storageAnswer{status: 200})
		c := storageClient(t, srv.URL+"/bucket", protocol.S3)
		res, err := c.DepositDataset(context.Background(), dir, []byte(`{}`), names)
		require.NoError(t, err)
		require.Equal(t, 4, res.Requests)
		require.Equal(t, 1, res.Retries)
		require.Equal(t, "a", string(srv.bodies[1]))
	})
}

// emptySHA256Hex is the hex SHA-256 of no bytes.
const emptySHA256Hex = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// s3ObjectURL is the URL the s3 target at bucket writes file name of the
// dataset of key to, escaped as the target signs it: the URL its file
// step builds.
func s3ObjectURL(t *testing.T, bucket, key, name string) string {
	t.Helper()
	d, err := s3.Target{Endpoint: bucket, AWS: *testAWS}.Driver()
	require.NoError(t, err)
	doc, err := json.Marshal(map[string]any{"dataset": []driver.DatasetFile{{Path: name, SHA256: emptySHA256Hex}}})
	require.NoError(t, err)
	steps, err := d.Steps(canonical.Keyed{Key: key, Body: doc}, t.TempDir())
	require.NoError(t, err)
	req, err := steps[0].Build(nil)
	require.NoError(t, err)
	return req.URL
}
