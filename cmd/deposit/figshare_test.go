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
	"github.com/depositkit/deposit/target/figshare"
)

const (
	fsToken = "fs-t0ken"
	// fsPart is the stub's part size in the tests: each file is several
	// parts.
	fsPart = 64
)

// fsBatch writes n articles of two files each (one in a folder, of
// several parts) under dir and their lines; it returns the input file and
// each file's MD5 by title and name.
func fsBatch(t *testing.T, dir, prefix string, n int) (string, map[string]map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "data")
	sums := map[string]map[string]string{}
	var lines []string
	for i := range n {
		title := fmt.Sprintf("%s %03d", prefix, i)
		sums[title] = map[string]string{}
		var paths []string
		for j, name := range []string{"a.txt", "sub/b.csv"} {
			p := filepath.Join(data, fmt.Sprint(i), filepath.FromSlash(name))
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			content := []byte(strings.Repeat(fmt.Sprintf("%s of %s\n", name, title), 6+3*j+i%4))
			require.NoError(t, os.WriteFile(p, content, 0o600))
			sum := md5.Sum(content)
			sums[title][filepath.Base(name)] = hex.EncodeToString(sum[:])
			paths = append(paths, fmt.Sprint(i)+"/"+name)
		}
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":%q,"description":"Birds.","defined_type":"dataset","tags":["birds"]},"files":["%s"]}`,
			title, strings.Join(paths, `","`)))
	}
	return writeFile(t, dir, "articles.jsonl", lines...), sums
}

// checkArticlesOnce checks the invariants on the stub: one public article
// per title, with the user's tag and the marker, published once, each file
// once, completed with the right bytes, no draft, nothing duplicated; it
// returns the DOIs by title.
func checkArticlesOnce(t *testing.T, f *repotest.Figshare, sums map[string]map[string]string) map[string]string {
	t.Helper()
	dois := map[string]string{}
	all := f.Articles()
	require.Len(t, all, len(sums), "one article per payload")
	for _, a := range all {
		require.Contains(t, sums, a.Title)
		require.NotContains(t, dois, a.Title, "a second article of %s", a.Title)
		require.True(t, a.Public, a.ID)
		require.Equal(t, 1, a.Versions, "published once: %d", a.ID)
		require.Len(t, a.Tags, 2, "the user's tag and the marker")
		require.True(t, strings.HasPrefix(a.Tags[1], "deposit-sha256-"), a.Tags)
		dois[a.Title] = a.DOI
		require.Len(t, a.Files, 2, "each file once: %+v", a.Files)
		for _, fl := range a.Files {
			require.True(t, fl.Completed, "%d %s", a.ID, fl.Name)
			require.Equal(t, sums[a.Title][fl.Name], fl.Computed, "%d %s", a.ID, fl.Name)
		}
	}
	s := f.Stats()
	require.Zero(t, s.DuplicateMarkers)
	require.Zero(t, s.DuplicateFiles)
	require.Zero(t, s.Drafts)
	return dois
}

// fsDOIs are the DOIs of the articles of a batch.
func fsDOIs(f *repotest.Figshare, batch map[string]map[string]string) map[string]string {
	dois := map[string]string{}
	for _, a := range f.Articles() {
		if batch[a.Title] != nil {
			dois[a.Title] = a.DOI
		}
	}
	return dois
}

// checkFigshareRows checks that every store row is done, and that the
// deposits' rows name the articles' DOIs.
func checkFigshareRows(t *testing.T, db string, dois map[string]string) {
	t.Helper()
	r := deposit(t, nil, "status", "--db", db, "--list", "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	known := map[string]bool{}
	for _, doi := range dois {
		known[doi] = true
	}
	deposits := 0
	for _, row := range jsonLines(t, r.stdout) {
		require.Equal(t, "done", row["state"], "%v", row)
		if strings.HasPrefix(row["target"].(string), figshare.Protocol+" ") {
			deposits++
			require.True(t, known[row["identifier"].(string)], "%v", row)
		}
	}
	require.Equal(t, len(dois), deposits)
}

// fsCommand is the deposit run command against endpoint on db.
func fsCommand(endpoint, db, input, data string) *exec.Cmd {
	args := []string{"run", "--protocol", "figshare", "--endpoint", endpoint, "--datasets", data,
		"--min-part-size", fmt.Sprint(fsPart), "--settle", "50ms", "--rate", "0", "--max-attempts", "12", "--concurrency", "8",
		"--db", db, "--json", input}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DEPOSIT_AUTHORIZATION=" + fsToken}
	return cmd
}

func runFS(t *testing.T, endpoint, db, input, data string) *process {
	t.Helper()
	p := &process{cmd: fsCommand(endpoint, db, input, data), stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	return p
}

// Faults at every step (answers dropped after the write committed, 503,
// 500, 429 with Retry-After, on reads too), a search lagging behind the
// creates, runs SIGKILLed at writes that took effect (parts among them),
// then runs until exit 0 (drivertest's harness): one public article per
// payload, published once, each file once with its bytes, no draft, no
// second article, every store row done with the DOIs, and a replay sends
// nothing. Then two processes share a store, and the store is lost:
// nothing new is created, initiated, stored or published (the scan of the
// account finds every article).
func TestKilledFigshareRunsPublishEachArticleOnce(t *testing.T) {
	f, err := repotest.NewFigshare(repotest.FigshareConfig{
		Token: fsToken, Seed: 7, PartSize: fsPart, IndexLag: 20 * time.Millisecond,
		Faults: "drop=0.08,503=0.05,500=0.05,429=0.05,reads",
	})
	require.NoError(t, err)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { f.Close() })
	dir := t.TempDir()
	const n = 30
	input, sums := fsBatch(t, dir, "Survey", n)
	data := filepath.Join(dir, "data")

	report := drivertest.Harness{
		Handler: f,
		Command: func(c drivertest.Child) *exec.Cmd { return fsCommand(c.Endpoint+"/v2", c.Store, input, data) },
		KillAt:  []int64{40, 130, 260},
		Check: func([][]byte) error {
			if s := f.Stats(); s.Faults == 0 || s.Parts <= 2*n*2 {
				return fmt.Errorf("no fault was injected, or no file had several parts: %+v", s)
			}
			return nil
		},
	}.Run(t)
	require.Equal(t, 3, report.Kills)
	dois := checkArticlesOnce(t, f, sums)
	checkFigshareRows(t, report.Store, dois)
	db := report.Store
	run := func() *process { return runFS(t, srv.URL+"/v2", db, input, data) }

	t.Run("two processes on one store", func(t *testing.T) {
		shared := filepath.Join(dir, "shared.db")
		input2, sums2 := fsBatch(t, filepath.Join(dir, "second"), "Census", n)
		for title, s := range sums2 {
			sums[title] = s
		}
		data2 := filepath.Join(dir, "second", "data")
		runShared := func() *process { return runFS(t, srv.URL+"/v2", shared, input2, data2) }
		both := []*process{runShared(), runShared()}
		for _, p := range both {
			require.Contains(t, []int{exitDone, exitUnresolved}, p.wait(t), p.stderr.String())
		}
		untilDone(t, runShared)
		checkArticlesOnce(t, f, sums)
		checkFigshareRows(t, shared, fsDOIs(f, sums2))
	})
	t.Run("a lost store", func(t *testing.T) {
		require.NoError(t, os.Remove(db))
		before := f.Stats()
		untilDone(t, run)
		after := f.Stats()
		require.Equal(t, before.Articles, after.Articles, "no new article")
		require.Equal(t, before.Files, after.Files, "no file initiated")
		require.Equal(t, before.Parts, after.Parts, "no part sent")
		require.Equal(t, before.Publishes, after.Publishes, "no publish again")
		checkArticlesOnce(t, f, sums)
		t.Logf("a lost store: %.1f requests per article (faults included)", float64(after.Requests-before.Requests)/n)
	})
}

// A run killed in the middle of a file's parts, its store kept: the next
// run reads the upload status and sends only the parts not COMPLETE.
func TestFigshareResumesPartsAfterAKill(t *testing.T) {
	f, err := repotest.NewFigshare(repotest.FigshareConfig{Token: fsToken, PartSize: fsPart})
	require.NoError(t, err)
	dir := t.TempDir()
	input, sums := fsBatch(t, dir, "Survey", 1)
	data := filepath.Join(dir, "data")
	report := drivertest.Harness{
		Handler: f,
		Command: func(c drivertest.Child) *exec.Cmd { return fsCommand(c.Endpoint+"/v2", c.Store, input, data) },
		// The writes: the article, the first file's initiate, then its
		// parts: killed after its second part.
		KillAt: []int64{4},
	}.Run(t)
	require.Equal(t, 1, report.Kills)
	checkArticlesOnce(t, f, sums)
	s := f.Stats()
	require.Zero(t, s.PartsAgain, "no part sent twice")
	var parts int64
	for _, a := range f.Articles() {
		for _, fl := range a.Files {
			parts += (fl.Size + fsPart - 1) / fsPart
		}
	}
	require.Equal(t, parts, s.Parts, "each part once")
}

// deposit serve --protocol figshare and the matching deposit run, as the
// docs give them: the run publishes the articles, and the server's
// counters say so.
func TestServeAndRunFigshare(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--protocol", "figshare", "--addr", "127.0.0.1:0", "--index-lag", "10ms", "--part-size", "64")
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
	input, _ := fsBatch(t, dir, "Survey", 2)
	r := deposit(t, nil, "run", "--protocol", "figshare", "--endpoint", url+"/v2", "--datasets", filepath.Join(dir, "data"),
		"--min-part-size", "64", "--rate", "0", "--settle", "50ms", "--db", filepath.Join(dir, "d.db"), "--json", input)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 2, summaryOf(t, r.stdout).Created)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	rest2, err := io.ReadAll(rd)
	require.NoError(t, err)
	require.NoError(t, cmd.Wait())
	require.Contains(t, string(rest2), "2 articles created, 2 publishes, 4 files initiated, 4 completed")
	require.Contains(t, string(rest2), "0 duplicate markers, 0 duplicate files")
}
