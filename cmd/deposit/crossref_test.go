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

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/crossref"
)

// crossrefWork writes the deposit file of work i, version v, generated at
// the clock ts with batch id batch, and returns its line.
func crossrefWork(t *testing.T, dir string, i, v int, ts uint64, batch string) string {
	t.Helper()
	doi := fmt.Sprintf("10.5555/chaos-%03d", i)
	x := fmt.Sprintf(`<?xml version="1.0" encoding="UTF-8"?>
<doi_batch version="5.3.1" xmlns="http://www.crossref.org/schema/5.3.1">
<head><doi_batch_id>%s</doi_batch_id><timestamp>%d</timestamp>
<depositor><depositor_name>Lab</depositor_name><email_address>lab@example.org</email_address></depositor><registrant>Lab</registrant></head>
<body><database><database_metadata><titles><title>Chaos</title></titles></database_metadata>
<dataset><titles><title>Work %d, version %d</title></titles>
<doi_data><doi>%s</doi><resource>https://example.org/%d</resource></doi_data></dataset></database></body>
</doi_batch>
`, batch, ts, i, v, doi, i)
	name := fmt.Sprintf("work-%03d.xml", i)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(x), 0o644))
	return fmt.Sprintf(`{"doi":%q,"xml_file":%q}`, doi, name)
}

// Chaos: uploads dropped after they were queued, 503s, 500s after queuing,
// slow processing, faulted downloads and queries, and a real deposit
// process SIGKILLed twice at uploads that took effect (drivertest's
// harness), once in each of two batches on one store (the first versions;
// then some works changed and every file regenerated with a new clock and
// batch id). Runs go on until exit 0: every DOI is registered, no upload
// was sent again under a name already queued, each DOI's record is its
// latest logical version with one version per logical change, every store
// row is done, and a replay of each batch sends nothing.
func TestKilledCrossrefRunsRegisterEachVersionOnce(t *testing.T) {
	const login, password = "chaos-role", "Chaos-pw-4Vq"
	cr, err := repotest.NewCrossref(repotest.CrossrefConfig{Login: login, Password: password,
		Faults: "drop=0.15,503=0.1,500=0.1,reads", Seed: 13,
		QueueDelay: 30 * time.Millisecond, ProcessDelay: 30 * time.Millisecond, UnknownFor: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { cr.Close() })
	dir := t.TempDir()
	db := filepath.Join(dir, "deposit.db") // both batches'
	input := filepath.Join(dir, "works.jsonl")
	batch := func(killAt int64, addr string) drivertest.Harness {
		return drivertest.Harness{
			Handler: cr,
			Command: func(c drivertest.Child) *exec.Cmd {
				cmd := exec.Command(binary, "run", "--protocol", "crossref", "--endpoint", c.Endpoint+"/servlet/deposit",
					"--settle", "50ms", "--max-elapsed", "5s", "--concurrency", "4", "--db", c.Store, "--json", input)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CROSSREF_LOGIN=" + login, "CROSSREF_PASSWORD=" + password}
				return cmd
			},
			Store:  db,
			Addr:   addr,            // the first batch's, so that the store's target is the same
			KillAt: []int64{killAt}, // uploads are the writes
			Runs:   11,
		}
	}

	const n, changed = 40, 8 // works 0..7 get a second version
	write := func(version func(i int) int, ts uint64, batch string) []string {
		var lines []string
		for i := range n {
			lines = append(lines, crossrefWork(t, dir, i, version(i), ts, batch))
		}
		require.NoError(t, os.WriteFile(input, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
		return lines
	}
	write(func(int) int { return 1 }, 20260101000000000, "first")
	var first drivertest.Report
	t.Run("first batch", func(t *testing.T) {
		first = batch(10, "").Run(t)
		require.Equal(t, 1, first.Kills)
		t.Logf("first batch: %d runs", first.Runs)
	})

	latest := func(i int) int {
		if i < changed {
			return 2
		}
		return 1
	}
	lines := write(latest, 20260201000000000, "second")
	t.Run("second batch", func(t *testing.T) {
		report := batch(3, strings.TrimPrefix(first.Endpoint, "http://")).Run(t)
		require.Equal(t, 1, report.Kills)
		t.Logf("second batch: %d runs", report.Runs)
	})

	st := cr.Stats()
	t.Logf("uploads %d, downloads %d, queries %d, faults %v", st.Uploads, st.Downloads, st.Queries, st.FaultsByKind)
	require.Zero(t, st.Resent, "no upload sent again under a file name already queued")
	require.Equal(t, int64(n), st.Registered)
	keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(t, err)
	drv, err := crossref.Target{Dir: dir}.Driver()
	require.NoError(t, err)
	recs := cr.Records()
	require.Len(t, recs, n)
	for i, rec := range recs {
		_, err := client.KeyPayload(keyer, drv, []byte(lines[i]))
		require.NoError(t, err)
		want := uint64(20260101000000000) // an unchanged work is replayed: its first file stands
		if latest(i) == 2 {
			want = 20260201000000000
		}
		require.Equal(t, want, rec.Timestamp, "%s: registered %s, not its latest version", rec.DOI, rec.FileName)
		require.Equal(t, latest(i), rec.Versions, rec.DOI)
	}
	for _, row := range storeRows(t, db) {
		require.Equal(t, dedup.StateDone, row.State, "%s %s", row.Target, row.Key)
	}
}

// The local command pair of docs/targets/crossref.md: deposit serve
// --protocol crossref and deposit run against it, with the login the stub
// asks for; deposit key prints the keys the run stored; a run without the
// login at a remote endpoint is a usage error.
func TestServeCrossrefAndRunAgainstIt(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"CROSSREF_LOGIN": "lab", "CROSSREF_PASSWORD": "Serve-pw-2Lm"}
	p := &process{cmd: exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--protocol", "crossref", "--queue-delay", "20ms", "--faults", "drop=0.3,500=0.2"),
		stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CROSSREF_LOGIN=lab", "CROSSREF_PASSWORD=Serve-pw-2Lm"}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	var url string
	waitUntil(func() bool {
		line, _, ok := strings.Cut(p.stdout.String(), "\n")
		_, rest, _ := strings.Cut(line, "listening on ")
		url, _, _ = strings.Cut(rest, " ")
		return ok
	})
	require.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), p.stdout.String())

	var lines []string
	for i := range 3 {
		lines = append(lines, crossrefWork(t, dir, i, 1, 20260101000000000, "b"))
	}
	input := writeFile(t, dir, "works.jsonl", lines...)
	db, results := filepath.Join(dir, "deposit.db"), filepath.Join(dir, "results.jsonl")
	args := []string{"run", "--protocol", "crossref", "--endpoint", url + "/servlet/deposit", "--db", db, "--results", results, "--json", input}
	r := deposit(t, env, args...)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, env, args...)
	}
	require.Equal(t, exitDone, r.code, r.stderr)
	r = deposit(t, env, args...)
	require.Equal(t, 3, summaryOf(t, r.stdout).Replayed, r.stderr)

	keys := deposit(t, nil, "key", "--protocol", "crossref", input)
	require.Equal(t, exitDone, keys.code, keys.stderr)
	var stored []string
	for _, row := range storeRows(t, db) {
		require.Equal(t, dedup.StateDone, row.State)
		require.True(t, strings.HasPrefix(row.Identifier, "10.5555/chaos-"), row.Identifier)
		stored = append(stored, row.Key)
	}
	for _, l := range strings.Split(strings.TrimSpace(keys.stdout), "\n") {
		// LINE, OBJECT, KEY: the store's row of a work is its object's.
		f := strings.Split(l, "\t")
		require.Len(t, f, 3, l)
		require.Contains(t, stored, f[1])
	}

	r = deposit(t, nil, "run", "--protocol", "crossref", "--endpoint", "https://test.crossref.org/servlet/deposit", "--db", filepath.Join(dir, "other.db"), input)
	require.Equal(t, exitStop, r.code)
	require.Contains(t, r.stderr, "set CROSSREF_LOGIN and CROSSREF_PASSWORD")
	r = deposit(t, nil, "run", "--protocol", "crossref", "--endpoint", url+"/servlet/deposit", "--db", filepath.Join(dir, "other.db"), input)
	require.Equal(t, exitStop, r.code, "the stub asks for the login")
	require.Contains(t, r.stderr, "Crossref refused the login")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitDone, p.wait(t), p.stderr.String())
	require.Contains(t, p.stdout.String(), "3 DOIs registered")
	require.Contains(t, p.stdout.String(), "0 re-sent under a name already queued")
	out, err := os.ReadFile(results)
	require.NoError(t, err)
	require.NotContains(t, string(out)+r.stderr+p.stdout.String(), "Serve-pw-2Lm")
}

// A wrong password stops the run with the credential message, whether
// Crossref answers it 401 or, as its servlets do, with its login page and
// status 200: at the upload (nothing is queued, nothing left pending),
// and at the result download of a deposit an earlier run left queued
// (never taken for "queued").
func TestCrossrefAWrongLoginStopsTheRunWhetherAnswered401OrWithTheLoginPage(t *testing.T) {
	const login, password, wrong = "lab-role", "Right-pw-5Tz", "Wrong-pw-8Qm"
	const credentials = "Crossref refused the login: check CROSSREF_LOGIN (a role, or user/role) and CROSSREF_PASSWORD"
	for _, tc := range []struct {
		name      string
		loginPage bool
	}{{"answered 401", false}, {"answered 200 with the login page", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := repotest.NewCrossrefServer(repotest.CrossrefConfig{Login: login, Password: password, LoginPage: tc.loginPage, QueueDelay: time.Hour})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			input := writeFile(t, dir, "works.jsonl", crossrefWork(t, dir, 0, 1, 20260101000000000, "b"), crossrefWork(t, dir, 1, 1, 20260101000000000, "b"))
			db := filepath.Join(dir, "deposit.db")
			run := func(pw, maxElapsed string) result {
				return deposit(t, map[string]string{"CROSSREF_LOGIN": login, "CROSSREF_PASSWORD": pw},
					"run", "--protocol", "crossref", "--endpoint", srv.URL+"/servlet/deposit", "--db", db, "--max-elapsed", maxElapsed, input)
			}

			r := run(wrong, "2s")
			t.Logf("a fresh run:\n%s", r.stderr)
			require.Equal(t, exitStop, r.code, r.stderr)
			require.Contains(t, r.stderr, credentials)
			require.Zero(t, srv.Stats().Uploads)
			require.Zero(t, pendingRows(t, db), "a refused login sent nothing that could have taken effect")

			r = run(password, "50ms")
			require.Equal(t, exitUnresolved, r.code, r.stderr)
			require.Contains(t, r.stderr, "not yet settled")
			require.Equal(t, int64(2), srv.Stats().Uploads)

			r = run(wrong, "2s")
			t.Logf("a run that polls:\n%s", r.stderr)
			require.Equal(t, exitStop, r.code, r.stderr)
			require.Contains(t, r.stderr, credentials)
			require.NotContains(t, r.stderr, "not yet settled")
			require.NotContains(t, r.stderr, wrong)
			require.Equal(t, int64(2), srv.Stats().Uploads, "nothing sent again")
			require.Equal(t, 2, pendingRows(t, db), "the queued deposits are polled by the next run")
		})
	}
}

// v1 then v2 of one DOI, the store deleted, v1 again: the query before
// the upload shows v2's greater timestamp registered, so v1 is stale (never
// failed, never created), nothing is uploaded, and v2 stands.
func TestCrossrefAnOlderFileAfterALostStoreIsStale(t *testing.T) {
	srv, err := repotest.NewCrossrefServer(repotest.CrossrefConfig{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	db, results := filepath.Join(dir, "deposit.db"), filepath.Join(dir, "results.jsonl")
	run := func(version int, ts uint64) result {
		input := writeFile(t, dir, "works.jsonl", crossrefWork(t, dir, 0, version, ts, fmt.Sprint("batch-", version)))
		return deposit(t, nil, "run", "--protocol", "crossref", "--endpoint", srv.URL+"/servlet/deposit", "--db", db, "--results", results, input)
	}
	r := run(1, 20260101000000000)
	require.Equal(t, exitDone, r.code, r.stderr)
	r = run(2, 20260201000000000)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stderr, "0 created, 0 existing, 0 replayed, 1 updated, 0 stale")
	st := deposit(t, nil, "status", "--db", db)
	require.Equal(t, 0, st.code, st.stderr)
	require.Contains(t, st.stdout, "\n  objects: 1, 2 versions applied (1 first, 1 update)", "a Crossref DOI is an object without --identity")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		require.NoError(t, os.RemoveAll(db+suffix))
	}

	uploads := srv.Stats().Uploads
	r = run(1, 20260101000000000)
	t.Logf("v1 again after the store was lost:\n%s", r.stderr)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stderr, "0 created, 0 existing, 0 replayed, 0 updated, 1 stale, 0 failed")
	out, err := os.ReadFile(results)
	require.NoError(t, err)
	lines := jsonLines(t, string(out))
	require.Len(t, lines, 1)
	require.Equal(t, "stale", lines[0]["outcome"])
	require.NotEmpty(t, lines[0]["current"])
	require.Equal(t, uploads, srv.Stats().Uploads, "not uploaded")
	require.Zero(t, srv.Stats().StaleRefused)
	require.Equal(t, uint64(20260201000000000), srv.Records()[0].Timestamp, "v2 stands")
}

// --settle is counted from the upload, and --max-elapsed bounds what
// follows the wait, as docs/targets/crossref.md says: an upload cut off
// before it was queued costs the run that sent it one wait (a look, the
// settle time, a look again, then out of budget: exit 3), and the next
// run, past the settle time, trusts its first look and uploads at once
// (a look, the upload, a poll that finds it). With --max-elapsed above
// --settle, the run that sent it uploads again.
func TestCrossrefSettleIsCountedFromTheUploadAndMaxElapsedBoundsWhatFollows(t *testing.T) {
	for _, tc := range []struct {
		name, maxElapsed string
		codes            []int   // of each run
		downloads        []int64 // result downloads of each run
	}{
		{"--max-elapsed below --settle", "100ms", []int{exitUnresolved, exitDone}, []int64{2, 2}},
		{"--max-elapsed above --settle", "20s", []int{exitDone}, []int64{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := repotest.NewCrossrefServer(repotest.CrossrefConfig{Faults: "nth=1:reset"})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			input := writeFile(t, dir, "works.jsonl", crossrefWork(t, dir, 0, 1, 20260101000000000, "b"))
			var codes []int
			var downloads []int64
			for range tc.codes {
				before := srv.Stats().Downloads
				r := deposit(t, nil, "run", "--protocol", "crossref", "--endpoint", srv.URL+"/servlet/deposit", "--db", filepath.Join(dir, "deposit.db"),
					"--settle", "300ms", "--max-elapsed", tc.maxElapsed, input)
				t.Logf("run %d:\n%s", len(codes)+1, r.stderr)
				codes, downloads = append(codes, r.code), append(downloads, srv.Stats().Downloads-before)
			}
			require.Equal(t, tc.codes, codes)
			require.Equal(t, tc.downloads, downloads)
			require.Equal(t, int64(1), srv.Stats().Uploads, "queued once")
			require.Len(t, srv.Records(), 1)
		})
	}
}
