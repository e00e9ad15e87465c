package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/peertest"
)

// deposit run --protocol s3 against a real S3-compatible server (versitygw):
// credentials from the AWS_* variables, one object per distinct line, a
// re-run sends nothing, and a dataset's files land before its document.
func TestRunS3AgainstVersity(t *testing.T) {
	s3 := peertest.Versity(t)
	env := map[string]string{}
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	bucket := strings.TrimRight(s3.Endpoint, "/") + "/" + s3.Bucket
	dir := t.TempDir()
	lines := payloads(30)
	lines = append(lines, lines[0], lines[7]) // repeats
	input := writeFile(t, dir, "in.jsonl", lines...)
	db := filepath.Join(dir, "deposit.db")
	results := filepath.Join(dir, "results.jsonl")

	r := deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--db", db, "--results", results, "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, 30, s.Created)
	require.Equal(t, 2, s.Replayed)
	require.NotContains(t, r.stderr+r.stdout, s3.SecretAccessKey)

	data, err := os.ReadFile(results)
	require.NoError(t, err)
	for _, row := range jsonLines(t, string(data)) {
		require.Equal(t, bucket+"/"+row["key"].(string), row["identifier"], "the object URL is the identifier")
	}

	t.Run("a fresh store finds every object existing", func(t *testing.T) {
		r := deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--db", filepath.Join(dir, "fresh.db"), "--json", input)
		require.Equal(t, exitDone, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		require.Equal(t, 30, s.Existing)
		require.Equal(t, 0, s.Created)
	})

	t.Run("a re-run sends nothing", func(t *testing.T) {
		r := deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--db", db, "--json", input)
		require.Equal(t, exitDone, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		require.Equal(t, 32, s.Replayed)
		require.Equal(t, 0, s.Requests)
	})

	t.Run("a wrong secret stops the run", func(t *testing.T) {
		bad := map[string]string{"AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"], "AWS_SECRET_ACCESS_KEY": "not-the-secret", "AWS_REGION": env["AWS_REGION"]}
		r := deposit(t, bad, "run", "--protocol", "s3", "--endpoint", bucket, "--db", filepath.Join(dir, "bad.db"), input)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.NotContains(t, r.stderr, "not-the-secret")
	})

	t.Run("datasets store their files, then the document", func(t *testing.T) {
		data := filepath.Join(dir, "data")
		require.NoError(t, os.MkdirAll(filepath.Join(data, "cores"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(data, "cores", "a 1.csv"), []byte("depth,temp\n1,4.2\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(data, "readme.txt"), []byte("ice cores\n"), 0o644))
		in := writeFile(t, dir, "datasets.jsonl", `{"metadata":{"title":"Ice cores"},"files":["cores/a 1.csv","readme.txt"]}`)
		res := filepath.Join(dir, "datasets-results.jsonl")
		r := deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--datasets", data,
			"--db", filepath.Join(dir, "datasets.db"), "--results", res, "--json", in)
		require.Equal(t, exitDone, r.code, r.stderr)
		require.Equal(t, 1, summaryOf(t, r.stdout).Created)
		out, err := os.ReadFile(res)
		require.NoError(t, err)
		row := jsonLines(t, string(out))[0]
		key := row["key"].(string)
		require.Equal(t, bucket+"/"+key+".json", row["identifier"], "the dataset document, written last, is the identifier")
		require.Equal(t, 3, summaryOf(t, r.stdout).Requests, "two files, then the document")

		// The objects are on the server: a fresh store finds them all.
		r = deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--datasets", data,
			"--db", filepath.Join(dir, "datasets-fresh.db"), "--json", in)
		require.Equal(t, exitDone, r.code, r.stderr)
		require.Equal(t, 1, summaryOf(t, r.stdout).Existing)
	})

	t.Run("a dataset with an empty file is stored", func(t *testing.T) {
		// The repro of the bug where a 0-byte file went chunked, without
		// Content-Length, and versitygw answered 411 MissingContentLength.
		data := filepath.Join(dir, "d")
		require.NoError(t, os.MkdirAll(data, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(data, "empty.txt"), nil, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(data, "hi.txt"), []byte("hi\n"), 0o644))
		in := writeFile(t, dir, "x.jsonl", `{"metadata":{"t":1},"files":["empty.txt","hi.txt"]}`)
		db := filepath.Join(dir, "empty.db")
		r := deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--datasets", data, "--db", db, "--json", in)
		require.Equal(t, exitDone, r.code, r.stderr)
		s := summaryOf(t, r.stdout)
		require.Equal(t, 1, s.Created)
		require.Equal(t, 3, s.Requests, "two files, then the document")

		r = deposit(t, env, "run", "--protocol", "s3", "--endpoint", bucket, "--datasets", data, "--db", db, "--json", in)
		require.Equal(t, exitDone, r.code, r.stderr)
		require.Equal(t, 1, summaryOf(t, r.stdout).Replayed)
		require.Equal(t, 0, summaryOf(t, r.stdout).Requests)
	})
}

// deposit run --protocol couchdb --datasets against pouchdb-server: each
// dataset is one document with its files as attachments, an empty one
// included, and a re-run sends nothing.
func TestRunCouchDBDatasetsAgainstPouchDB(t *testing.T) {
	db := peertest.PouchDB(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "d")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "empty.txt"), nil, 0o644))
	bin := []byte{0, 1, 2, 0xfe, 0xff, '\n', '"', '\\'}
	require.NoError(t, os.WriteFile(filepath.Join(data, "b.bin"), bin, 0o644))
	in := writeFile(t, dir, "x.jsonl", `{"metadata":{"t":1},"files":["empty.txt","b.bin"]}`)
	store := filepath.Join(dir, "deposit.db")
	results := filepath.Join(dir, "results.jsonl")

	r := deposit(t, nil, "run", "--protocol", "couchdb", "--endpoint", db, "--datasets", data, "--db", store, "--results", results, "--json", in)
	require.Equal(t, exitDone, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, 1, s.Created)
	require.Equal(t, 1, s.Requests, "the document and its files in one PUT")
	out, err := os.ReadFile(results)
	require.NoError(t, err)
	id := jsonLines(t, string(out))[0]["identifier"].(string)
	for name, want := range map[string][]byte{"empty.txt": {}, "b.bin": bin} {
		resp, err := http.Get(id + "/" + name)
		require.NoError(t, err)
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, name)
		require.Equal(t, want, got, name)
	}

	r = deposit(t, nil, "run", "--protocol", "couchdb", "--endpoint", db, "--datasets", data, "--db", store, "--json", in)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 1, summaryOf(t, r.stdout).Replayed)
	require.Equal(t, 0, summaryOf(t, r.stdout).Requests)
}
