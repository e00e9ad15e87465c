package main

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

const dvToken = "dv-t0ken"

// dvMetadata is a dataset line under --datasets: native JSON metadata
// titled title, with files.
func dvMetadata(title string, files ...string) string {
	md := fmt.Sprintf(`{"datasetVersion":{"license":{"name":"CC0 1.0"},"metadataBlocks":{"citation":{"fields":[`+
		`{"typeName":"title","multiple":false,"typeClass":"primitive","value":%q},`+
		`{"typeName":"author","multiple":true,"typeClass":"compound","value":[{"authorName":{"typeName":"authorName","multiple":false,"typeClass":"primitive","value":"Finch, Fiona"}}]},`+
		`{"typeName":"datasetContact","multiple":true,"typeClass":"compound","value":[{"datasetContactEmail":{"typeName":"datasetContactEmail","multiple":false,"typeClass":"primitive","value":"finch@example.edu"}}]},`+
		`{"typeName":"dsDescription","multiple":true,"typeClass":"compound","value":[{"dsDescriptionValue":{"typeName":"dsDescriptionValue","multiple":false,"typeClass":"primitive","value":"Birds."}}]},`+
		`{"typeName":"subject","multiple":true,"typeClass":"controlledVocabulary","value":["Other"]},`+
		`{"typeName":"otherId","multiple":true,"typeClass":"compound","value":[{"otherIdAgency":{"typeName":"otherIdAgency","multiple":false,"typeClass":"primitive","value":"lab"},"otherIdValue":{"typeName":"otherIdValue","multiple":false,"typeClass":"primitive","value":"LAB-%s"}}]}`+
		`]}}}}`, title, title)
	return fmt.Sprintf(`{"metadata":%s,"files":["%s"]}`, md, strings.Join(files, `","`))
}

// dvBatch writes n datasets of two files each (one in a folder) under dir
// and their lines; it returns the input file and each file's MD5 by
// dataset title and path.
func dvBatch(t *testing.T, dir, prefix string, n int) (string, map[string]map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "data")
	sums := map[string]map[string]string{}
	var lines []string
	for i := range n {
		title := fmt.Sprintf("%s %03d", prefix, i)
		sums[title] = map[string]string{}
		for _, name := range []string{"a.txt", "sub/b.txt"} {
			p := filepath.Join(data, fmt.Sprint(i), filepath.FromSlash(name))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			content := fmt.Appendf(nil, "%s of %s\n", name, title)
			require.NoError(t, os.WriteFile(p, content, 0o600))
			sum := md5.Sum(content)
			sums[title][fmt.Sprint(i)+"/"+name] = hex.EncodeToString(sum[:])
		}
		lines = append(lines, dvMetadata(title, fmt.Sprint(i)+"/a.txt", fmt.Sprint(i)+"/sub/b.txt"))
	}
	return writeFile(t, dir, "datasets.jsonl", lines...), sums
}

// checkPublishedOnce checks the invariants on the stub: one released
// dataset per title, carrying the user's otherId and the marker, each file
// once with the right bytes, no draft, nothing duplicated; it returns the
// persistent identifiers by title.
func checkPublishedOnce(t *testing.T, dv *repotest.Dataverse, sums map[string]map[string]string) map[string]string {
	t.Helper()
	pids := map[string]string{}
	all := dv.Datasets()
	require.Len(t, all, len(sums), "one dataset per payload")
	for _, ds := range all {
		require.Equal(t, "RELEASED", ds.VersionState, ds.PersistentID)
		require.Len(t, ds.OtherIDs, 2, "the user's otherId and the marker")
		title := strings.TrimPrefix(ds.OtherIDs[0], "LAB-")
		require.Contains(t, sums, title)
		require.NotContains(t, pids, title, "a second dataset of %s", title)
		pids[title] = ds.PersistentID
		require.Len(t, ds.Files, 2, "each file once: %+v", ds.Files)
		for _, f := range ds.Files {
			path := f.Label
			if f.DirectoryLabel != "" {
				path = f.DirectoryLabel + "/" + f.Label
			}
			require.Contains(t, sums[title], path, ds.PersistentID)
			require.Equal(t, sums[title][path], f.MD5, "%s %s", ds.PersistentID, path)
		}
	}
	s := dv.Stats()
	require.Zero(t, s.DuplicateMarkers)
	require.Zero(t, s.DuplicateFiles)
	require.Zero(t, s.RenamedFiles)
	require.Zero(t, s.Drafts)
	return pids
}

// sums2Pids are the persistent identifiers of the datasets of a batch.
func sums2Pids(dv *repotest.Dataverse, batch map[string]map[string]string) map[string]string {
	pids := map[string]string{}
	for _, ds := range dv.Datasets() {
		if title := strings.TrimPrefix(ds.OtherIDs[0], "LAB-"); batch[title] != nil {
			pids[title] = ds.PersistentID
		}
	}
	return pids
}

// checkRowsDone checks that every store row is done, and that the
// deposits' rows name the datasets' persistent identifiers.
func checkRowsDone(t *testing.T, db string, pids map[string]string) {
	t.Helper()
	r := deposit(t, nil, "status", "--db", db, "--list", "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	known := map[string]bool{}
	for _, pid := range pids {
		known[pid] = true
	}
	deposits := 0
	for _, row := range jsonLines(t, r.stdout) {
		require.Equal(t, "done", row["state"], "%v", row)
		if strings.HasPrefix(row["target"].(string), dataverse.Protocol+" ") {
			deposits++
			require.True(t, known[row["identifier"].(string)], "%v", row)
		}
	}
	require.Equal(t, len(pids), deposits)
}

// runDV is a deposit run process against endpoint on db.
func runDV(t *testing.T, endpoint, db, input, data string) *process {
	t.Helper()
	p := &process{cmd: dvCommand(endpoint, db, input, data), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

// dvCommand is the deposit run command against endpoint on db.
func dvCommand(endpoint, db, input, data string) *exec.Cmd {
	args := []string{"run", "--protocol", "dataverse", "--endpoint", endpoint, "--collection", "root",
		"--datasets", data, "--settle", "20ms", "--lock-wait", "5s", "--max-attempts", "12", "--concurrency", "8",
		"--db", db, "--json", input}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=" + dvToken}
	return cmd
}

// untilDone runs until exit 0, at most ten times.
func untilDone(t *testing.T, run func() *process) *process {
	t.Helper()
	last := ""
	for round := 1; ; round++ {
		require.LessOrEqual(t, round, 10, "the batch never finished; the last run said:\n%s", last)
		p := run()
		code := p.wait(t)
		require.Contains(t, []int{exitDone, exitUnresolved}, code, p.stderr.String())
		if code == exitDone {
			return p
		}
		last = p.stderr.String()
	}
}

// Faults at every step (answers dropped after the write committed, 503,
// 500, 429, 504 after a publish was accepted; on reads too), two runs
// SIGKILLed at writes that took effect, then runs until exit 0
// (drivertest's harness): one published dataset per payload with each
// file once and the right bytes, no second dataset, no draft left, every
// store row done with the server's identifiers, and a replay sends
// nothing. Also with a search index that never shows some datasets. Then
// two processes share the store, and the store is lost: nothing new is
// created, though search never shows some of the datasets (the scan of
// the collection finds them).
func TestKilledDataverseRunsPublishEachDatasetOnce(t *testing.T) {
	for _, unindexed := range []float64{0, 0.3} {
		t.Run(fmt.Sprintf("unindexed %v", unindexed), func(t *testing.T) {
			dv, err := repotest.NewDataverse(repotest.DataverseConfig{
				Token: dvToken, Seed: 5, Unindexed: unindexed, IndexLag: 20 * time.Millisecond, PublishLag: 20 * time.Millisecond,
				Faults: "drop=0.08,503=0.05,500=0.05,429=0.05,504=0.05,reads",
			})
			require.NoError(t, err)
			srv := httptest.NewServer(dv)
			t.Cleanup(srv.Close)
			t.Cleanup(func() { dv.Close() })
			dir := t.TempDir()
			const n = 40
			input, sums := dvBatch(t, dir, "Survey", n)
			data := filepath.Join(dir, "data")

			report := drivertest.Harness{
				Handler: dv,
				Command: func(c drivertest.Child) *exec.Cmd { return dvCommand(c.Endpoint, c.Store, input, data) },
				KillAt:  []int64{25, 85},
				Check: func([][]byte) error {
					if s := dv.Stats(); s.Faults == 0 {
						return fmt.Errorf("no fault was injected: %+v", s)
					}
					return nil
				},
			}.Run(t)
			require.Equal(t, 2, report.Kills)
			pids := checkPublishedOnce(t, dv, sums)
			checkRowsDone(t, report.Store, pids)
			db := report.Store
			run := func() *process { return runDV(t, srv.URL, db, input, data) }

			t.Run("two processes on one store", func(t *testing.T) {
				shared := filepath.Join(dir, "shared.db")
				input2, sums2 := dvBatch(t, filepath.Join(dir, "second"), "Census", n)
				for title, s := range sums2 {
					sums[title] = s
				}
				data2 := filepath.Join(dir, "second", "data")
				runShared := func() *process { return runDV(t, srv.URL, shared, input2, data2) }
				both := []*process{runShared(), runShared()} // started at once, on one store
				for _, p := range both {
					require.Contains(t, []int{exitDone, exitUnresolved}, p.wait(t), p.stderr.String())
				}
				untilDone(t, runShared)
				checkPublishedOnce(t, dv, sums)
				checkRowsDone(t, shared, sums2Pids(dv, sums2))
			})
			t.Run("a lost store", func(t *testing.T) {
				require.NoError(t, os.Remove(db))
				before := dv.Stats()
				untilDone(t, run)
				after := dv.Stats()
				require.Equal(t, before.Datasets, after.Datasets, "no new dataset")
				require.Zero(t, after.DuplicateMarkers, "no dataset created twice")
				require.Equal(t, before.Files, after.Files, "no file added")
				require.Equal(t, before.Publishes, after.Publishes, "no publish accepted again")
				t.Logf("a lost store: %.1f requests per dataset (faults included)", float64(after.Requests-before.Requests)/n)
			})
		})
	}
}

// deposit serve --protocol dataverse and the matching deposit run, as the
// docs give them: the run publishes the dataset, and the server's counters
// say so.
func TestServeAndRunDataverse(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--protocol", "dataverse", "--addr", "127.0.0.1:0", "--index-lag", "10ms", "--publish-lag", "10ms")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	rd := bufio.NewReader(out)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	_, rest, _ := strings.Cut(line, "listening on ")
	url, _, _ := strings.Cut(rest, " ")
	dir := t.TempDir()
	input, _ := dvBatch(t, dir, "Survey", 2)
	r := deposit(t, nil, "run", "--protocol", "dataverse", "--endpoint", url, "--collection", "root",
		"--datasets", filepath.Join(dir, "data"), "--db", filepath.Join(dir, "d.db"), "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 2, summaryOf(t, r.stdout).Created)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest2, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	require.Contains(t, string(rest2), "2 datasets created, 2 released, 4 files added, 0 duplicate markers, 0 duplicate files")
}
