package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// result is what one in-process command run left behind.
type result struct {
	code           int
	stdout, stderr string
}

// deposit runs the command line args in process with env as the whole
// environment.
func deposit(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	return depositStdin(t, env, "", args...)
}

func depositStdin(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := realMain(context.Background(), args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// newServer starts a reference repository for the test.
func newServer(t *testing.T, cfg repotest.Config) *repotest.Server {
	t.Helper()
	srv, err := repotest.NewServer(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// writeFile writes lines, each followed by "\n", and returns the path.
func writeFile(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	return path
}

// payloads returns n distinct payload lines.
func payloads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"title":"record %d","n":%d}`, i, i)
	}
	return out
}

// summaryOf decodes a --json summary and checks it has exactly the design's keys.
func summaryOf(t *testing.T, stdout string) summaryJSON {
	t.Helper()
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &raw), "stdout: %q", stdout)
	want := []string{"total", "created", "existing", "replayed", "updated", "stale", "failed", "invalid", "unresolved", "not_sent", "recovered", "unread", "skipped", "leases_lost", "requests", "retries", "rechecks", "bytes_sent", "elapsed_ms"}
	require.ElementsMatch(t, want, slices.Collect(mapsKeys(raw)))
	var s summaryJSON
	require.NoError(t, json.Unmarshal([]byte(stdout), &s))
	require.Equal(t, s.Total, s.Created+s.Existing+s.Replayed+s.Updated+s.Stale+s.Failed+s.Invalid+s.Unresolved, "total is the sum of the outcomes")
	require.LessOrEqual(t, s.NotSent, s.Unresolved, "the items not sent are unresolved")
	return s
}

func mapsKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// jsonLines decodes every line of text as a JSON object.
func jsonLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "line %q", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// storeRows reads every row of the store at path.
func storeRows(t *testing.T, path string) []dedup.Record {
	t.Helper()
	var st interface {
		List(ctx context.Context, target string, state dedup.State) iter.Seq2[dedup.Record, error]
		Close() error
	}
	var err error
	if isPostgres(path) {
		st, err = dedup.OpenPostgres(context.Background(), path)
	} else {
		st, err = dedup.Open(path)
	}
	require.NoError(t, err)
	defer st.Close()
	var out []dedup.Record
	for rec, err := range st.List(context.Background(), "", "") {
		require.NoError(t, err)
		out = append(out, rec)
	}
	return out
}

func TestRunDepositsEachPayloadOnceAndReplaysWithoutRequests(t *testing.T) {
	srv := newServer(t, repotest.Config{Faults: "drop=0.2,500=0.1", Seed: 3})
	dir := t.TempDir()
	lines := payloads(40)
	// Same payloads again: other member order and whitespace, and a blank line.
	lines = append(lines, "", `{ "n": 0, "title": "record 0" }`, `{"n":1,"title":"record 1"}`)
	input := writeFile(t, dir, "in.jsonl", lines...)
	db := filepath.Join(dir, "deposit.db")

	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
	for round := 1; r.code == exitUnresolved && round < 10; round++ { // faults may leave a few items unknown: run again
		r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
	}
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, int64(40), srv.Stats().Records)
	require.Equal(t, int64(0), srv.Stats().Duplicates)

	before := srv.Stats().Requests
	r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: 42, Replayed: 42, ElapsedMS: s.ElapsedMS}, s)
	require.Equal(t, before, srv.Stats().Requests, "a replay sends no request")
	require.Contains(t, r.stderr, "42 items")
}

func TestRunReadsStdinAndEndpointFromEnvironment(t *testing.T) {
	srv := newServer(t, repotest.Config{Authorization: "Bearer s3cret-token"})
	dir := t.TempDir()
	env := map[string]string{"DEPOSIT_ENDPOINT": srv.URL, "DEPOSIT_AUTHORIZATION": "Bearer s3cret-token"}
	r := depositStdin(t, env, strings.Join(payloads(5), "\n"), "run", "--db", filepath.Join(dir, "d.db"), "--json", "-")
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 5, summaryOf(t, r.stdout).Created)
	require.NotContains(t, r.stderr+r.stdout, "s3cret")
}

func TestRunWritesResultsAndStatusListsRows(t *testing.T) {
	// VerifyKey with --ignore: a payload holding the ignored field has a key
	// that is not the SHA-256 of its body, so the server refuses it (422).
	srv := newServer(t, repotest.Config{VerifyKey: true})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl",
		`{"a":1}`,
		``,
		`{"a":2,"volatile":"x"}`,
		`not json`,
		`{"a":1}`,
	)
	db := filepath.Join(dir, "deposit.db")
	resultsPath := filepath.Join(dir, "results.jsonl")
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--ignore", "/volatile", "--results", resultsPath, "--json", input)
	require.Equal(t, exitFailed, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: 4, Created: 1, Replayed: 1, Failed: 1, Invalid: 1, Requests: s.Requests, ElapsedMS: s.ElapsedMS}, s)
	require.Contains(t, r.stderr, "line 4: invalid")
	require.Contains(t, r.stderr, "line 3: failed")

	text, err := os.ReadFile(resultsPath)
	require.NoError(t, err)
	byLine := map[float64]map[string]any{}
	allowed := []string{"line", "key", "outcome", "identifier", "status", "error"}
	for _, m := range jsonLines(t, string(text)) {
		for k := range m {
			require.Contains(t, allowed, k)
		}
		byLine[m["line"].(float64)] = m
	}
	require.Len(t, byLine, 4, "one object per non-blank line")
	created, replayed := byLine[1], byLine[5]
	if created["outcome"] != "created" {
		created, replayed = replayed, created
	}
	require.Equal(t, "created", created["outcome"])
	require.Equal(t, float64(201), created["status"])
	require.NotEmpty(t, created["identifier"])
	require.NotContains(t, created, "error")
	require.Equal(t, "replayed", replayed["outcome"])
	require.Equal(t, created["identifier"], replayed["identifier"])
	require.Equal(t, created["key"], replayed["key"])
	require.Equal(t, "failed", byLine[3]["outcome"])
	require.Equal(t, float64(422), byLine[3]["status"])
	require.NotEmpty(t, byLine[3]["error"])
	require.Equal(t, map[string]any{"line": float64(4), "outcome": "invalid", "error": byLine[4]["error"]}, byLine[4])

	r = deposit(t, nil, "status", "--db", db, "--list", "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	rows := jsonLines(t, r.stdout)
	require.Len(t, rows, 2)
	rowKeys := []string{"target", "key", "state", "outcome", "identifier", "status", "error", "attempts"}
	states := map[string]map[string]any{}
	for _, row := range rows {
		for k := range row {
			require.Contains(t, rowKeys, k)
		}
		require.Equal(t, "put "+srv.URL, row["target"])
		states[row["state"].(string)] = row
	}
	require.Equal(t, created["identifier"], states["done"]["identifier"])
	require.Equal(t, "created", states["done"]["outcome"])
	require.Equal(t, float64(1), states["done"]["attempts"])
	require.Equal(t, float64(422), states["failed"]["status"])
	require.NotEmpty(t, states["failed"]["error"])

	r = deposit(t, nil, "status", "--db", db, "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	var sum map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum))
	require.Equal(t, map[string]any{
		"total": float64(2), "pending": float64(0), "done": float64(1), "failed": float64(1), "recheck": float64(0),
		"steps":   map[string]any{"total": float64(0), "pending": float64(0), "done": float64(0), "failed": float64(0)},
		"targets": []any{map[string]any{"target": "put " + srv.URL, "kind": "deposit", "total": float64(2), "pending": float64(0), "done": float64(1), "failed": float64(1), "recheck": float64(0)}},
	}, sum)

	r = deposit(t, nil, "status", "--db", db)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stdout, "2 deposits: 1 done, 1 failed, 0 pending")
	require.Contains(t, r.stdout, "status 422")

	r = deposit(t, nil, "status", "--db", db, "--list", "--state", "failed")
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stdout, "failed")
	require.NotContains(t, r.stdout, "done")
}

func TestRunRetryFailedResendsOnlyWhenAsked(t *testing.T) {
	srv := newServer(t, repotest.Config{VerifyKey: true})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", `{"a":2,"volatile":"x"}`)
	db := filepath.Join(dir, "deposit.db")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--ignore", "/volatile", "--json", input}

	require.Equal(t, exitFailed, deposit(t, nil, args...).code)
	before := srv.Stats().Requests
	r := deposit(t, nil, args...)
	require.Equal(t, exitFailed, r.code)
	require.Equal(t, 1, summaryOf(t, r.stdout).Failed)
	require.Equal(t, before, srv.Stats().Requests, "a recorded failure is not re-sent")

	r = deposit(t, nil, append([]string{"run", "--retry-failed"}, args[1:]...)...)
	require.Equal(t, exitFailed, r.code)
	require.Equal(t, before+1, srv.Stats().Requests, "--retry-failed re-sends it")
}

func TestRunBadInputFile(t *testing.T) {
	srv := newServer(t, repotest.Config{VerifyKey: true})
	dir := t.TempDir()
	const maxLine = 11 << 20
	big := `{"blob":"` + strings.Repeat("a", 10<<20) + `"}`
	tooBig := `{"blob":"` + strings.Repeat("b", 12<<20) + `"}`
	lines := []string{
		`{"ok":1}`,         // 1
		`hello`,            // 2 not JSON
		`{"ok":`,           // 3 truncated
		`{"x":NaN}`,        // 4 NaN
		`{"a":1,"a":2}`,    // 5 duplicate names
		"{\"a\":\"\xff\"}", // 6 invalid UTF-8
		strings.Repeat("[", 600) + strings.Repeat("]", 600), // 7 deeper than canonical.MaxDepth
		``,                      // 8 blank
		big,                     // 9 valid, 10 MB
		tooBig,                  // 10 over --max-line-bytes
		`{"ok":2,"volatile":1}`, // 11 refused by the server: 422
		`{"ok":3,"volatile":2}`, // 12 refused by the server: 422
		`   `,                   // 13 blank
		`{"ok":4}`,              // 14
	}
	require.Greater(t, 600, canonical.MaxDepth)
	var text []byte
	for i, l := range lines {
		text = append(text, l...)
		if i%2 == 0 {
			text = append(text, '\r') // CRLF endings on some lines
		}
		text = append(text, '\n')
	}
	input := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(input, text, 0o644))
	db := filepath.Join(dir, "deposit.db")
	resultsPath := filepath.Join(dir, "results.jsonl")
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--ignore", "/volatile",
		"--max-line-bytes", fmt.Sprint(maxLine), "--results", resultsPath, "--json", input}

	r := deposit(t, nil, args...)
	require.Equal(t, exitFailed, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: 12, Created: 3, Failed: 2, Invalid: 7, Requests: 5, ElapsedMS: s.ElapsedMS}, s)
	for _, line := range []int{2, 3, 4, 5, 6, 7, 10} {
		require.Contains(t, r.stderr, fmt.Sprintf("line %d: invalid", line))
	}
	require.Regexp(t, `line 10: invalid: .*line too long: \d+ bytes, over the limit of \d+; raise --max-line-bytes to accept it`, r.stderr)
	require.Equal(t, int64(3), srv.Stats().Records)
	var bigDeposited bool
	for _, rec := range srv.Records() {
		bigDeposited = bigDeposited || len(rec.Body) == len(big)
	}
	require.True(t, bigDeposited, "the 10 MB line is deposited")

	outcomes := map[float64]string{}
	text, err := os.ReadFile(resultsPath)
	require.NoError(t, err)
	for _, m := range jsonLines(t, string(text)) {
		outcomes[m["line"].(float64)] = m["outcome"].(string)
	}
	require.Equal(t, map[float64]string{
		1: "created", 2: "invalid", 3: "invalid", 4: "invalid", 5: "invalid", 6: "invalid", 7: "invalid",
		9: "created", 10: "invalid", 11: "failed", 12: "failed", 14: "created",
	}, outcomes)

	before := srv.Stats().Requests
	r = deposit(t, nil, args...)
	require.Equal(t, exitFailed, r.code, r.stderr)
	s = summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: 12, Replayed: 3, Failed: 2, Invalid: 7, ElapsedMS: s.ElapsedMS}, s)
	require.Equal(t, before, srv.Stats().Requests, "a re-run sends nothing")
}

func TestRunDatasetsKeysOnFileBytes(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(filepath.Join(data, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "a.csv"), []byte("x,y\n1,2\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(data, "sub", "b.bin"), []byte{0, 1, 2}, 0o644))
	input := writeFile(t, dir, "datasets.jsonl",
		`{"metadata":{"title":"one"},"files":["a.csv","sub/b.bin"]}`,
		`{"metadata":{"title":"one"},"files":["sub/b.bin","a.csv"]}`,
		`{"metadata":{"title":"two"},"files":[]}`,
		`{"metadata":{"title":"three"},"files":["../escape"]}`,
		`{"files":["a.csv"]}`,
	)
	db := filepath.Join(dir, "deposit.db")
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--datasets", data, "--json", input)
	require.Equal(t, exitFailed, r.code, r.stderr)
	s := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: 5, Created: 1, Replayed: 1, Invalid: 3, Requests: 1, ElapsedMS: s.ElapsedMS}, s)
	recs := srv.Records()
	require.Len(t, recs, 1)
	require.Contains(t, string(recs[0].Body), `"sha256"`)
	require.Contains(t, r.stderr, "--datasets: put stores each dataset's document (its files' paths, SHA-256 and sizes), not the files' bytes", "a user expecting the files stored is told")

	k := deposit(t, nil, "key", "--datasets", data, input)
	require.Equal(t, exitFailed, k.code)
	require.Equal(t, fmt.Sprintf("1\t%s\n2\t%s\n", recs[0].Key, recs[0].Key), k.stdout)
	require.Contains(t, k.stderr, "line 3: invalid")
}

func TestKeyPrintsTheKeyOfEachLine(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", `{"b":1,"a":"x","t":"2026"}`, ``, `{"a":"x","b":1.0}`, `{bad`)
	want, err := canonical.JCS([]byte(`{"a":"x","b":1}`))
	require.NoError(t, err)
	key := canonical.Key(want)

	r := deposit(t, nil, "key", "--ignore", "/t", input)
	require.Equal(t, exitFailed, r.code)
	require.Equal(t, fmt.Sprintf("1\t%s\n3\t%s\n", key, key), r.stdout)
	require.Contains(t, r.stderr, "line 4: invalid")

	r = depositStdin(t, nil, `{"a":"x","b":1}`, "key", "-")
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, "1\t"+key+"\n", r.stdout)
}

// With --identity, key prints the object key beside the content key: the
// object key is the SHA-256 of the canonical array of the identity values,
// which any language can compute; lines of one object share it.
func TestKeyPrintsTheObjectKeyWithAnIdentity(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", `{"id":"reef-1","n":1}`, `{"id":"reef-1","n":2}`, `{"n":3}`, `{"id":42,"n":4}`)
	object := canonical.Key([]byte(`["reef-1"]`))
	r := deposit(t, nil, "key", "--identity", "/id", input)
	require.Equal(t, exitFailed, r.code)
	k1, k2 := canonical.Key([]byte(`{"id":"reef-1","n":1}`)), canonical.Key([]byte(`{"id":"reef-1","n":2}`))
	require.Equal(t, fmt.Sprintf("1\t%s\t%s\n2\t%s\t%s\n4\t%s\t%s\n", object, k1, object, k2,
		canonical.Key([]byte(`["42"]`)), canonical.Key([]byte(`{"id":42,"n":4}`))), r.stdout)
	require.Contains(t, r.stderr, "line 3: invalid: identity /id: names no string or integer in this payload")
}

// Under --protocol datacite a line's DOI is folded to lower case before it
// is keyed, as deposit run keys it: two lines that differ in the DOI's
// case only are one object and one key, the key of the lower-case line.
// Without it they are two.
func TestKeyFoldsADataCiteDOIAsRunDoes(t *testing.T) {
	dir := t.TempDir()
	lower := `{"doi":"10.5072/reef-1","titles":[{"title":"Reef"}]}`
	input := writeFile(t, dir, "in.jsonl", lower, `{"doi":"10.5072/REEF-1","titles":[{"title":"Reef"}]}`)
	want := fmt.Sprintf("%s\t%s", canonical.Key([]byte(`["10.5072/reef-1"]`)), canonical.Key([]byte(lower)))
	r := deposit(t, nil, "key", "--protocol", "datacite", "--identity", "/doi", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, "1\t"+want+"\n2\t"+want+"\n", r.stdout)

	r = deposit(t, nil, "key", "--identity", "/doi", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.NotContains(t, r.stdout, "2\t"+want, "without the protocol, the payload as it is")
}

// With --datasets, the identity is read in each dataset's metadata, as
// deposit run reads it (and --ignore): the object key is the same as for
// a line of that metadata alone.
func TestKeyReadsAnIdentityInADatasetsMetadata(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "t.csv"), []byte("a,b\n"), 0o600))
	input := writeFile(t, dir, "in.jsonl", `{"metadata":{"id":"reef-1","title":"Reef"},"files":["t.csv"]}`, `{"metadata":{"title":"none"},"files":["t.csv"]}`)
	plain := deposit(t, nil, "key", "--datasets", data, input)
	require.Equal(t, exitDone, plain.code, plain.stderr)
	content := strings.Fields(strings.Split(plain.stdout, "\n")[0])[1]

	r := deposit(t, nil, "key", "--datasets", data, "--identity", "/id", input)
	require.Equal(t, exitFailed, r.code)
	require.Equal(t, fmt.Sprintf("1\t%s\t%s\n", canonical.Key([]byte(`["reef-1"]`)), content), r.stdout)
	require.Contains(t, r.stderr, "line 2: invalid: identity /metadata/id: names no string or integer in this payload")
}

func TestRunStopsWithAnActionableError(t *testing.T) {
	closed := newServer(t, repotest.Config{})
	unreachable := closed.URL
	closed.Close()

	tests := []struct {
		name    string
		cfg     repotest.Config
		path    string // appended to the server URL
		env     map[string]string
		args    []string
		message string
	}{
		{name: "missing credentials is 401: check your credentials", cfg: repotest.Config{Authorization: "Bearer right"}, message: "check your credentials"},
		{name: "wrong credentials is 403: check your credentials", cfg: repotest.Config{Authorization: "Bearer right"},
			env: map[string]string{"DEPOSIT_AUTHORIZATION": "Bearer wrong-secret"}, message: "check your credentials"},
		{name: "wrong header credentials is 403", cfg: repotest.Config{Authorization: "Bearer right"},
			args: []string{"--header", "Authorization: Bearer wrong-secret"}, message: "check your credentials"},
		{name: "a wrong path is 404: check --endpoint", path: "/no/such/collection", message: "check --endpoint"},
		{name: "no idempotency store is 501", cfg: repotest.Config{Protocol: repotest.ProtocolIdempotencyKey, IdempotencyDisabled: true},
			args: []string{"--protocol", "idempotency-key"}, message: "never falls back to an unprotected POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.cfg)
			dir := t.TempDir()
			input := writeFile(t, dir, "in.jsonl", payloads(20)...)
			args := append([]string{"run", "--endpoint", srv.URL + tt.path, "--db", filepath.Join(dir, "d.db"), "--json"}, tt.args...)
			r := deposit(t, tt.env, append(args, input)...)
			require.Equal(t, exitStop, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.message)
			require.NotContains(t, r.stderr, "run the same command again", "a stopped run gives one advice: the stop's")
			require.NotContains(t, r.stderr, "wrong-secret")
			require.Equal(t, int64(0), srv.Stats().Records)
			require.Less(t, srv.Stats().Requests, int64(20), "the run stops instead of trying every item")
		})
	}

	// Before any answer, a refused connection or a host that does not
	// resolve stops the run at its first request, with the default retry
	// policy: no item is retried (it took 517 requests and 6.4 s before).
	for _, endpoint := range []string{unreachable + "/records", "http://no-such-host.invalid/records"} {
		t.Run("an unreachable endpoint stops the run at once: "+endpoint, func(t *testing.T) {
			dir := t.TempDir()
			input := writeFile(t, dir, "in.jsonl", payloads(50)...)
			r := deposit(t, nil, "run", "--endpoint", endpoint, "--db", filepath.Join(dir, "d.db"), "--json", input)
			require.Equal(t, exitStop, r.code, r.stderr)
			require.Contains(t, r.stderr, "the endpoint "+endpoint+" is unreachable (")
			require.Contains(t, r.stderr, "): check --endpoint and the network")
			require.NotContains(t, r.stderr, "run the same command again", "a stopped run gives one advice: the stop's")
			require.NotContains(t, r.stderr, ": run again (safe)", "no line says running again helps before the cause is fixed")
			require.NotContains(t, r.stderr, "attempts exhausted", "the stop line names the cause, not the error chain")
			var sum map[string]any
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &sum))
			require.LessOrEqual(t, sum["requests"], float64(4), "one attempt per request slot (--concurrency 4), no retry")
			require.Equal(t, float64(0), sum["retries"])
			for _, row := range storeRows(t, filepath.Join(dir, "d.db")) {
				require.NotEqual(t, dedup.StatePending, row.State, "a connection never made created nothing: no intent stays")
			}
		})
	}
}

func TestAnEarlyStopCountsTheLinesNotRead(t *testing.T) {
	closed := newServer(t, repotest.Config{})
	unreachable := closed.URL
	closed.Close()
	srv := newServer(t, repotest.Config{Authorization: "Bearer right"})

	tests := []struct {
		name     string
		endpoint string
		args     []string
	}{
		{name: "after a 401", endpoint: srv.URL},
		{name: "after an unreachable endpoint", endpoint: unreachable, args: []string{"--max-attempts", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// More payloads than the run takes in before its first answer
			// (it keeps 33 × --concurrency items under way), a blank line
			// after every tenth: blank lines are not items, read or not.
			var lines []string
			for i, p := range payloads(1000) {
				lines = append(lines, p)
				if i%10 == 9 {
					lines = append(lines, "  ")
				}
			}
			input := writeFile(t, dir, "in.jsonl", lines...)
			args := append([]string{"run", "--endpoint", tt.endpoint, "--db", filepath.Join(dir, "d.db"), "--json"}, tt.args...)
			r := deposit(t, nil, append(args, input)...)
			require.Equal(t, exitStop, r.code, r.stderr)
			s := summaryOf(t, r.stdout)
			require.Greater(t, s.Unread, int64(0), "the run stops before the end of the input")
			require.Equal(t, int64(1000), int64(s.Total)+s.Unread, "every non-blank line is either counted in total or unread")
			require.Contains(t, r.stderr, fmt.Sprintf("%s not read", plural(int(s.Unread), "line")))
		})
	}

	t.Run("a run that reads everything has none", func(t *testing.T) {
		dir := t.TempDir()
		input := writeFile(t, dir, "in.jsonl", payloads(5)...)
		r := deposit(t, nil, "run", "--endpoint", newServer(t, repotest.Config{}).URL, "--db", filepath.Join(dir, "d.db"), "--json", input)
		require.Equal(t, exitDone, r.code, r.stderr)
		require.Equal(t, int64(0), summaryOf(t, r.stdout).Unread)
		require.NotContains(t, r.stderr, "not read")
	})
}

func TestA422UnderIdempotencyKeySaysWhatHelps(t *testing.T) {
	// Another store (or another tool) sent this key first, with another
	// body: here a line whose ignored field differs, deposited with a store
	// that was then lost.
	srv := newServer(t, repotest.Config{Protocol: repotest.ProtocolIdempotencyKey})
	dir := t.TempDir()
	args := []string{"run", "--protocol", "idempotency-key", "--endpoint", srv.URL, "--ignore", "/sent", "--json"}
	first := writeFile(t, dir, "first.jsonl", `{"title":"a","sent":"monday"}`)
	r := deposit(t, nil, append(args, "--db", filepath.Join(dir, "lost.db"), first)...)
	require.Equal(t, exitDone, r.code, r.stderr)

	again := writeFile(t, dir, "again.jsonl", `{"title":"a","sent":"tuesday"}`)
	db := filepath.Join(dir, "new.db")
	for _, extra := range [][]string{nil, nil, {"--retry-failed"}} { // sent, replayed from the store, re-sent
		r = deposit(t, nil, append(append(args, "--db", db), append(extra, again)...)...)
		require.Equal(t, exitFailed, r.code, r.stderr)
		require.Equal(t, 1, summaryOf(t, r.stdout).Failed)
		require.Contains(t, r.stderr, "another body")
		require.Contains(t, r.stderr, "24 h")
		require.NotContains(t, r.stderr, "run again with --retry-failed", "it cannot help while the server keeps the key")
	}
}

func TestRunRefusesAStoreItDoesNotOwn(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(3)...)
	for _, content := range [][]byte{
		[]byte("this is somebody's notes, not a database\n"),
		append([]byte("SQLite format 3\x00"), bytes.Repeat([]byte{7}, 200)...),
	} {
		db := filepath.Join(dir, "notes.db")
		require.NoError(t, os.WriteFile(db, content, 0o644))
		r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, input)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "not a deposit store")
		got, err := os.ReadFile(db)
		require.NoError(t, err)
		require.Equal(t, content, got, "the file is left untouched")
		_, err = os.Stat(db + "-wal")
		require.True(t, os.IsNotExist(err))

		r = deposit(t, nil, "status", "--db", db)
		require.Equal(t, exitStop, r.code)
		require.Contains(t, r.stderr, "not a deposit store")
	}
	require.Equal(t, int64(0), srv.Stats().Requests)
}

func TestRunRefusesOtherKeySettingsForTheSameTarget(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(3)...)
	db := filepath.Join(dir, "d.db")
	endpoint := srv.URL + "?token=tok3n"
	require.Equal(t, exitDone, deposit(t, nil, "run", "--endpoint", endpoint, "--db", db, input).code)
	before := srv.Stats().Requests

	r := deposit(t, nil, "run", "--endpoint", endpoint, "--db", db, "--ignore", "/updated", input)
	require.Equal(t, exitStop, r.code)
	require.Contains(t, r.stderr, "second record")
	require.Contains(t, r.stderr, "/updated", "the message names the settings")
	require.Equal(t, 1, strings.Count(r.stderr, "key settings differ"), r.stderr)
	require.NotContains(t, r.stderr, "tok3n", "the endpoint's query is never printed")
	r = deposit(t, nil, "run", "--endpoint", endpoint, "--db", db, "--form", "python", input)
	require.Equal(t, exitStop, r.code)
	require.Equal(t, before, srv.Stats().Requests)

	r = deposit(t, nil, "status", "--db", db)
	require.Equal(t, exitDone, r.code)
	require.NotContains(t, r.stdout, "tok3n")
}

func TestUsageErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(1)...)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "Usage"},
		{"unknown command", []string{"deposti"}, "unknown command"},
		{"no endpoint", []string{"run", input}, "DEPOSIT_ENDPOINT"},
		{"no input", []string{"run", "--endpoint", "http://127.0.0.1:1"}, "no input"},
		{"unknown flag", []string{"run", "--endpont", "x", input}, "flag provided but not defined"},
		{"bad header", []string{"run", "--endpoint", "http://127.0.0.1:1", "--header", "Authorization Bearer hunter2", input}, "Name: value"},
		{"a header the target sets for exactly-once", []string{"run", "--endpoint", "http://127.0.0.1:1", "--db", filepath.Join(dir, "h1.db"), "--header", "If-None-Match: x", input}, "If-None-Match"},
		{"an Idempotency-Key of the caller's", []string{"run", "--endpoint", "http://127.0.0.1:1", "--db", filepath.Join(dir, "h2.db"), "--protocol", "idempotency-key", "--header", "idempotency-key: \"k\"", input}, "Idempotency-Key"},
		{"bad protocol", []string{"run", "--endpoint", "http://127.0.0.1:1", "--protocol", "post", input}, "--protocol"},
		{"bad form", []string{"run", "--endpoint", "http://127.0.0.1:1", "--form", "xml", input}, "--form"},
		{"bad pointer", []string{"run", "--endpoint", "http://127.0.0.1:1", "--db", filepath.Join(dir, "d.db"), "--ignore", "updated", input}, "updated"},
		{"bad endpoint", []string{"run", "--endpoint", "ftp://example.test/x", "--db", filepath.Join(dir, "d2.db"), input}, "want an http or https URL"},
		{"bad faults", []string{"serve", "--faults", "drop=2"}, "--faults"},
		{"s3 without credentials", []string{"run", "--endpoint", "http://127.0.0.1:1/bucket", "--protocol", "s3", input}, "AWS_ACCESS_KEY_ID"},
		{"datacite without credentials", []string{"run", "--protocol", "datacite", "--doi-prefix", "10.5072", "--db", filepath.Join(dir, "d3.db"), input}, "DATACITE_PASSWORD"},
		{"datacite without a prefix", []string{"run", "--protocol", "datacite", "--header", "Authorization: Basic eDp5", "--db", filepath.Join(dir, "d3.db"), input}, "prefix"},
		{"status of a missing store", []string{"status", "--db", filepath.Join(dir, "none.db")}, "no store"},
		{"missing input", []string{"key", filepath.Join(dir, "none.jsonl")}, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := deposit(t, nil, tt.args...)
			require.Equal(t, exitStop, r.code)
			require.Contains(t, r.stderr, tt.want)
			require.NotContains(t, r.stderr, "hunter2")
		})
	}
	_, err := os.Stat(filepath.Join(dir, "none.db"))
	require.True(t, os.IsNotExist(err), "status does not create a store")
}

func TestHelpListsEveryFlag(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}} {
		r := deposit(t, nil, args...)
		require.Equal(t, exitDone, r.code)
		for _, cmd := range []string{"run", "status", "key", "serve", "demo", "probe"} {
			require.Contains(t, r.stdout, "deposit "+cmd)
		}
	}
	flags := map[string][]string{
		"run": {"-endpoint", "-protocol", "-db", "-concurrency", "-form", "-ignore", "-header", "-id-pointer",
			"-max-attempts", "-max-elapsed", "-rate", "-retry-failed", "-datasets", "-max-line-bytes", "-results", "-json",
			"-doi-prefix", "-event", "DATACITE_REPOSITORY_ID", "(default 4)", "(default 16777216)", "Exit status", "AWS_ACCESS_KEY_ID"},
		"status": {"-db", "-json", "-list", "(default deposit.db)"},
		"key":    {"-form", "-ignore", "-datasets"},
		"serve":  {"-addr", "-protocol", "-faults", "-seed", "-db", "127.0.0.1:8080", "drop=P", "retry-after"},
		"demo":   {"-seed"},
		"probe":  {"-endpoint", "-protocol", "-header", "-yes"},
	}
	for cmd, want := range flags {
		t.Run(cmd+" -h lists its flags", func(t *testing.T) {
			for _, args := range [][]string{{cmd, "-h"}, {cmd, "--help"}, {"help", cmd}} {
				r := deposit(t, nil, args...)
				require.Equal(t, exitDone, r.code)
				for _, w := range want {
					require.Contains(t, r.stdout, w)
				}
			}
		})
	}
}

func TestFlagsMayFollowTheInput(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(2)...)
	r := deposit(t, nil, "run", input, "--endpoint", srv.URL, "--db", filepath.Join(dir, "d.db"), "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 2, summaryOf(t, r.stdout).Created)
}

func TestRunWarnsOnceAboutAnIDPointerTheAnswersLack(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(5)...)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"),
		"--id-pointer", "/doi", "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 5, summaryOf(t, r.stdout).Created)
	require.Equal(t, 1, strings.Count(r.stderr, `identifier pointer \"/doi\" names no string`), r.stderr)

	t.Run("a pointer the answers have is no news", func(t *testing.T) {
		input := writeFile(t, dir, "more.jsonl", `{"title":"more"}`)
		r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "other.db"),
			"--id-pointer", "/identifier", "--json", input)
		require.Equal(t, exitDone, r.code, r.stderr)
		require.NotContains(t, r.stderr, "identifier pointer")
	})
}

func TestVersionPrintsTheModuleAndStoreSchemaVersions(t *testing.T) {
	want := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		want = info.Main.Version
	}
	require.Positive(t, dedup.SchemaVersion())
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := deposit(t, nil, args...)
			require.Equal(t, exitDone, r.code, r.stderr)
			require.Equal(t, fmt.Sprintf("deposit %s\nstore schema version %d\n", want, dedup.SchemaVersion()), r.stdout)
			require.Empty(t, r.stderr)
		})
	}
	t.Run("help lists it", func(t *testing.T) {
		r := deposit(t, nil, "help")
		require.Contains(t, r.stdout, "deposit version")
	})
}

func TestAnUnresolvedLineIsOneShortLine(t *testing.T) {
	srv := newServer(t, repotest.Config{Faults: "503=1"})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(1)...)
	results := filepath.Join(dir, "results.jsonl")
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "d.db"), "--max-attempts", "2",
		"--results", results, input)
	require.Equal(t, exitUnresolved, r.code, r.stderr)
	body, err := canonical.JCS([]byte(payloads(1)[0]))
	require.NoError(t, err)
	k := canonical.Key(body)
	require.Contains(t, r.stderr, "line 1: unresolved: "+k[:12]+"… last answer: 503 Service Unavailable: run again (safe)\n")
	require.NotContains(t, r.stderr, k, "the full key is in --results, not on the terminal")
	require.Contains(t, r.stderr, "1 item unresolved")
	require.NotContains(t, r.stderr, "1 items")

	text, err := os.ReadFile(results)
	require.NoError(t, err)
	require.Contains(t, string(text), k, "--results keeps the full key")
	require.Contains(t, string(text), "after 2 attempts", "--results keeps the full error")
}

// Each command's help lists its flags; its usage line names every one of
// them (unless it says "[flags]"), and so does the command line reference
// in docs/cli.md.
func TestEveryFlagIsInTheUsageLineAndTheReference(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	require.NoError(t, err)
	_, ref, ok := strings.Cut(string(doc), "# The command line\n")
	require.True(t, ok, "docs/cli.md is the command line reference")
	_, ref, ok = strings.Cut(ref, "```\n")
	require.True(t, ok, "docs/cli.md opens with the synopsis of every command")
	ref, _, _ = strings.Cut(ref, "```")
	for _, cmd := range []string{"run", "status", "key", "serve", "demo", "probe", "version"} {
		t.Run(cmd+" names every flag", func(t *testing.T) {
			r := deposit(t, nil, cmd, "-h")
			require.Equal(t, exitDone, r.code)
			synopsis, _, _ := strings.Cut(strings.TrimPrefix(r.stdout, "Usage: "), "\n")
			var flags []string
			for line := range strings.Lines(r.stdout) {
				if name, ok := strings.CutPrefix(line, "  --"); ok {
					name, _, _ = strings.Cut(strings.TrimSpace(name), " ")
					flags = append(flags, "--"+name)
				}
			}
			entry := referenceEntry(ref, cmd)
			require.NotEmpty(t, entry, "docs/cli.md has deposit %s", cmd)
			for _, f := range flags {
				if !strings.Contains(synopsis, "[flags]") {
					require.Regexp(t, regexp.QuoteMeta(f)+`([\s\]]|$)`, synopsis, "the usage line of %s", cmd)
				}
				require.Regexp(t, regexp.QuoteMeta(f)+`([\s\]]|$)`, entry, "docs/cli.md's synopsis of %s", cmd)
			}
		})
	}
}

// referenceEntry returns the lines of the command line reference ref that
// describe deposit cmd: its line and the indented lines after it.
func referenceEntry(ref, cmd string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(ref) {
		switch {
		case strings.HasPrefix(line, "deposit "+cmd+" ") || line == "deposit "+cmd+"\n":
			in = true
		case !strings.HasPrefix(line, " "):
			in = false
		}
		if in {
			b.WriteString(line)
		}
	}
	return b.String()
}
