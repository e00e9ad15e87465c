package main

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
)

// New versions and community submissions, run by two deposit processes
// at once on one store, killed with SIGKILL at writes that took effect
// (drivertest's harness), and run again until done: each line has one new
// version of its record (two lines per record, serialised), carrying its
// own marker alone, with the first version's files; each submission line
// one review request, submitted once; every store row done. A replay and
// a run on a lost store make no version and submit nothing.
func TestKilledInvenioVersionsAndSubmissionsFinishExactlyOnce(t *testing.T) {
	iv, err := repotest.NewInvenio(repotest.InvenioConfig{
		Token: "tok3n", Faults: "drop=0.05,504=0.05,500=0.03", Seed: 17, IndexLag: 5 * time.Millisecond,
		Latency: time.Millisecond, Communities: []string{"c-1"},
	})
	require.NoError(t, err)
	t.Cleanup(func() { iv.Close() })
	srv := httptest.NewServer(iv)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	const records, submissions = 12, 8
	firstRecords := publishInvenioFirstVersions(t, srv.URL+"/api", dir, records)

	var lines []string
	for i, id := range firstRecords {
		for v := range 2 {
			lines = append(lines, fmt.Sprintf(`{"metadata":{"title":"Run %d, release %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-02","resource_type":{"id":"dataset"}},"deposit":{"new_version_of":%q}}`, i, v+2, id))
		}
	}
	for i := range submissions {
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":"Submitted %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-02","resource_type":{"id":"dataset"}},"deposit":{"community":"c-1"}}`, i))
	}
	input := writeFile(t, dir, "versions.jsonl", lines...)
	results := func(worker int) string { return filepath.Join(dir, fmt.Sprintf("versions-results-%d.jsonl", worker)) }
	var (
		endpoint string // the harness's, for the runs after it
		once     sync.Once
	)
	command := func(api, db string, worker int) *exec.Cmd {
		cmd := exec.Command(binary, "run", "--protocol", "invenio", "--endpoint", api, "--settle", "30ms", "--rate", "1000",
			"--search-rate", "1000", "--concurrency", "8", "--header", drivertest.WorkerHeader+": "+fmt.Sprint(worker),
			"--db", db, "--results", results(worker), "--json", input)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=tok3n"}
		return cmd
	}
	report := drivertest.Harness{
		Handler: iv,
		Command: func(c drivertest.Child) *exec.Cmd {
			once.Do(func() { endpoint = c.Endpoint + "/api" })
			return command(c.Endpoint+"/api", c.Store, c.Worker)
		},
		Workers: 2, // two processes at once on the store
		KillAt:  []int64{5, 25, 45, 65},
	}.Run(t)
	require.Equal(t, 4, report.Kills)
	t.Logf("%d runs, %d killed; %d versions, %d submitted", report.Runs, report.Kills, iv.Stats().Versions, iv.Stats().Submitted)
	requireInvenioVersionsOnce(t, iv, firstRecords, 2)
	requireInvenioSubmittedOnce(t, iv, submissions)
	for _, row := range storeRows(t, report.Store) {
		require.False(t, strings.HasPrefix(row.Target, "invenio-serial "), "the serial rows of killed runs are gone: %+v", row)
	}

	keys := deposit(t, nil, "key", input)
	require.Equal(t, exitDone, keys.code, keys.stderr)
	body, err := os.ReadFile(results(0)) // the replay's
	require.NoError(t, err)
	keyOf := map[float64]string{}
	for _, row := range jsonLines(t, string(body)) {
		keyOf[row["line"].(float64)] = row["key"].(string)
	}
	for i, line := range strings.Split(strings.TrimSpace(keys.stdout), "\n") {
		require.True(t, strings.HasSuffix(line, "\t"+keyOf[float64(i+1)]), "deposit key agrees with the run on line %d", i+1)
	}

	run := func(db string) *process {
		p := &process{cmd: command(endpoint, db, 0), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
		require.NoError(t, p.cmd.Start())
		return p
	}
	before := iv.Stats()
	p := run(report.Store)
	require.Equal(t, exitDone, p.wait(t), p.stderr.String())
	require.Equal(t, len(lines), summaryOf(t, p.stdout.String()).Replayed)
	lost := filepath.Join(dir, "lost.db")
	for round := 1; ; round++ {
		require.LessOrEqual(t, round, 5, "the run on a lost store never finished")
		p := run(lost)
		if code := p.wait(t); code == exitDone {
			break
		}
	}
	after := iv.Stats()
	require.Equal(t, before.Versions, after.Versions, "no version made by a replay or a lost store")
	require.Equal(t, before.Submitted, after.Submitted, "nothing submitted again")
	require.Equal(t, before.Drafts, after.Drafts)
	requireInvenioVersionsOnce(t, iv, firstRecords, 2)
}

// publishInvenioFirstVersions deposits n records of one file each to the
// stub at api and returns their record ids.
func publishInvenioFirstVersions(t *testing.T, api, dir string, n int) []string {
	t.Helper()
	data := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	var lines []string
	for i := range n {
		name := fmt.Sprintf("f%03d.txt", i)
		require.NoError(t, os.WriteFile(filepath.Join(data, name), fmt.Appendf(nil, "file %d\n", i), 0o600))
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":"Run %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}},"files":["%s"]}`, i, name))
	}
	input := writeFile(t, dir, "first.jsonl", lines...)
	results := filepath.Join(dir, "first-results.jsonl")
	args := []string{"run", "--protocol", "invenio", "--endpoint", api, "--datasets", data, "--settle", "30ms",
		"--rate", "1000", "--search-rate", "1000", "--db", filepath.Join(dir, "first.db"), "--results", results, "--json", input}
	env := map[string]string{"DEPOSIT_AUTHORIZATION": "tok3n"}
	r := deposit(t, env, args...)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, env, args...)
	}
	require.Equal(t, exitDone, r.code, r.stderr)
	body, err := os.ReadFile(results)
	require.NoError(t, err)
	ids := make([]string, n)
	for _, row := range jsonLines(t, string(body)) {
		ids[int(row["line"].(float64))-1] = row["record"].(string)
	}
	return ids
}

// invenioView is what the checks read of an InvenioRDM stub.
type invenioView interface {
	Records() []repotest.InvenioRecord
	Requests() []repotest.InvenioRequest
	Stats() repotest.InvenioStats
}

// requireInvenioVersionsOnce checks that every first record has exactly
// perRecord new versions, all published, each carrying one marker of its
// own, with the first version's files; and that no draft is left.
func requireInvenioVersionsOnce(t *testing.T, srv invenioView, first []string, perRecord int) {
	t.Helper()
	byParent := map[string][]repotest.InvenioRecord{}
	parentOf := map[string]string{}
	markers := map[string]string{}
	for _, rec := range srv.Records() {
		byParent[rec.Parent] = append(byParent[rec.Parent], rec)
		parentOf[rec.ID] = rec.Parent
		if rec.Review != "" {
			continue
		}
		require.True(t, rec.Published, "no draft left: %s", rec.ID)
		require.Len(t, rec.Identifiers, 1, "record %s carries its own marker alone", rec.ID)
		require.Empty(t, markers[rec.Identifiers[0]], "marker %s on %s and %s", rec.Identifiers[0], rec.ID, markers[rec.Identifiers[0]])
		markers[rec.Identifiers[0]] = rec.ID
	}
	for _, id := range first {
		versions := byParent[parentOf[id]]
		require.Len(t, versions, 1+perRecord, "record %s: its first version and one per line", id)
		for _, v := range versions {
			require.Len(t, v.Files, 1, "version %d of %s has the first version's file", v.Version, id)
			require.Equal(t, "completed", v.Files[0].Status)
		}
	}
	require.Equal(t, int64(len(first)*perRecord), srv.Stats().Versions, "every version opened was published")
}

// requireInvenioSubmittedOnce checks one review request per submission
// line, each submitted once.
func requireInvenioSubmittedOnce(t *testing.T, srv invenioView, n int) {
	t.Helper()
	reqs := srv.Requests()
	require.Len(t, reqs, n, "one review request per line")
	records := map[string]bool{}
	for _, q := range reqs {
		require.Equal(t, "submitted", q.Status)
		require.False(t, records[q.Record], "one request per draft")
		records[q.Record] = true
	}
	require.Equal(t, int64(n), srv.Stats().Submitted)
	require.Equal(t, int64(n), srv.Stats().Reviews)
}
