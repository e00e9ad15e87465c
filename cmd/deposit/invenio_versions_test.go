package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
)

// New versions and community submissions, run by deposit processes killed
// with SIGKILL once the server has seen so many of them, and by two
// processes at once on one store, then run again until done: each line has
// one new version of its record (two lines per record, serialised),
// carrying its own marker alone, with the first version's files; each
// submission line one review request, submitted once. A replay and a run
// on a lost store make no version and submit nothing.
func TestKilledInvenioVersionsAndSubmissionsFinishExactlyOnce(t *testing.T) {
	srv, err := repotest.NewInvenioServer(repotest.InvenioConfig{
		Token: "tok3n", Faults: "drop=0.05,504=0.05,500=0.03", Seed: 17, IndexLag: 5 * time.Millisecond,
		Latency: time.Millisecond, Communities: []string{"c-1"},
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	const records, submissions = 12, 8
	firstRecords := publishInvenioFirstVersions(t, srv, dir, records)

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
	db := filepath.Join(dir, "versions.db")
	results := filepath.Join(dir, "versions-results.jsonl")
	args := func(db string) []string {
		return []string{"run", "--protocol", "invenio", "--endpoint", srv.API, "--settle", "30ms", "--rate", "1000",
			"--search-rate", "1000", "--concurrency", "8", "--db", db, "--results", results, "--json", input}
	}
	run := func(db string) *process {
		p := &process{cmd: exec.Command(binary, args(db)...), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
		p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=tok3n"}
		p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
		require.NoError(t, p.cmd.Start())
		return p
	}
	for _, at := range []int64{2, 7, 13} {
		killWhen(t, run(db), func() bool { return srv.Stats().Versions+srv.Stats().Submitted >= at })
	}
	// Two processes at once on the store; one is killed.
	other := run(db)
	killWhen(t, run(db), func() bool { return srv.Stats().Versions+srv.Stats().Submitted >= 18 })
	other.wait(t)
	t.Logf("after the kills: %d versions, %d submitted", srv.Stats().Versions, srv.Stats().Submitted)
	for round := 1; ; round++ {
		require.LessOrEqual(t, round, 10, "the batch never finished")
		p := run(db)
		code := p.wait(t)
		require.Contains(t, []int{exitDone, exitUnresolved}, code, p.stderr.String())
		if code == exitDone {
			break
		}
	}
	requireInvenioVersionsOnce(t, srv, firstRecords, 2)
	requireInvenioSubmittedOnce(t, srv, submissions)
	for _, row := range storeRows(t, db) {
		require.False(t, strings.HasPrefix(row.Target, "invenio-serial "), "the serial rows of killed runs are gone: %+v", row)
	}

	keys := deposit(t, nil, "key", input)
	require.Equal(t, exitDone, keys.code, keys.stderr)
	body, err := os.ReadFile(results)
	require.NoError(t, err)
	keyOf := map[float64]string{}
	for _, row := range jsonLines(t, string(body)) {
		keyOf[row["line"].(float64)] = row["key"].(string)
	}
	for i, line := range strings.Split(strings.TrimSpace(keys.stdout), "\n") {
		require.True(t, strings.HasSuffix(line, "\t"+keyOf[float64(i+1)]), "deposit key agrees with the run on line %d", i+1)
	}

	before := srv.Stats()
	p := run(db)
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
	after := srv.Stats()
	require.Equal(t, before.Versions, after.Versions, "no version made by a replay or a lost store")
	require.Equal(t, before.Submitted, after.Submitted, "nothing submitted again")
	require.Equal(t, before.Drafts, after.Drafts)
	requireInvenioVersionsOnce(t, srv, firstRecords, 2)
}

// publishInvenioFirstVersions deposits n records of one file each and
// returns their record ids.
func publishInvenioFirstVersions(t *testing.T, srv *repotest.InvenioServer, dir string, n int) []string {
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
	args := []string{"run", "--protocol", "invenio", "--endpoint", srv.API, "--datasets", data, "--settle", "30ms",
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

// killWhen kills p with SIGKILL once cond holds, unless p ends first.
func killWhen(t *testing.T, p *process, cond func() bool) {
	t.Helper()
	ended := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(ended)
	}()
	isEnded := func() bool {
		select {
		case <-ended:
			return true
		default:
			return false
		}
	}
	waitUntil(func() bool { return isEnded() || cond() })
	if isEnded() {
		t.Logf("the run ended before the kill: %s", p.stderr.String())
		return
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-ended
}

// requireInvenioVersionsOnce checks that every first record has exactly
// perRecord new versions, all published, each carrying one marker of its
// own, with the first version's files; and that no draft is left.
func requireInvenioVersionsOnce(t *testing.T, srv *repotest.InvenioServer, first []string, perRecord int) {
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
func requireInvenioSubmittedOnce(t *testing.T, srv *repotest.InvenioServer, n int) {
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
