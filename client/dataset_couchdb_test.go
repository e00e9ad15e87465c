package client

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/couchdb"
)

// couchFiles is a dataset with an empty file, a binary one (every byte
// value, then more than one base64 chunk of them) and one in a folder.
func couchFiles() map[string]string {
	var bin []byte
	for range 400 {
		for b := range 256 {
			bin = append(bin, byte(b))
		}
	}
	return map[string]string{
		"empty.txt":       "",
		"raw/bytes.bin":   string(bin),
		"notes/é + ü.txt": "odd names are attachment names too\n",
	}
}

// couchDoc reads a document back, with its conflicts, from a CouchDB URL.
func couchDoc(t *testing.T, docURL string) map[string]any {
	t.Helper()
	status, body := get(t, http.DefaultClient, docURL+"?conflicts=true")
	require.Equal(t, http.StatusOK, status, body)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	return doc
}

// requireCouchAttachments checks that the document at docURL holds exactly
// files as attachments, byte for byte, in its first revision and without
// conflicts.
func requireCouchAttachments(t *testing.T, docURL string, files map[string]string) {
	t.Helper()
	doc := couchDoc(t, docURL)
	require.True(t, strings.HasPrefix(doc["_rev"].(string), "1-"), "one revision: %v", doc["_rev"])
	require.NotContains(t, doc, "_conflicts")
	atts := doc["_attachments"].(map[string]any)
	require.Len(t, atts, len(files))
	for name, content := range files {
		stub := atts[name].(map[string]any)
		require.Equal(t, float64(len(content)), stub["length"], name)
		require.True(t, strings.HasPrefix(stub["digest"].(string), "md5-"), name)
		resp, err := http.Get(docURL + "/" + (&url.URL{Path: name}).EscapedPath())
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		require.True(t, bytes.Equal([]byte(content), body), "attachment %q differs from the file", name)
	}
}

func TestCouchDBDatasetOnPouchDB(t *testing.T) {
	t.Parallel()
	db := peertest.PouchDB(t)
	files := couchFiles()
	dir, names := datasetDir(t, files)
	ctx := context.Background()

	c := peerClient(t, couchdb.Target{Endpoint: db})
	res, err := c.DepositDataset(ctx, dir, []byte(`{"title":"Reef"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, http.StatusCreated, res.Status)
	require.Equal(t, db+"/"+res.Key, res.Identifier)
	require.Equal(t, 1, res.Requests, "one PUT: the document and its files")
	requireCouchAttachments(t, res.Identifier, files)
	doc := couchDoc(t, res.Identifier)
	require.Equal(t, map[string]any{"title": "Reef"}, doc["metadata"])
	require.Len(t, doc["dataset"], len(files))

	t.Run("a replay sends nothing", func(t *testing.T) {
		again, err := c.DepositDataset(ctx, dir, []byte(`{"title":"Reef"}`), names)
		require.NoError(t, err)
		require.Equal(t, OutcomeReplayed, again.Outcome)
		require.Equal(t, 0, again.Requests)
	})

	t.Run("a fresh store finds it existing, its files checked by digest", func(t *testing.T) {
		fresh, err := peerClient(t, couchdb.Target{Endpoint: db}).DepositDataset(ctx, dir, []byte(`{"title":"Reef"}`), names)
		require.NoError(t, err)
		require.Equal(t, OutcomeExisting, fresh.Outcome)
		require.Equal(t, res.Identifier, fresh.Identifier)
		require.Equal(t, 2, fresh.Requests, "the 409, then the read-back")
		requireCouchAttachments(t, res.Identifier, files)
	})

	t.Run("a document at the key without the files fails, untouched", func(t *testing.T) {
		// What a client that sent no file bytes left behind: the dataset
		// document alone, at the same key.
		dir, names := datasetDir(t, map[string]string{"a.csv": "x,y\n1,2\n"})
		k, err := c.keyer.DatasetKey(dir, []byte(`{"title":"Old"}`), names)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodPut, db+"/"+k.Key, bytes.NewReader(k.Body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = readAnswer(resp, false)
		require.Equal(t, http.StatusCreated, resp.StatusCode)

		_, err = peerClient(t, couchdb.Target{Endpoint: db}).DepositDataset(ctx, dir, []byte(`{"title":"Old"}`), names)
		require.ErrorIs(t, err, ErrTerminal)
		require.ErrorContains(t, err, `the document exists without the file "a.csv" as an attachment`)
		old := couchDoc(t, db+"/"+k.Key)
		require.NotContains(t, old, "_attachments")
		require.True(t, strings.HasPrefix(old["_rev"].(string), "1-"))
	})

	t.Run("a file changed since it was hashed stores nothing", func(t *testing.T) {
		dir, names := datasetDir(t, map[string]string{"a.csv": "x,y\n1,2\n", "b.csv": "x,y\n3,4\n"})
		changing := peerClient(t, couchdb.Target{Endpoint: db})
		k, err := changing.keyer.DatasetKey(dir, []byte(`{"title":"Changing"}`), names)
		require.NoError(t, err)
		// The same length, other bytes: only the digest tells.
		require.NoError(t, os.WriteFile(filepath.Join(dir, "b.csv"), []byte("x,y\n3,5\n"), 0o644))
		res, _, err := changing.deposit(ctx, k, source{dir: dir}, nil, nil, ahead{})
		require.ErrorIs(t, err, ErrTerminal)
		require.ErrorContains(t, err, `file "b.csv": changed since it was hashed`)
		require.Equal(t, 1, res.Requests)
		status, _ := get(t, http.DefaultClient, db+"/"+k.Key)
		require.Equal(t, http.StatusNotFound, status, "no document")
	})
}

// dropProxy forwards every request to upstream and answers it, except the
// first PUT to a document: that one it lets the server commit, then drops
// the connection without an answer.
type dropProxy struct {
	*httptest.Server
	dropped atomic.Int32
}

func newDropProxy(t *testing.T, upstream string) *dropProxy {
	t.Helper()
	p := &dropProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, upstream+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if r.Method == http.MethodPut && resp.StatusCode == http.StatusCreated && p.dropped.Add(1) == 1 {
			panic(http.ErrAbortHandler) // committed upstream; the client hears nothing
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(answer)
	}))
	t.Cleanup(p.Close)
	return p
}

func TestCouchDBDatasetDroppedAfterCommitOnPouchDB(t *testing.T) {
	t.Parallel()
	db := peertest.PouchDB(t)
	u, err := url.Parse(db)
	require.NoError(t, err)
	proxy := newDropProxy(t, u.Scheme+"://"+u.Host)
	files := couchFiles()
	dir, names := datasetDir(t, files)

	c := peerClient(t, couchdb.Target{Endpoint: proxy.URL + u.Path})
	res, err := c.DepositDataset(context.Background(), dir, []byte(`{"title":"Dropped"}`), names)
	require.NoError(t, err)
	require.Equal(t, int32(1), proxy.dropped.Load(), "the first PUT was committed, then dropped")
	require.Equal(t, OutcomeCreated, res.Outcome, "the retry found the document the dropped PUT created")
	require.Equal(t, 3, res.Requests, "the dropped PUT, its retry answered 409, the read-back")
	requireCouchAttachments(t, db+"/"+res.Key, files)

	again, err := c.DepositDataset(context.Background(), dir, []byte(`{"title":"Dropped"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeReplayed, again.Outcome)
	require.Equal(t, 0, again.Requests)
}

func TestCouchDBDatasetBody(t *testing.T) {
	files := map[string]string{"empty.txt": "", "b.bin": "\x00\x01\x02\xff", "c.txt": "abcd"}
	dir, names := datasetDir(t, files)
	srv := newStorageServer(t, storageAnswer{status: 201, ctype: "application/json", body: `{"ok":true}`})
	var w wire
	c, err := New(Config{Target: targetFor(protocol.CouchDB, srv.URL+"/db"), Store: storageStore(t), Retry: quickRetry, HTTPClient: w.client()})
	require.NoError(t, err)
	res, err := c.DepositDataset(context.Background(), dir, []byte(`{"t":1}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)

	reqs := w.requests(t)
	require.Len(t, reqs, 1)
	require.Equal(t, http.MethodPut, reqs[0].method)
	require.Equal(t, "/db/"+res.Key, reqs[0].path)
	require.False(t, reqs[0].chunked)
	require.Equal(t, len(reqs[0].body), atoi(t, reqs[0].contentLength), "Content-Length is the body's length")

	var doc struct {
		Attachments map[string]struct {
			ContentType string `json:"content_type"`
			Data        []byte `json:"data"`
		} `json:"_attachments"`
		Dataset  []driver.DatasetFile `json:"dataset"`
		Metadata map[string]any       `json:"metadata"`
	}
	require.NoError(t, json.Unmarshal(reqs[0].body, &doc))
	require.Len(t, doc.Attachments, len(files))
	for name, content := range files {
		require.Equal(t, "application/octet-stream", doc.Attachments[name].ContentType)
		require.Equal(t, []byte(content), append([]byte{}, doc.Attachments[name].Data...), name)
	}
	require.Equal(t, map[string]any{"t": float64(1)}, doc.Metadata)
	require.Len(t, doc.Dataset, 3)

	t.Run("an attachment name CouchDB refuses is invalid before any request", func(t *testing.T) {
		dir, names := datasetDir(t, map[string]string{"_meta.txt": "x"})
		_, err := c.DepositDataset(context.Background(), dir, []byte(`{}`), names)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "names starting with _")
		require.Len(t, w.requests(t), 1)
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	require.NoError(t, json.Unmarshal([]byte(s), &n), "%q", s)
	return n
}
