package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/repotest"
)

// probe runs `deposit probe args` in process with env as the whole
// environment.
func probe(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := probeCmd(context.Background(), args, streams{
		stdin: strings.NewReader(""), stdout: &out, stderr: &errOut,
		getenv: func(k string) string { return env[k] },
	})
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// probeURL is the probe record's URL in a probe's output.
var probeURL = regexp.MustCompile(`http://\S+/deposit-probe-[0-9a-f]{16}`)

func TestProbeWritesNothingWithoutYes(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	r := probe(t, nil, "--endpoint", srv.URL+"/records")
	require.Equal(t, exitStop, r.code)
	require.Regexp(t, `would write this record twice`, r.stdout)
	require.Regexp(t, `(?m)^  `+regexp.QuoteMeta(srv.URL)+`/records/deposit-probe-[0-9a-f]{16}$`, r.stdout)
	require.Contains(t, r.stdout, `"deposit-probe":`)
	require.Contains(t, r.stderr, "run again with --yes")
	require.Equal(t, int64(0), requests.Load())
}

func TestProbeAgainstRealServers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		start  func(t *testing.T) (args []string, env map[string]string)
		code   int
		output string
	}{
		{"apache mod_dav: created then exists is good", func(t *testing.T) ([]string, map[string]string) {
			return []string{"--endpoint", peertest.Apache(t), "--protocol", "webdav"}, nil
		}, exitDone, "good: the server created the record, then refused a second create"},
		{"nginx dav: created twice, the store is the only guard", func(t *testing.T) ([]string, map[string]string) {
			return []string{"--endpoint", peertest.Nginx(t)}, nil
		}, exitFailed, "created twice: the server accepted a second create of the same record"},
		{"versitygw with AWS variables: good", func(t *testing.T) ([]string, map[string]string) {
			s := peertest.Versity(t)
			env := map[string]string{}
			for _, kv := range s.Env() {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			return []string{"--endpoint", s.Endpoint + "/" + s.Bucket, "--protocol", "s3"}, env
		}, exitDone, "good:"},
		{"pouchdb-server: good", func(t *testing.T) ([]string, map[string]string) {
			return []string{"--protocol", "couchdb"}, map[string]string{"DEPOSIT_ENDPOINT": peertest.PouchDB(t)}
		}, exitDone, "good:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args, env := tt.start(t)
			r := probe(t, env, append(args, "--yes")...)
			require.Equal(t, tt.code, r.code, "stderr: %s", r.stderr)
			require.Contains(t, r.stdout, tt.output)
			require.Contains(t, r.stdout, "deleted the probe record.")
			require.Regexp(t, probeURL, r.stdout)
		})
	}

	t.Run("a missing WebDAV collection is explained", func(t *testing.T) {
		t.Parallel()
		r := probe(t, nil, "--endpoint", peertest.Apache(t)+"/missing", "--protocol", "webdav", "--yes")
		require.Equal(t, exitStop, r.code)
		require.Contains(t, r.stdout, "first write:  409 Conflict")
		require.Contains(t, r.stderr, "/missing/ does not exist (create it, or fix --endpoint)")
	})

	t.Run("a wrong AWS secret is explained", func(t *testing.T) {
		t.Parallel()
		s := peertest.Versity(t)
		env := map[string]string{"AWS_ACCESS_KEY_ID": s.AccessKeyID, "AWS_SECRET_ACCESS_KEY": "wrong", "AWS_DEFAULT_REGION": s.Region}
		r := probe(t, env, "--endpoint", s.Endpoint+"/"+s.Bucket, "--protocol", "s3", "--yes")
		require.Equal(t, exitStop, r.code)
		require.Contains(t, r.stderr, "SignatureDoesNotMatch")
		require.Contains(t, r.stderr, "check AWS_ACCESS_KEY_ID")
		require.NotContains(t, r.stderr+r.stdout, "wrong", "the secret is never printed")
	})
}

// The README's stub, `deposit serve`, with faults that drop answers after
// commit: the first write's answer is lost (the record is made), the
// second write's too, and the first DELETE's (the record is removed). The
// probe retries each as the same request and settles all three.
func TestProbeSettlesAnswersTheStubDropsAfterCommit(t *testing.T) {
	p := start(t, "serve", "--addr", "127.0.0.1:0", "--faults", "nth=1:drop,nth=3:drop")
	var base, stats string
	waitUntil(func() bool {
		lines := strings.Split(p.stdout.String(), "\n")
		if len(lines) < 3 {
			return false
		}
		_, rest, _ := strings.Cut(lines[0], "listening on ")
		base, _, _ = strings.Cut(rest, " ")
		_, stats, _ = strings.Cut(lines[1], "live counters at ")
		return true
	})

	r := probe(t, nil, "--endpoint", base, "--yes")
	require.Equal(t, exitDone, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "  first write:  no answer (EOF), then 412 Precondition Failed\n"+
		"                (the attempt whose answer was lost made the record)\n"+
		"  second write: no answer (EOF), then 412 Precondition Failed\n"+
		"good: the server created the record, then refused a second create of it as existing.\n")
	require.Contains(t, r.stdout, "deleted the probe record.\n")
	require.Empty(t, r.stderr)

	live := getStats(t, http.DefaultClient, stats)
	require.EqualValues(t, 0, live["records"], "the probe record is gone")
	require.EqualValues(t, 1, live["deletes"])
	require.EqualValues(t, 1, live["creates"], "the probe made its record once")
	require.EqualValues(t, 3, live["faults"])
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitDone, p.wait(t), p.stderr.String())
}

// A repository that does not allow deleting its records (one that mints
// DOIs, say): the probe says in one line that the record stays, and names
// it. The stub beneath it drops the answer to the first write.
func TestProbeSaysInOneLineThatARecordItCannotDeleteStays(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{Faults: "nth=1:drop"})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			w.Header().Set("Allow", "GET, HEAD, PUT")
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	r := probe(t, nil, "--endpoint", srv.URL, "--yes")
	require.Equal(t, exitDone, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	name := probeURL.FindString(r.stdout)
	require.NotEmpty(t, name)
	require.Contains(t, r.stdout, "\nthe probe record stays: the server does not allow deleting it "+
		"(DELETE answered 405 Method Not Allowed): "+name+"\n")
	require.NotContains(t, r.stdout, "yourself")
	require.Len(t, h.Records(), 1, "the record the first write made, once")
}

// dropProxy forwards every request to a real server and answers it, but
// for the answers it drops after the server has acted: the first and the
// third PUT of a path (the first attempt of each probe write) and the first
// DELETE, as the stub's nth=1:drop,nth=3:drop does. It keeps the Host
// header, which an S3 signature covers.
type dropProxy struct {
	*httptest.Server
	mu      sync.Mutex
	seen    map[string]int
	dropped int
	removed int // DELETEs the server answered with success
}

func newDropProxy(t *testing.T, upstream string) *dropProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	require.NoError(t, err)
	p := &dropProxy{seen: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, u.Scheme+"://"+u.Host+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		req.Header, req.Host = r.Header.Clone(), r.Host
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		p.mu.Lock()
		p.seen[r.Method+" "+r.URL.Path]++
		n := p.seen[r.Method+" "+r.URL.Path]
		if r.Method == http.MethodDelete && resp.StatusCode < 300 {
			p.removed++
		}
		drop := (r.Method == http.MethodPut && (n == 1 || n == 3)) || (r.Method == http.MethodDelete && n == 1)
		if drop {
			p.dropped++
		}
		p.mu.Unlock()
		if drop {
			panic(http.ErrAbortHandler) // done upstream; the client hears nothing
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

// through is endpoint with its scheme and host replaced by the proxy's.
func (p *dropProxy) through(t *testing.T, endpoint string) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	return p.URL + u.RequestURI()
}

func TestProbeOnRealServersSettlesAnswersDroppedAfterTheyActed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start func(t *testing.T) (endpoint string, args []string, env map[string]string)
		code  int
		first string
		// removed is how many DELETEs the server answered with success:
		// S3 answers 204 to a DELETE of a missing key as well.
		removed int
		// signed: reads need the request signed (S3), so the test does
		// not look for the record itself.
		signed bool
	}{
		{"apache mod_dav: good", func(t *testing.T) (string, []string, map[string]string) {
			return peertest.Apache(t), []string{"--protocol", "webdav"}, nil
		}, exitDone, "no answer (EOF), then 412 Precondition Failed", 1, false},
		{"nginx dav: created twice", func(t *testing.T) (string, []string, map[string]string) {
			return peertest.Nginx(t), nil, nil
		}, exitFailed, "no answer (EOF), then 204 No Content", 1, false},
		{"versitygw: good", func(t *testing.T) (string, []string, map[string]string) {
			s := peertest.Versity(t)
			env := map[string]string{}
			for _, kv := range s.Env() {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			return s.Endpoint + "/" + s.Bucket, []string{"--protocol", "s3"}, env
		}, exitDone, "no answer (EOF), then 412 Precondition Failed", 2, true},
		{"pouchdb-server: good, the revision read back", func(t *testing.T) (string, []string, map[string]string) {
			return peertest.PouchDB(t), []string{"--protocol", "couchdb"}, nil
		}, exitDone, "no answer (EOF), then 409 Conflict", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			endpoint, args, env := tt.start(t)
			proxy := newDropProxy(t, endpoint)
			r := probe(t, env, append(args, "--endpoint", proxy.through(t, endpoint), "--yes")...)
			require.Equal(t, tt.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, "  first write:  "+tt.first+"\n")
			require.Contains(t, r.stdout, "deleted the probe record.\n")
			proxy.mu.Lock()
			defer proxy.mu.Unlock()
			require.Equal(t, 3, proxy.dropped, "both writes and the first DELETE lost their answers")
			require.Equal(t, tt.removed, proxy.removed)
			if !tt.signed {
				name := probeURL.FindString(r.stdout)
				require.NotEmpty(t, name)
				resp, err := http.Get(endpoint + "/" + name[strings.LastIndex(name, "/")+1:])
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusNotFound, resp.StatusCode, "the record is gone from the server")
			}
		})
	}
}

func TestProbeUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no endpoint", nil, []string{"--yes"}, "no endpoint"},
		{"an unknown protocol", nil, []string{"--endpoint", "http://127.0.0.1:1", "--protocol", "ftp"}, "--protocol: unknown protocol"},
		{"idempotency-key cannot be probed", nil, []string{"--endpoint", "http://127.0.0.1:1", "--protocol", "idempotency-key"}, "no conditional create to probe"},
		{"s3 without credentials", nil, []string{"--endpoint", "http://127.0.0.1:1/bucket", "--protocol", "s3"}, "needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"a stray argument", nil, []string{"--endpoint", "http://127.0.0.1:1", "file.jsonl"}, "no arguments expected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := probe(t, tt.env, tt.args...)
			require.Equal(t, exitStop, r.code)
			require.Contains(t, r.stderr, tt.want)
			require.Contains(t, r.stderr, `Run "deposit probe -h" for help.`)
		})
	}
}

func TestProbeHelpListsItsFlags(t *testing.T) {
	r := probe(t, nil, "-h")
	require.Equal(t, exitDone, r.code)
	for _, flag := range []string{"--endpoint", "--protocol", "--header", "--yes", "AWS_SECRET_ACCESS_KEY"} {
		require.Contains(t, r.stdout, flag)
	}
}
