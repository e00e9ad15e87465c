package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
)

// The command deposits each dataset once to the InvenioRDM stub, with the
// token from the environment, publishes it with exactly its files, and
// reports the DOI and the record id as separate --results fields; a re-run
// sends nothing; with the store deleted, a run creates nothing and gives
// every identifier back.
func TestRunDepositsDatasetsOnceToInvenio(t *testing.T) {
	srv, err := repotest.NewInvenioServer(repotest.InvenioConfig{
		Token: "tok3n", Faults: "drop=0.1,504=0.1,429=0.05", Seed: 3, IndexLag: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	env := map[string]string{"DEPOSIT_AUTHORIZATION": "tok3n"}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	var lines []string
	for i := range 3 {
		require.NoError(t, os.MkdirAll(filepath.Join(data, fmt.Sprint(i)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(data, fmt.Sprint(i), "table.csv"), fmt.Appendf(nil, "a,b\n%d,%d\n", i, i), 0o600))
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":"Survey %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}},"files":["%d/table.csv"]}`, i, i))
	}
	input := writeFile(t, dir, "datasets.jsonl", lines...)
	results := filepath.Join(dir, "results.jsonl")
	args := func(db string) []string {
		return []string{"run", "--protocol", "invenio", "--endpoint", srv.API, "--datasets", data, "--settle", "50ms",
			"--rate", "1000", "--search-rate", "1000", "--max-attempts", "4", "--db", db, "--results", results, "--json", input}
	}
	db := filepath.Join(dir, "a.db")
	r := deposit(t, env, args(db)...)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, env, args(db)...)
	}
	require.Equal(t, exitDone, r.code, r.stderr)
	require.NotContains(t, r.stderr+r.stdout, "tok3n")

	recs := srv.Records()
	require.Len(t, recs, 3, "one record per line, no orphan draft")
	dois := map[string]string{}
	for _, rec := range recs {
		require.True(t, rec.Published)
		require.Len(t, rec.Files, 1)
		require.Equal(t, "completed", rec.Files[0].Status)
		dois[rec.DOI] = rec.ID
	}
	body, err := os.ReadFile(results)
	require.NoError(t, err)
	rows := jsonLines(t, string(body))
	require.Len(t, rows, 3)
	first := map[float64][2]string{}
	for _, row := range rows {
		doi, record := row["identifier"].(string), row["record"].(string)
		require.Equal(t, dois[doi], record, "the record id beside its DOI")
		first[row["line"].(float64)] = [2]string{doi, record}
	}

	before := srv.Stats().Requests
	r = deposit(t, env, args(db)...)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 3, summaryOf(t, r.stdout).Replayed)
	require.LessOrEqual(t, srv.Stats().Requests-before, int64(3), "a re-run sends nothing, or a search for a draft made after a miss")

	drafts := srv.Stats().Drafts
	r = deposit(t, env, args(filepath.Join(dir, "lost.db"))...)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, drafts, srv.Stats().Drafts, "a lost store creates nothing new")
	body, err = os.ReadFile(results)
	require.NoError(t, err)
	for _, row := range jsonLines(t, string(body)) {
		require.Equal(t, first[row["line"].(float64)], [2]string{row["identifier"].(string), row["record"].(string)})
	}

	t.Run("no token, for a server on this machine that asks for one, stops the run", func(t *testing.T) {
		r := deposit(t, nil, args(filepath.Join(dir, "other.db"))...)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "DEPOSIT_AUTHORIZATION")
	})
	t.Run("no token for a server elsewhere is a usage error", func(t *testing.T) {
		remote := args(filepath.Join(dir, "remote.db"))
		remote[4] = "https://repo.example.org/api"
		r := deposit(t, nil, remote...)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "invenio: set DEPOSIT_AUTHORIZATION to your personal access token")
	})
	t.Run("a wrong token stops the run", func(t *testing.T) {
		r := deposit(t, map[string]string{"DEPOSIT_AUTHORIZATION": "n0tmine"}, args(filepath.Join(dir, "other2.db"))...)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "403")
		require.NotContains(t, r.stderr, "n0tmine")
	})
}

// Runs killed with SIGKILL at writes that took effect (drivertest's
// harness), then run again until done: exactly one published record per
// dataset, each with exactly its file, no orphan draft, every store row
// done, a replay that sends nothing, and every identifier recalled on
// replay.
func TestKilledInvenioRunsFinishExactlyOnce(t *testing.T) {
	iv, err := repotest.NewInvenio(repotest.InvenioConfig{
		Token: "tok3n", Faults: "drop=0.05,504=0.05", Seed: 9, IndexLag: 5 * time.Millisecond, Latency: time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { iv.Close() })
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	const n = 150
	var lines []string
	sums := map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("f%03d.txt", i)
		require.NoError(t, os.WriteFile(filepath.Join(data, name), fmt.Appendf(nil, "file %d\n", i), 0o600))
		sums[name] = true
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":"Run %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}},"files":["%s"]}`, i, name))
	}
	input := writeFile(t, dir, "datasets.jsonl", lines...)
	results := filepath.Join(dir, "results.jsonl")
	command := func(endpoint, db string) *exec.Cmd {
		cmd := exec.Command(binary, "run", "--protocol", "invenio", "--endpoint", endpoint+"/api", "--datasets", data,
			"--settle", "30ms", "--rate", "1000", "--search-rate", "1000", "--concurrency", "8",
			"--db", db, "--results", results, "--json", input)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=tok3n"}
		return cmd
	}
	var endpoint string // the harness's, for the replay after it (one worker: one goroutine)
	report := drivertest.Harness{
		Handler: iv,
		Command: func(c drivertest.Child) *exec.Cmd {
			endpoint = c.Endpoint
			return command(c.Endpoint, c.Store)
		},
		KillAt: drivertest.RandomKills(2, 4, 600), // of about 5 writes a dataset
		Runs:   14,
	}.Run(t)
	require.Equal(t, 4, report.Kills)
	t.Logf("%d runs, %d killed", report.Runs, report.Kills)

	recs := iv.Records()
	require.Len(t, recs, n, "one record per dataset, no orphan draft")
	doiOf := map[string]string{}
	for _, rec := range recs {
		require.True(t, rec.Published, rec.ID)
		require.Len(t, rec.Files, 1, rec.ID)
		require.Equal(t, "completed", rec.Files[0].Status)
		require.True(t, sums[rec.Files[0].Key])
		delete(sums, rec.Files[0].Key)
		doiOf[rec.DOI] = rec.ID
	}
	require.Empty(t, sums, "every file on a record")

	r, err := command(endpoint, report.Store).Output()
	require.NoError(t, err)
	require.Equal(t, n, summaryOf(t, string(r)).Replayed)
	body, err := os.ReadFile(results) // the replay's
	require.NoError(t, err)
	rows := jsonLines(t, string(body))
	require.Len(t, rows, n)
	for _, row := range rows {
		require.Equal(t, doiOf[row["identifier"].(string)], row["record"], "line %v", row["line"])
	}
}

// deposit serve --protocol invenio serves the stub under /api, asking for
// the token DEPOSIT_AUTHORIZATION names.
func TestServeRunsTheInvenioStub(t *testing.T) {
	env := func(name string) string {
		if name == "DEPOSIT_AUTHORIZATION" {
			return "Bearer abc"
		}
		return ""
	}
	h, err := newRepository("invenio", repotest.Config{Seed: 1}, stubTimes{}, env)
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	post := func(auth string) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/records", strings.NewReader(`{"metadata":{"title":"t"}}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusForbidden, post(""))
	require.Equal(t, http.StatusCreated, post("Bearer abc"))
	require.Contains(t, h.counters(), "1 drafts created")
}

// The local stub (deposit serve --protocol invenio) asks for no token
// unless one is set: a run against it on this machine needs none either.
func TestRunToALocalInvenioNeedsNoToken(t *testing.T) {
	srv, err := repotest.NewInvenioServer(repotest.InvenioConfig{IndexLag: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	input := writeFile(t, dir, "records.jsonl",
		`{"metadata":{"title":"Reef temperature 2025","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}}}`)
	r := deposit(t, nil, "run", "--protocol", "invenio", "--endpoint", srv.API, "--rate", "0", "--settle", "10ms",
		"--db", filepath.Join(dir, "d.db"), "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Len(t, srv.Records(), 1)
}
