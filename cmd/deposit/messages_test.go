package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/repotest"
)

// An invalid line says what is wrong with it, once: no chain of the
// packages that passed the error on ("invalid payload: canonical: ...").
func TestAnInvalidLineSaysWhyInOneStep(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", `{"a":1}`, `nul`, `{"a":1,"a":2}`)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "d.db"), input)
	require.Equal(t, exitFailed, r.code, r.stderr)
	require.Contains(t, r.stderr, "line 2: invalid: not JSON at offset 3: unexpected end of input in literal null\n")
	require.Contains(t, r.stderr, `line 3: invalid: not JSON at offset 7: duplicate member name "a"`+"\n")
	require.NotContains(t, r.stderr, "invalid payload")
	require.NotContains(t, r.stderr, "canonical:")

	r = deposit(t, nil, "key", input)
	require.Contains(t, r.stderr, `line 3: invalid: not JSON at offset 7: duplicate member name "a"`+"\n")
}

// A failed line names its key once (short, as an unresolved one does) and
// gives the server's answer, not the request URL that holds the key again.
func TestAFailedLineIsOneShortLine(t *testing.T) {
	// VerifyKey with --ignore: a payload holding the ignored field has a key
	// that is not the SHA-256 of its body, so the server refuses it (422).
	srv := newServer(t, repotest.Config{VerifyKey: true})
	dir := t.TempDir()
	line := `{"title":"a","note":"x"}`
	input := writeFile(t, dir, "in.jsonl", line)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "d.db"), "--ignore", "/note", input)
	require.Equal(t, exitFailed, r.code, r.stderr)
	keyed, err := canonical.NewKeyer(canonical.FormJCS, []string{"/note"})
	require.NoError(t, err)
	k, err := keyed.Key([]byte(line))
	require.NoError(t, err)
	require.Contains(t, r.stderr, "line 1: failed: "+k.Key[:12]+"… 422: ")
	require.NotContains(t, r.stderr, k.Key, "the full key is in --results and the store, not on the terminal")
	require.NotContains(t, r.stderr, "refused by the server: PUT")
}

// One of anything is singular: "1 request", "1 retry", and an unresolved
// item that running again settles is "it".
func TestOneOfAnythingIsSingular(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(1)...)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "d.db"), input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stderr, "1 item in ")
	require.Contains(t, r.stderr, "; 1 request, 0 retries\n")

	r = deposit(t, nil, "run", "--endpoint", "http://127.0.0.1:1", "--db", filepath.Join(dir, "other.db"), "--max-attempts", "2", input)
	require.Equal(t, exitStop, r.code, r.stderr)
	require.Contains(t, r.stderr, "1 item unresolved")
	require.Contains(t, r.stderr, "; 2 requests, 1 retry\n")
	require.NotContains(t, r.stderr, "settles them")
}

// An endpoint that is not a URL is echoed as the user wrote it, without
// percent-encoding, and without its query.
func TestABadEndpointIsEchoedAsGiven(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(1)...)
	for _, tc := range []struct{ endpoint, want string }{
		{"not a url", `"not a url"`},
		{"ftp://repo.example/x?token=QSECRET", `"ftp://repo.example/x"`},
		{"http://exa mple.org/x?token=QSECRET", `"http://exa mple.org/x"`},
	} {
		r := deposit(t, nil, "run", "--endpoint", tc.endpoint, "--db", filepath.Join(dir, "d.db"), input)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "--endpoint "+tc.want)
		require.NotContains(t, r.stderr, "%20")
		require.NotContains(t, r.stderr, "QSECRET")
	}
}

// A settings mismatch says once that the key settings differ, and which
// one, in the flags' terms.
func TestASettingsMismatchIsExplainedOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	input := writeFile(t, dir, "in.jsonl", payloads(1)...)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--ignore", "/x", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--form", "python", input)
	require.Equal(t, exitStop, r.code, r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "settings"), r.stderr)
	require.Contains(t, r.stderr, "key settings differ: the store "+db+" made its keys for put "+srv.URL+" with ")
	require.Contains(t, r.stderr, `--form jcs --ignore /x`)
	require.Contains(t, r.stderr, `--form python and no --ignore`)
	require.NotContains(t, r.stderr, "dedup:")
}
