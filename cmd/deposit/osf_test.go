package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/osf"
)

const osfToken = "osf-t0ken"

// osfBatch writes n projects of two files each under dir and their lines;
// it returns the input file and each file's SHA-256 by title and name.
func osfBatch(t *testing.T, dir, prefix string, n int) (string, map[string]map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "data")
	sums := map[string]map[string]string{}
	var lines []string
	for i := range n {
		title := fmt.Sprintf("%s %03d", prefix, i)
		sums[title] = map[string]string{}
		for _, name := range []string{"a.txt", "b.csv"} {
			p := filepath.Join(data, fmt.Sprint(i), name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			content := fmt.Appendf(nil, "%s of %s\n", name, title)
			require.NoError(t, os.WriteFile(p, content, 0o600))
			sum := sha256.Sum256(content)
			sums[title][name] = hex.EncodeToString(sum[:])
		}
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":%q,"description":"Birds.","tags":["birds"]},"files":["%d/a.txt","%d/b.csv"]}`, title, i, i))
	}
	return writeFile(t, dir, "projects.jsonl", lines...), sums
}

// checkOSFOnce checks the invariants on the stub: one public node with a
// DOI per title, tagged with the user's tag and one marker, each file
// once (one version) with its bytes, no other node; it returns the DOIs
// by title.
func checkOSFOnce(t *testing.T, o *repotest.OSF, sums map[string]map[string]string) map[string]string {
	t.Helper()
	dois := map[string]string{}
	nodes := o.Nodes()
	require.Len(t, nodes, len(sums), "one node per payload, no orphan")
	for _, n := range nodes {
		require.Contains(t, sums, n.Title)
		require.NotContains(t, dois, n.Title, "a second node of %s", n.Title)
		require.True(t, n.Public, n.ID)
		require.NotEmpty(t, n.DOI, n.ID)
		dois[n.Title] = n.DOI
		require.Len(t, n.Tags, 2, "the user's tag and the marker: %v", n.Tags)
		require.True(t, strings.HasPrefix(n.Tags[1], "deposit:sha256:"), n.Tags)
		require.Len(t, n.Files, 2, "each file once: %+v", n.Files)
		for _, f := range n.Files {
			require.Equal(t, sums[n.Title][f.Name], f.SHA256, "%s %s", n.ID, f.Name)
			require.Equal(t, 1, f.Versions, "%s %s uploaded again as a version", n.ID, f.Name)
		}
	}
	s := o.Stats()
	require.Zero(t, s.DuplicateMarkers)
	require.Zero(t, s.Versions)
	return dois
}

// osfCommand is the deposit run command against endpoint on db.
func osfCommand(endpoint, db, input, data string) *exec.Cmd {
	args := []string{"run", "--protocol", "osf", "--endpoint", endpoint + "/v2", "--datasets", data, "--public", "--doi",
		"--settle", "20ms", "--rate", "0", "--max-attempts", "12", "--concurrency", "8", "--db", db, "--json", input}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=" + osfToken}
	return cmd
}

func runOSF(t *testing.T, endpoint, db, input, data string) *process {
	t.Helper()
	p := &process{cmd: osfCommand(endpoint, db, input, data), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

// checkOSFRows checks that every store row is done and that the deposits'
// rows name the nodes' DOIs.
func checkOSFRows(t *testing.T, db string, dois map[string]string) {
	t.Helper()
	r := deposit(t, nil, "status", "--db", db, "--list", "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	known := slices.Collect(func(yield func(string) bool) {
		for _, d := range dois {
			if !yield(d) {
				return
			}
		}
	})
	deposits := 0
	for _, row := range jsonLines(t, r.stdout) {
		require.Equal(t, "done", row["state"], "%v", row)
		if strings.HasPrefix(row["target"].(string), osf.Protocol+" ") {
			deposits++
			require.Contains(t, known, row["identifier"], "%v", row)
		}
	}
	require.Equal(t, len(dois), deposits)
}

// Faults at every step (answers lost after the write committed, 503, 500,
// 429, 504; on reads too), a node listing that lags, two runs SIGKILLed at
// writes that took effect, then runs until exit 0 (drivertest's harness):
// one public node with a DOI per payload, each file once with its bytes
// and never a second version, no other node, every store row done, and a
// replay sends nothing. Then two processes share a store, and the store
// is lost: nothing new is created, no file re-uploaded, no DOI minted.
func TestKilledOSFRunsDepositEachProjectOnce(t *testing.T) {
	o, err := repotest.NewOSF(repotest.OSFConfig{Token: osfToken, Seed: 7, ListLag: 15 * time.Millisecond,
		Faults: "drop=0.08,503=0.05,500=0.05,429=0.05:retry-after=1,504=0.05,reads"})
	require.NoError(t, err)
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { o.Close() })
	dir := t.TempDir()
	const n = 30
	input, sums := osfBatch(t, dir, "Survey", n)
	data := filepath.Join(dir, "data")

	report := drivertest.Harness{
		Handler: o,
		Command: func(c drivertest.Child) *exec.Cmd { return osfCommand(c.Endpoint, c.Store, input, data) },
		KillAt:  []int64{20, 70},
		Check: func([][]byte) error {
			if s := o.Stats(); s.Faults == 0 {
				return fmt.Errorf("no fault was injected: %+v", s)
			}
			return nil
		},
	}.Run(t)
	require.Equal(t, 2, report.Kills)
	dois := checkOSFOnce(t, o, sums)
	checkOSFRows(t, report.Store, dois)
	db := report.Store

	t.Run("two processes on one store", func(t *testing.T) {
		shared := filepath.Join(dir, "shared.db")
		input2, sums2 := osfBatch(t, filepath.Join(dir, "second"), "Census", n)
		maps2 := map[string]string{}
		for title, s := range sums2 {
			sums[title] = s
		}
		data2 := filepath.Join(dir, "second", "data")
		runShared := func() *process { return runOSF(t, srv.URL, shared, input2, data2) }
		both := []*process{runShared(), runShared()}
		for _, p := range both {
			require.Contains(t, []int{exitDone, exitUnresolved}, p.wait(t), p.stderr.String())
		}
		untilDone(t, runShared)
		all := checkOSFOnce(t, o, sums)
		for title := range sums2 {
			maps2[title] = all[title]
		}
		checkOSFRows(t, shared, maps2)
	})
	t.Run("a lost store", func(t *testing.T) {
		require.NoError(t, os.Remove(db))
		before := o.Stats()
		untilDone(t, func() *process { return runOSF(t, srv.URL, db, input, data) })
		after := o.Stats()
		require.Equal(t, before.Nodes, after.Nodes, "no new node")
		require.Equal(t, before.Files, after.Files, "no file added")
		require.Equal(t, before.DOIs, after.DOIs, "no DOI minted again")
		checkOSFOnce(t, o, sums)
		t.Logf("a lost store: %.1f requests per project (faults included)", float64(after.Requests-before.Requests)/n)
	})
}

// deposit serve --protocol osf and the matching deposit run, as the docs
// give them: the run creates the projects, and the counters say so.
func TestServeAndRunOSF(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--protocol", "osf", "--addr", "127.0.0.1:0")
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
	input, _ := osfBatch(t, dir, "Survey", 2)
	r := deposit(t, nil, "run", "--protocol", "osf", "--endpoint", url+"/v2", "--datasets", filepath.Join(dir, "data"),
		"--public", "--doi", "--db", filepath.Join(dir, "d.db"), "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 2, summaryOf(t, r.stdout).Created)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest2, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	require.Contains(t, string(rest2), "2 nodes created, 0 duplicate markers, 4 files, 0 versions added, 0 names refused, 2 made public, 2 DOIs")
}
