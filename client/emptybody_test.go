package client

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/webdav"
)

// wire records the bytes an HTTP client writes to its connections, so a
// test sees the framing of each request as the server received it (net/http
// hides a request's chosen framing from a handler only partly: a server's
// Request has no Content-Length for a chunked body, nor for an empty one).
type wire struct {
	mu    sync.Mutex
	conns []*bytes.Buffer
}

// client is an HTTP client, plain keep-alive, that records what it writes.
func (w *wire) client() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		buf := &bytes.Buffer{}
		w.mu.Lock()
		w.conns = append(w.conns, buf)
		w.mu.Unlock()
		return &recordedConn{Conn: conn, w: w, buf: buf}, nil
	}
	return &http.Client{Transport: tr}
}

type recordedConn struct {
	net.Conn
	w   *wire
	buf *bytes.Buffer
}

func (c *recordedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.w.mu.Lock()
	c.buf.Write(p[:n])
	c.w.mu.Unlock()
	return n, err
}

// sent is one request as it went over the wire.
type sent struct {
	method, path  string
	contentLength string // the header, "" when absent
	chunked       bool
	body          []byte
}

// requests parses every request written so far, connection by connection.
func (w *wire) requests(t *testing.T) []sent {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []sent
	for _, buf := range w.conns {
		r := bufio.NewReader(bytes.NewReader(buf.Bytes()))
		for {
			req, err := http.ReadRequest(r)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			body, err := io.ReadAll(req.Body)
			require.NoError(t, err)
			out = append(out, sent{
				method: req.Method, path: req.URL.Path,
				contentLength: req.Header.Get("Content-Length"),
				chunked:       len(req.TransferEncoding) > 0,
				body:          body,
			})
		}
	}
	return out
}

// requireEmptyUploads checks that every request to path was framed with
// Content-Length: 0 and carried no bytes, and that there was at least one.
func requireEmptyUploads(t *testing.T, reqs []sent, method, path string) {
	t.Helper()
	n := 0
	for _, r := range reqs {
		if r.method != method || r.path != path {
			continue
		}
		n++
		require.Equal(t, "0", r.contentLength, "%s %s", method, path)
		require.False(t, r.chunked, "%s %s was sent chunked", method, path)
		require.Empty(t, r.body)
	}
	require.NotZero(t, n, "no %s %s was sent", method, path)
}

func TestInvenioUploadsAnEmptyFileWithContentLength(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty.txt"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hi.txt"), []byte("hi\n"), 0o600))
	var w wire
	c, err := New(Config{Target: invenio.Target{Endpoint: s.API, SettleTime: invenioSettle, SearchRate: -1},
		Store: openStore(t), Retry: fastRetry, Rate: -1, HTTPClient: w.client(),
		Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}})
	require.NoError(t, err)
	res, err := c.DepositDataset(context.Background(), dir, invenioRecord(1), []string{"empty.txt", "hi.txt"})
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	requireEmptyUploads(t, w.requests(t), http.MethodPut, "/api/records/"+res.RecordID+"/draft/files/empty.txt/content")

	recs := s.Records()
	require.Len(t, recs, 1)
	require.Equal(t, int64(2), s.Stats().Commits)
}

// An empty body on the WebDAV peers: Apache mod_dav and nginx's dav module
// store a resource of 0 bytes from a PUT framed Content-Length: 0. The
// WebDAV target sends documents, never empty, so the exchange is driven
// directly.
func TestEmptyPutOnWebDAVPeers(t *testing.T) {
	t.Parallel()
	for _, peer := range []struct {
		name  string
		start func(testing.TB) string
	}{{"apache", peertest.Apache}, {"nginx", peertest.Nginx}} {
		t.Run(peer.name, func(t *testing.T) {
			t.Parallel()
			base := peer.start(t)
			var w wire
			c, err := New(Config{Target: webdav.Target{Endpoint: base}, Store: storageStore(t), Retry: quickRetry, HTTPClient: w.client()})
			require.NoError(t, err)
			for _, body := range [][]byte{nil, {}} {
				name := "empty-" + map[bool]string{true: "nil", false: "slice"}[body == nil]
				req := request{Method: http.MethodPut, URL: base + "/" + name, Header: http.Header{}, Body: body}
				a, cls, err := c.newExchange(name, nil).do(context.Background(), req, true, func(a answer) verdict {
					return verdict{Class: driver.Classify(a)}
				})
				require.NoError(t, err)
				require.Equal(t, driver.Created, cls)
				require.Equal(t, http.StatusCreated, a.Status)
				requireEmptyUploads(t, w.requests(t), http.MethodPut, "/"+name)

				status, got := get(t, http.DefaultClient, base+"/"+name)
				require.Equal(t, http.StatusOK, status)
				require.Empty(t, got)
			}
		})
	}
}
