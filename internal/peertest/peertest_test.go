package peertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// put sends body to url with If-None-Match: * and returns the status and
// the answer's body.
func put(t *testing.T, url string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("If-None-Match", "*")
	req.Header.Set("Content-Type", "application/json")
	return do(t, req)
}

// get returns the status and body of a GET of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// publicBucket creates a bucket on s that anyone may write without
// signing, so that the server's conditional PutObject can be seen with
// plain net/http, and returns its URL.
func publicBucket(t *testing.T, s S3) string {
	t.Helper()
	bin, err := lookPath("", "versitygw")
	require.NoError(t, err)
	_, err = versityAdmin(bin, s, "create-bucket", "--owner", s.AccessKeyID, "--bucket", "public",
		"--acl", "public-read-write", "--object-ownership", "BucketOwnerPreferred")
	require.NoError(t, err)
	return s.Endpoint + "/public"
}

func TestConditionalPut(t *testing.T) {
	tests := []struct {
		name string
		// record returns the URL of a record that does not exist yet.
		record func(t *testing.T) string
		// first and second are the statuses of two PUTs with
		// If-None-Match: *, the first {"n":1}, the second {"n":2}.
		first, second int
		// secondSays is part of the second answer's body.
		secondSays string
		// kept is the n that a GET finds afterwards.
		kept int
	}{
		{
			name:   "apache creates then refuses with 412",
			record: func(t *testing.T) string { return Apache(t) + "/record.json" },
			first:  http.StatusCreated, second: http.StatusPreconditionFailed, secondSays: "Precondition Failed", kept: 1,
		},
		{
			name:   "nginx creates then overwrites with 204",
			record: func(t *testing.T) string { return Nginx(t) + "/record.json" },
			first:  http.StatusCreated, second: http.StatusNoContent, kept: 2,
		},
		{
			name:   "pouchdb creates then conflicts with 409",
			record: func(t *testing.T) string { return PouchDB(t) + "/record" },
			first:  http.StatusCreated, second: http.StatusConflict, secondSays: `"error":"conflict"`, kept: 1,
		},
		{
			name:   "versitygw creates then refuses with 412",
			record: func(t *testing.T) string { return publicBucket(t, Versity(t)) + "/record.json" },
			first:  http.StatusOK, second: http.StatusPreconditionFailed, secondSays: "<Code>PreconditionFailed</Code>", kept: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := tt.record(t)

			status, _ := put(t, url, `{"n":1}`)
			require.Equal(t, tt.first, status)
			status, body := put(t, url, `{"n":2}`)
			require.Equal(t, tt.second, status)
			require.Contains(t, body, tt.secondSays)

			status, body = get(t, url)
			require.Equal(t, http.StatusOK, status)
			var doc struct{ N int }
			require.NoError(t, json.Unmarshal([]byte(body), &doc), body)
			require.Equal(t, tt.kept, doc.N)
		})
	}
}

func TestMissingParent(t *testing.T) {
	tests := []struct {
		name   string
		base   func(tb testing.TB) string
		status int
	}{
		{name: "apache answers 409 for a missing collection", base: Apache, status: http.StatusConflict},
		{name: "nginx answers 500 for a missing directory", base: Nginx, status: http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := tt.base(t)
			status, _ := put(t, base+"/missing/record.json", `{"n":1}`)
			require.Equal(t, tt.status, status)
			status, _ = get(t, base+"/missing/record.json")
			require.Equal(t, http.StatusNotFound, status)
		})
	}
}

func TestPouchDBDatabaseStartsEmpty(t *testing.T) {
	db := PouchDB(t)
	status, body := get(t, db)
	require.Equal(t, http.StatusOK, status)
	var info struct {
		DBName    string `json:"db_name"`
		DocCount  int    `json:"doc_count"`
		UpdateSeq any    `json:"update_seq"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &info), body)
	require.Equal(t, "deposit", info.DBName)
	require.Equal(t, 0, info.DocCount)
}

func TestVersity(t *testing.T) {
	s := Versity(t)
	bin, err := lookPath("", "versitygw")
	require.NoError(t, err)

	t.Run("unsigned writes to the bucket are refused", func(t *testing.T) {
		status, body := put(t, s.Endpoint+"/"+s.Bucket+"/record.json", `{"n":1}`)
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, body, "<Code>AccessDenied</Code>")
	})
	t.Run("the credentials sign for the bucket", func(t *testing.T) {
		out, err := versityAdmin(bin, s, "list-buckets")
		require.NoError(t, err)
		require.Contains(t, string(out), s.Bucket)
	})
	t.Run("another secret is refused", func(t *testing.T) {
		wrong := s
		wrong.SecretAccessKey = "not-" + s.SecretAccessKey
		_, err := versityAdmin(bin, wrong, "list-buckets")
		require.ErrorContains(t, err, "SignatureDoesNotMatch")
	})
	t.Run("objects are files under the bucket's directory", func(t *testing.T) {
		url := publicBucket(t, s) + "/a/b.json"
		status, _ := put(t, url, `{"n":1}`)
		require.Equal(t, http.StatusOK, status)
		status, _ = get(t, url)
		require.Equal(t, http.StatusOK, status)
	})
}

func TestS3Env(t *testing.T) {
	s := S3{Region: "us-east-1", AccessKeyID: "AK", SecretAccessKey: "SK"}
	require.Equal(t, []string{"AWS_ACCESS_KEY_ID=AK", "AWS_SECRET_ACCESS_KEY=SK", "AWS_REGION=us-east-1"}, s.Env())
}

// recordingTB records Skip and Fatalf instead of ending the test.
type recordingTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordingTB) Helper()                        {}
func (r *recordingTB) Skip(args ...any)               { r.skipped = fmt.Sprint(args...) }
func (r *recordingTB) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestUnavailable(t *testing.T) {
	missing := fmt.Errorf("%w: nginx is not installed", errUnavailable)
	t.Run("a missing peer skips on a laptop", func(t *testing.T) {
		var r recordingTB
		unavailable(&r, false, missing)
		require.Equal(t, "peertest: peer not installed: nginx is not installed; install it with .ci/peers", r.skipped)
		require.Empty(t, r.failed)
	})
	t.Run("a missing peer fails when peers are required", func(t *testing.T) {
		var r recordingTB
		unavailable(&r, true, missing)
		require.Empty(t, r.skipped)
		require.Equal(t, "peertest: peer not installed: nginx is not installed; install it with .ci/peers (DEPOSIT_REQUIRE_PEERS=1 makes a missing peer a failure)", r.failed)
	})
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(dirEnv, dir)
	bin := filepath.Join(dir, "bin", "peertest-fake-peer")
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.WriteFile(bin+"-not-executable", []byte("#!/bin/sh\n"), 0o644))

	t.Run("finds a program in DEPOSIT_PEERS_DIR/bin", func(t *testing.T) {
		got, err := lookPath("test", "peertest-fake-peer")
		require.NoError(t, err)
		require.Equal(t, bin, got)
	})
	t.Run("reports a missing program as unavailable", func(t *testing.T) {
		_, err := lookPath("test", "peertest-no-such-peer")
		require.ErrorIs(t, err, errUnavailable)
		require.ErrorContains(t, err, "peertest-no-such-peer (test)")
	})
	t.Run("passes over a file that is not executable", func(t *testing.T) {
		_, err := lookPath("test", "peertest-fake-peer-not-executable")
		require.ErrorIs(t, err, errUnavailable)
	})
}

func TestRunGivesUpOnAProgramThatKeepsExiting(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	starts := 0
	l := launch{name: "quitter", bin: sh, dir: t.TempDir(), args: func(port int) ([]string, error) {
		starts++
		return []string{"-c", "echo cannot bind port; exit 3"}, nil
	}}
	_, _, err = run(l)
	require.ErrorIs(t, err, errExitedEarly)
	require.ErrorContains(t, err, "cannot bind port")
	require.Equal(t, startAttempts, starts)
}

func TestStopEndsAProgramThatIgnoresSIGTERM(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p, err := startProcess("stubborn", sh, dir, filepath.Join(dir, "out.log"),
		[]string{"-c", `trap "" TERM; touch ` + ready + `; while :; do sleep 1; done`})
	require.NoError(t, err)
	for !fileExists(ready) && !p.exited() {
		// The shell has not set its trap yet; signalling it now would
		// test nothing.
		<-time.After(5 * time.Millisecond)
	}
	p.grace = 50 * time.Millisecond
	require.False(t, p.stop(), "stop reports a program that exited on its own")
	require.True(t, p.exited())
	require.Error(t, p.waitErr)
}

func TestStopReportsAProgramThatHadExited(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	dir := t.TempDir()
	p, err := startProcess("short", sh, dir, filepath.Join(dir, "out.log"), []string{"-c", "exit 0"})
	require.NoError(t, err)
	<-p.done
	require.True(t, p.stop())
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

// BenchmarkStart measures how long each peer takes from its configuration
// to its first HTTP answer; stopping it is not timed.
func BenchmarkStart(b *testing.B) {
	peers := []struct {
		name  string
		setup func(dir string) (launch, error)
	}{
		{"apache", apacheLaunch},
		{"nginx", nginxLaunch},
		{"pouchdb-server", pouchLaunch},
		{"versitygw", func(dir string) (launch, error) {
			return versityLaunch(dir, S3{Region: "us-east-1", AccessKeyID: "bench", SecretAccessKey: "benchsecret"})
		}},
	}
	for _, peer := range peers {
		b.Run(peer.name, func(b *testing.B) {
			for b.Loop() {
				l, err := peer.setup(peerDir(b, peer.name))
				check(b, err)
				p, _, err := run(l)
				require.NoError(b, err)
				b.StopTimer()
				p.stop()
				b.StartTimer()
			}
		})
	}
}
