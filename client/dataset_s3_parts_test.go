package client

import (
	"context"
	"crypto/sha256"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/target/s3"
)

// partedFile writes a file of size bytes under dir whose content is a
// function of its offset, and returns its SHA-256.
func partedFile(t testing.TB, dir, name string, size int64) [32]byte {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, name))
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	w := io.MultiWriter(f, h)
	block := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		for i := range block {
			block[i] = byte((off + int64(i)) * 2654435761 >> 13)
		}
		_, err := w.Write(block[:min(int64(len(block)), size-off)])
		require.NoError(t, err)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// s3Proxy forwards to a real S3 server and counts the requests of each
// kind by method and query (PUT part, POST uploads, ...); fail, when set,
// drops a request's connection unanswered, before the server sees it or,
// when it says so, after.
type s3Proxy struct {
	mu     sync.Mutex
	counts map[string]int
	fail   func(r *http.Request) (drop, after bool)
	refuse func(r *http.Request) bool // answered 400 BadDigest
	proxy  *httputil.ReverseProxy
}

func newS3Proxy(t *testing.T, endpoint string) (*s3Proxy, string) {
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	p := &s3Proxy{counts: map[string]int{}, proxy: httputil.NewSingleHostReverseProxy(u)}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

// s3Kind names a request by what it does.
func s3Kind(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case q.Has("uploads"):
		return r.Method + " uploads"
	case q.Has("partNumber"):
		return "part"
	case q.Has("uploadId"):
		return r.Method + " upload"
	}
	return r.Method
}

func (p *s3Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.counts[s3Kind(r)]++
	refused := p.refuse != nil && p.refuse(r)
	drop, after := false, false
	if p.fail != nil && !refused {
		drop, after = p.fail(r)
	}
	p.mu.Unlock()
	if refused {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `<Error><Code>BadDigest</Code><Message>The Content-MD5 you specified did not match what we received.</Message></Error>`)
		return
	}
	if !drop {
		p.proxy.ServeHTTP(w, r)
		return
	}
	if after {
		p.proxy.ServeHTTP(httptest.NewRecorder(), r)
	}
	hj, _ := w.(http.Hijacker)
	conn, _, _ := hj.Hijack()
	conn.Close()
}

// set changes the proxy's faults (fail, refuse) under its lock.
func (p *s3Proxy) set(f func(p *s3Proxy)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *s3Proxy) count(kind string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[kind]
}

// openUploads lists the multipart uploads the bucket holds open.
func openUploads(t *testing.T, hc *http.Client, bucket string) []string {
	t.Helper()
	status, body := get(t, hc, bucket+"?uploads")
	require.Equal(t, http.StatusOK, status, body)
	var r struct {
		Uploads []struct {
			Key string `xml:"Key"`
		} `xml:"Upload"`
	}
	require.NoError(t, xml.Unmarshal([]byte(body), &r))
	var keys []string
	for _, u := range r.Uploads {
		keys = append(keys, u.Key)
	}
	return keys
}

// A file larger than the part size goes up in parts; a run cut off after
// two of its three parts leaves the upload journaled, and the next sends
// only the third, then completes it: the object holds the file's bytes,
// and no upload is left open.
func TestS3DatasetFileInPartsResumesOnVersity(t *testing.T) {
	t.Parallel()
	s := peertest.Versity(t)
	proxy, endpoint := newS3Proxy(t, s.Endpoint)
	bucket := endpoint + "/" + s.Bucket
	dir := t.TempDir()
	sum := partedFile(t, dir, "big.bin", 2*s3.MinPartSize+12345)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "small.txt"), []byte("small\n"), 0o644))
	names := []string{"big.bin", "small.txt"}
	store := storageStore(t)
	target := s3.Target{Endpoint: bucket, AWS: versityAWS(s), PartSize: s3.MinPartSize}
	c, err := New(Config{Target: target, Store: store, Retry: quickRetry})
	require.NoError(t, err)
	ctx := context.Background()

	// The first upload begun is the server's, its answer lost: a stray.
	parts, begun := 0, 0
	proxy.set(func(p *s3Proxy) {
		p.fail = func(r *http.Request) (bool, bool) {
			switch s3Kind(r) {
			case "part":
				parts++
				return parts > 2, false
			case "POST uploads":
				begun++
				return begun == 1, true
			}
			return false, false
		}
	})
	_, err = c.DepositDataset(ctx, dir, []byte(`{"t":"parts"}`), names)
	require.ErrorIs(t, err, ErrUnresolved)
	require.Equal(t, 2, proxy.count("POST uploads"))
	signed := signedClient(versityAWS(s))
	require.Len(t, openUploads(t, signed, s.Endpoint+"/"+s.Bucket), 2, "the stray and the upload journaled")
	sentBefore := proxy.count("part")

	proxy.set(func(p *s3Proxy) { p.fail = nil })
	var mu sync.Mutex
	var events []TransferEvent
	sent := map[string]int64{}
	hooked, err := New(Config{Target: target, Store: store, Retry: quickRetry, Hooks: Hooks{OnTransfer: func(e TransferEvent) {
		mu.Lock()
		defer mu.Unlock()
		if e.Sent > 0 {
			sent[e.Label] += e.Sent
			return
		}
		events = append(events, e)
	}}})
	require.NoError(t, err)
	res, err := hooked.DepositDataset(ctx, dir, []byte(`{"t":"parts"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, 2, proxy.count("POST uploads"), "the journaled upload is resumed, none begun")
	require.Equal(t, 1, proxy.count("GET upload"), "its parts listed once")
	require.Equal(t, sentBefore+1, proxy.count("part"), "only the part missing is sent")
	require.Equal(t, 1, proxy.count("POST upload"), "completed once")
	big := int64(2*s3.MinPartSize + 12345)
	require.Equal(t, []TransferEvent{
		{Key: res.Key, Label: `file "big.bin"`, Size: big, Held: 2 * s3.MinPartSize, Begin: true},
		{Key: res.Key, Label: `file "big.bin"`, Size: big, Done: true},
		{Key: res.Key, Label: `file "small.txt"`, Size: 6, Begin: true},
		{Key: res.Key, Label: `file "small.txt"`, Size: 6, Done: true},
	}, events, "each file's transfer begins, with what the server held, and ends")
	require.Equal(t, map[string]int64{`file "big.bin"`: 12345, `file "small.txt"`: 6}, sent, "the bytes sent: the part missing, and the small file")

	resp, err := signed.Get(s3ObjectURL(t, s.Endpoint+"/"+s.Bucket, res.Key, "big.bin"))
	require.NoError(t, err)
	h := sha256.New()
	_, err = io.Copy(h, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, sum[:], h.Sum(nil), "the object holds the file's bytes")
	require.Empty(t, openUploads(t, signed, s.Endpoint+"/"+s.Bucket), "the stray aborted once the object is complete")

	// A lost store: the object is found held, nothing is uploaded again.
	fresh, err := New(Config{Target: target, Store: storageStore(t), Retry: quickRetry})
	require.NoError(t, err)
	again, err := fresh.DepositDataset(ctx, dir, []byte(`{"t":"parts"}`), names)
	require.NoError(t, err)
	require.Equal(t, OutcomeExisting, again.Outcome)
	require.Equal(t, 2, proxy.count("POST uploads"), "none begun")
	require.Equal(t, 2, proxy.count("HEAD"), "one look for the object in each run that began none")
}

// A part the server holds with other bytes than the tag the journal
// recorded for it fails the deposit, and the upload is aborted and
// forgotten; so is an upload one of whose parts the server refuses for
// good (400 BadDigest: the file changed since it was keyed).
func TestS3DatasetFileInPartsRefusedIsAbortedOnVersity(t *testing.T) {
	t.Parallel()
	s := peertest.Versity(t)
	direct := s.Endpoint + "/" + s.Bucket
	signed := signedClient(versityAWS(s))
	for _, tt := range []struct {
		name string
		// spoil spoils the upload after a run cut off after two parts.
		spoil func(t *testing.T, store *dedup.SQLite, target, key string, p *s3Proxy)
		want  string
	}{
		{"a part held with other bytes", func(t *testing.T, store *dedup.SQLite, target, key string, _ *s3Proxy) {
			up, err := store.LookupUpload(context.Background(), target, key)
			require.NoError(t, err)
			require.Len(t, up.Tags, 2)
			require.NoError(t, store.RecordPart(context.Background(), target, key, up.ID, 1, `"0123456789abcdef0123456789abcdef"`))
		}, "other bytes than the file's"},
		{"a part refused for good", func(t *testing.T, _ *dedup.SQLite, _, _ string, p *s3Proxy) {
			p.set(func(p *s3Proxy) { p.refuse = func(r *http.Request) bool { return s3Kind(r) == "part" } })
		}, "BadDigest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy, endpoint := newS3Proxy(t, s.Endpoint)
			dir := t.TempDir()
			partedFile(t, dir, "big.bin", 2*s3.MinPartSize+1)
			store := storageStore(t)
			target := s3.Target{Endpoint: endpoint + "/" + s.Bucket, AWS: versityAWS(s), PartSize: s3.MinPartSize}
			c, err := New(Config{Target: target, Store: store, Retry: quickRetry})
			require.NoError(t, err)
			meta := []byte(`{"t":` + strconv.Quote(tt.name) + `}`)
			parts := 0
			proxy.set(func(p *s3Proxy) {
				p.fail = func(r *http.Request) (bool, bool) {
					if s3Kind(r) == "part" {
						parts++
						return parts > 2, false
					}
					return false, false
				}
			})
			res, err := c.DepositDataset(context.Background(), dir, meta, []string{"big.bin"})
			require.ErrorIs(t, err, ErrUnresolved)
			proxy.set(func(p *s3Proxy) { p.fail = nil })
			d, err := target.Driver()
			require.NoError(t, err)
			tt.spoil(t, store, d.Name(), res.Key+` file "big.bin" 5242880`, proxy)

			_, err = c.DepositDataset(context.Background(), dir, meta, []string{"big.bin"})
			require.ErrorIs(t, err, ErrTerminal)
			require.ErrorContains(t, err, tt.want)
			require.Equal(t, 1, proxy.count("DELETE upload"), "the upload aborted")
			_, err = store.LookupUpload(context.Background(), d.Name(), res.Key+` file "big.bin" 5242880`)
			require.ErrorIs(t, err, dedup.ErrNotFound, "and forgotten")
			for _, k := range openUploads(t, signed, direct) {
				require.NotContains(t, k, res.Key, "no upload of the dataset left open")
			}
		})
	}
}

// BenchmarkS3DatasetFile measures one 256 MiB dataset file deposited on
// versitygw as one PutObject and as a multipart upload of 16 MiB parts,
// with no latency and 20 ms before each write (a distant server): MB/s is
// the file's bytes over the deposit's time, keying included.
func BenchmarkS3DatasetFile(b *testing.B) {
	s := peertest.Versity(b)
	dir := b.TempDir()
	const size = 256 << 20
	partedFile(b, dir, "big.bin", size)
	u, err := url.Parse(s.Endpoint)
	if err != nil {
		b.Fatal(err)
	}
	for _, latency := range []time.Duration{0, 20 * time.Millisecond} {
		proxy := httputil.NewSingleHostReverseProxy(u)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				time.Sleep(latency)
			}
			proxy.ServeHTTP(w, r)
		}))
		b.Cleanup(srv.Close)
		for _, mode := range []struct {
			name string
			part int64
		}{{"put", -1}, {"parts=16MiB", 16 << 20}} {
			b.Run(fmt.Sprintf("latency=%v/%s", latency, mode.name), func(b *testing.B) {
				c := peerClient(b, s3.Target{Endpoint: srv.URL + "/" + s.Bucket, AWS: versityAWS(s), PartSize: mode.part})
				b.SetBytes(size)
				b.ResetTimer()
				for range b.N {
					meta := fmt.Sprintf(`{"bench":%d}`, benchRun.Add(1))
					res, err := c.DepositDataset(context.Background(), dir, []byte(meta), []string{"big.bin"})
					if err != nil || res.Outcome != OutcomeCreated {
						b.Fatalf("%v %v", res.Outcome, err)
					}
				}
			})
		}
	}
}

// A run with another part size than the run before begins the file's
// upload anew, and aborts the one before: parts of two sizes never make
// one object.
func TestS3DatasetFileInPartsOfAnotherSizeBeginsAnewOnVersity(t *testing.T) {
	t.Parallel()
	s := peertest.Versity(t)
	proxy, endpoint := newS3Proxy(t, s.Endpoint)
	dir := t.TempDir()
	sum := partedFile(t, dir, "big.bin", 3*s3.MinPartSize+1)
	store := storageStore(t)
	deposit := func(part int64) (Result, error) {
		c, err := New(Config{Target: s3.Target{Endpoint: endpoint + "/" + s.Bucket, AWS: versityAWS(s), PartSize: part}, Store: store, Retry: quickRetry})
		require.NoError(t, err)
		return c.DepositDataset(context.Background(), dir, []byte(`{"t":"sizes"}`), []string{"big.bin"})
	}
	parts := 0
	proxy.set(func(p *s3Proxy) {
		p.fail = func(r *http.Request) (bool, bool) {
			if s3Kind(r) == "part" {
				parts++
				return parts > 2, false
			}
			return false, false
		}
	})
	_, err := deposit(s3.MinPartSize)
	require.ErrorIs(t, err, ErrUnresolved)
	proxy.set(func(p *s3Proxy) { p.fail = nil })
	res, err := deposit(s3.MinPartSize + 1<<20)
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, 2, proxy.count("POST uploads"), "a new upload for the new part size")

	signed := signedClient(versityAWS(s))
	resp, err := signed.Get(s3ObjectURL(t, s.Endpoint+"/"+s.Bucket, res.Key, "big.bin"))
	require.NoError(t, err)
	h := sha256.New()
	_, err = io.Copy(h, resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, sum[:], h.Sum(nil), "the object holds the file's bytes")
	require.Empty(t, openUploads(t, signed, s.Endpoint+"/"+s.Bucket), "the first upload aborted")
}
