package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/repotest"
)

// A line written unresolved whose key a later line settles is written
// again, with "follow_up": true and its final outcome; the summary counts
// it once, by that outcome.
func TestResultsFollowUpALineSettledLater(t *testing.T) {
	// Every key's first request is refused with a 500 and, with one
	// attempt, left unresolved; line 3 is line 1's payload again, and its
	// request is that key's second.
	srv := newServer(t, repotest.Config{Faults: "nth=1:500"})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", `{"title":"a","n":1}`, `{"title":"b","n":2}`, `{"n":1,"title":"a"}`)
	results := filepath.Join(dir, "results.jsonl")
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"),
		"--concurrency", "1", "--max-attempts", "1", "--results", results, "--json", input)
	require.Equal(t, exitUnresolved, r.code, r.stderr)

	text, err := os.ReadFile(results)
	require.NoError(t, err)
	objs := jsonLines(t, string(text))
	require.Len(t, objs, 4, string(text))
	// Items may start out of input order, so lines 1 and 3 may swap roles:
	// the first of them sent is the one followed up.
	var order []string
	for _, o := range objs {
		order = append(order, outcomeOf(o))
	}
	fu := slices.IndexFunc(objs, func(o map[string]any) bool { return o["follow_up"] == true })
	require.Positive(t, fu, "a follow-up, after the line it follows up: %v", order)
	first := line(objs[fu])
	require.Contains(t, []int{1, 3}, first, order)
	settler := 4 - first
	require.ElementsMatch(t, []string{fmt.Sprintf("%d unresolved", first), "2 unresolved", fmt.Sprintf("%d created", settler),
		fmt.Sprintf("%d replayed follow_up", first)}, order)
	require.Less(t, slices.Index(order, fmt.Sprintf("%d unresolved", first)), fu-1, "written unresolved as soon as known: %v", order)
	require.Equal(t, fmt.Sprintf("%d created", settler), order[fu-1], "the follow-up comes right after the line that settled its key")
	require.Equal(t, objs[fu-1]["identifier"], objs[fu]["identifier"])
	require.Equal(t, objs[fu-1]["key"], objs[fu]["key"])
	require.Contains(t, r.stderr, fmt.Sprintf("line %d: now replayed: ", first))

	s := summaryOf(t, r.stdout)
	require.Equal(t, summaryJSON{Total: 3, Created: 1, Replayed: 1, Unresolved: 1, Requests: 3, ElapsedMS: s.ElapsedMS}, s,
		"line 1 counts as replayed, not also as unresolved")
	require.Equal(t, int64(3), srv.Stats().Requests)
}

// outcomeOf is a --results object as "LINE OUTCOME", with " follow_up" for
// a follow-up.
func outcomeOf(o map[string]any) string {
	s := fmt.Sprintf("%d %s", line(o), o["outcome"])
	if o["follow_up"] == true {
		s += " follow_up"
	}
	return s
}

// line is the line number of a --results object.
func line(o map[string]any) int { return int(o["line"].(float64)) }

// A run killed with SIGKILL leaves in --results every result it had
// delivered, unresolved ones included, each a whole JSON object: an item
// is written when its result is known, not held until the batch ends.
func TestAKilledRunsResultsHoldEveryResultItReported(t *testing.T) {
	srv := newServer(t, repotest.Config{Faults: "500=0.2", Seed: 11, Latency: 2 * time.Millisecond})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	crashInput(t, input, 5000)
	results := filepath.Join(dir, "results.jsonl")
	p := start(t, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--max-attempts", "1",
		"--results", results, input)

	const written = 300
	waitUntil(func() bool {
		b, err := os.ReadFile(results)
		return err == nil && bytes.Count(b, []byte("\n")) >= written
	})
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, -1, p.wait(t), "killed mid-run")

	text, err := os.ReadFile(results)
	require.NoError(t, err)
	require.True(t, bytes.HasSuffix(text, []byte("\n")), "the file ends with a whole line")
	objs := jsonLines(t, string(text)) // each line a whole JSON object
	require.GreaterOrEqual(t, len(objs), written)
	require.Less(t, len(objs), 5000, "the run was killed before its end")

	onServer := map[string]bool{}
	for _, rec := range srv.Records() {
		onServer[rec.Key] = true
	}
	unresolved := map[float64]bool{} // lines, by number
	unresolvedKeys := map[string]bool{}
	for _, o := range objs {
		line, key := o["line"].(float64), o["key"].(string)
		switch {
		case o["follow_up"] == true:
			require.True(t, unresolved[line], "a follow-up comes after its line's unresolved object: %v", o)
			require.True(t, onServer[key], "a line followed up as settled has its record on the server: %v", o)
		case o["outcome"] == "unresolved":
			unresolved[line] = true
			unresolvedKeys[key] = true
		default:
			require.Contains(t, []any{"created", "existing", "replayed"}, o["outcome"], o)
			require.True(t, onServer[key], "a line written done has its record on the server: %v", o)
		}
	}
	require.NotEmpty(t, unresolved, "the unresolved items known before the kill are in the file")
	require.GreaterOrEqual(t, srv.Stats().FaultsByKind["500"], int64(len(unresolvedKeys)),
		"each key written unresolved met a 500 on the server")

	// Every item the terminal named unresolved is in the file.
	logged := regexp.MustCompile(`(?m)^line (\d+): unresolved: `).FindAllStringSubmatch(p.stderr.String(), -1)
	require.NotEmpty(t, logged)
	for _, m := range logged {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.True(t, unresolved[float64(n)], "line %d was reported unresolved on stderr but is not in --results", n)
	}
}

// BenchmarkResultsWrite measures what --results costs an item: one JSON
// object marshalled and written with a write(2) of its own, so that a
// killed process leaves every result it delivered in the file.
func BenchmarkResultsWrite(b *testing.B) {
	rw, err := createResults(filepath.Join(b.TempDir(), "results.jsonl"))
	require.NoError(b, err)
	r := client.ItemResult{Line: 1, Result: client.Result{
		Key:     "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
		Outcome: client.OutcomeCreated, Identifier: "10.5072/dk.1be6k8ij6dzad", Status: 201,
	}}
	b.ReportAllocs()
	for b.Loop() {
		rw.write(r)
	}
	require.NoError(b, rw.close())
}
