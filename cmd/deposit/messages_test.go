package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
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

	busy := newServer(t, repotest.Config{Faults: "nth=1:503:retry-after=0,nth=2:503:retry-after=0"})
	r = deposit(t, nil, "run", "--endpoint", busy.URL, "--db", filepath.Join(dir, "other.db"), "--max-attempts", "2", input)
	require.Equal(t, exitUnresolved, r.code, r.stderr)
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

// A run that settles many keys an earlier run left uncertain names a few
// of them and counts the rest; the summary line has no "recovered:" of
// its own, so filtering the named lines leaves it.
func TestRecoveredItemsAreNamedAFewAtATime(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	db := filepath.Join(dir, "x.db")
	lines := payloads(12)
	input := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	// Twelve intents of a process that died: pending rows whose lease
	// has ended (1 ms, long past by the time the run claims them).
	claimAsADeadProcess(t, db, "put "+srv.URL, lines, time.Millisecond)

	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--results", filepath.Join(dir, "results.jsonl"), input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, maxRecoveredShown, strings.Count(r.stderr, ": recovered: "), r.stderr)
	require.Contains(t, r.stderr, "(12 recovered from an earlier run or another process)")
	require.Contains(t, r.stderr, "7 more recovered items not named above")
	var summary int
	for line := range strings.Lines(r.stderr) {
		if strings.HasPrefix(line, "deposit run: ") {
			summary++
			require.NotContains(t, line, "recovered:", "grep -v 'recovered:' keeps the summary")
		}
	}
	require.Equal(t, 1, summary)
	results, err := os.ReadFile(filepath.Join(dir, "results.jsonl"))
	require.NoError(t, err)
	require.Len(t, jsonLines(t, string(results)), 12, "--results lists every line")
}

// An input without a line says so instead of a bare summary of nothing.
func TestAnEmptyInputSaysNothingWasRead(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "empty.jsonl")
	require.NoError(t, os.WriteFile(input, []byte("\n\n"), 0o600))
	r := deposit(t, nil, "run", "--endpoint", "http://127.0.0.1:9", "--db", filepath.Join(dir, "x.db"), input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stderr, "nothing to deposit: "+input+" holds no line")
}

// A run that meets keys another process leases says why it waits, once,
// and when the leases end, instead of sitting silent for a lease's length
// (what a re-run after a kill -9 meets).
func TestARunSaysItWaitsForAnotherProcesssLeases(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	db := filepath.Join(dir, "x.db")
	lines := payloads(3)
	input := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o600))

	// A process that claimed the keys and died, leaving no lock file: its
	// leases run 3 s more.
	claimAsADeadProcess(t, db, "put "+srv.URL, lines, 3*time.Second)

	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "waiting for keys whose lease another process holds"), r.stderr)
	require.Contains(t, r.stderr, "each is taken over when its lease ends, by ")
	require.Contains(t, r.stderr, "(3 recovered from an earlier run or another process)")
	require.EqualValues(t, 3, srv.Stats().Records)
}

// claimAsADeadProcess leaves in the store at db what a process that claimed
// each line's key under target and then died leaves, where the store cannot
// tell that it died (it left no lock file: it closed its store, or it ran
// an older deposit): pending rows whose lease ends ttl from now.
func claimAsADeadProcess(t *testing.T, db, target string, lines []string, ttl time.Duration) {
	t.Helper()
	st, err := dedup.Open(db)
	require.NoError(t, err)
	defer st.Close()
	for _, line := range lines {
		body, err := canonical.JCS([]byte(line))
		require.NoError(t, err)
		_, err = st.Claim(context.Background(), target, canonical.Key(body), body, dedup.Lease{Owner: "a process that died", TTL: ttl})
		require.NoError(t, err)
	}
}
