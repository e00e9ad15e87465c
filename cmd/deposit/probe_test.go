package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/peertest"
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
