package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// statusJSON is the `status --json` object, as the tests read it.
type statusJSON struct {
	Total, Pending, Done, Failed, Recheck int
	Steps                                 struct{ Total, Pending, Done, Failed int }
	Targets                               []struct {
		Target, Kind, Step, Of       string
		Total, Pending, Done, Failed int
	}
}

// Datasets with files, deposited to the InvenioRDM stub, are counted as
// deposits, one per line; their drafts and file uploads are shown as the
// steps they are, not added to the deposits.
func TestStatusCountsInvenioDepositsNotTheirSteps(t *testing.T) {
	srv, err := repotest.NewInvenioServer(repotest.InvenioConfig{Token: "tok3n", IndexLag: time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	env := map[string]string{"DEPOSIT_AUTHORIZATION": "tok3n"}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	const n, files = 4, 2
	var lines []string
	for i := range n {
		require.NoError(t, os.MkdirAll(filepath.Join(data, fmt.Sprint(i)), 0o755))
		var names []string
		for f := range files {
			name := fmt.Sprintf("%d/t%d.csv", i, f)
			require.NoError(t, os.WriteFile(filepath.Join(data, name), fmt.Appendf(nil, "a,b\n%d,%d\n", i, f), 0o600))
			names = append(names, `"`+name+`"`)
		}
		lines = append(lines, fmt.Sprintf(`{"metadata":{"title":"Survey %d","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}},"files":[%s,%s]}`, i, names[0], names[1]))
	}
	input := writeFile(t, dir, "datasets.jsonl", lines...)
	run := func(db string, extra ...string) {
		t.Helper()
		args := append([]string{"run", "--protocol", "invenio", "--endpoint", srv.API, "--datasets", data, "--settle", "1ms",
			"--rate", "0", "--search-rate", "0", "--db", db}, extra...)
		r := deposit(t, env, append(args, input)...)
		require.Equal(t, exitDone, r.code, r.stderr)
	}

	for _, tc := range []struct {
		name    string
		extra   []string
		primary string // the deposits' step
		steps   map[string]int
	}{
		{"published", nil, "", map[string]int{"draft": n, "file": n * files * 3}},
		{"drafts only", []string{"--no-publish"}, "draft", map[string]int{"file": n * files * 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(dir, tc.name+".db")
			run(db, tc.extra...)

			r := deposit(t, nil, "status", "--db", db)
			require.Equal(t, exitDone, r.code, r.stderr)
			t.Logf("deposit status:\n%s", r.stdout)
			require.Contains(t, r.stdout, fmt.Sprintf("%d deposits: %d done, 0 failed, 0 pending\n", n, n))
			for step, count := range tc.steps {
				require.Contains(t, r.stdout, fmt.Sprintf("    step %s: %d done", step, count))
			}

			r = deposit(t, nil, "status", "--db", db, "--json")
			require.Equal(t, exitDone, r.code, r.stderr)
			var got statusJSON
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
			require.Equal(t, n, got.Total, "deposits")
			require.Equal(t, n, got.Done)
			stepRows := 0
			for _, c := range tc.steps {
				stepRows += c
			}
			require.Equal(t, stepRows, got.Steps.Total)
			require.Equal(t, stepRows, got.Steps.Done)
			deposits := 0
			for _, tg := range got.Targets {
				switch tg.Kind {
				case "deposit":
					deposits++
					require.Equal(t, tc.primary, tg.Step)
					require.Equal(t, n, tg.Total)
				case "step":
					require.Equal(t, tc.steps[tg.Step], tg.Total, tg.Step)
					require.NotEmpty(t, tg.Of, "the deposits' target")
				default:
					t.Fatalf("target %s: kind %q", tg.Target, tg.Kind)
				}
			}
			require.Equal(t, 1, deposits)
		})
	}
}

// Targets are sorted into deposits and steps by name alone: DataCite's
// event step and InvenioRDM's recheck notes are steps of the deposits of
// their endpoint; an InvenioRDM draft is a deposit only where the endpoint
// has no published ones.
func TestGroupTargetsSortsDepositsFromSteps(t *testing.T) {
	c := func(target string, done, pending int) dedup.TargetCounts {
		return dedup.TargetCounts{Target: target, Counts: dedup.Counts{Done: done, Pending: pending}}
	}
	groups := groupTargets([]dedup.TargetCounts{
		c("datacite http://a 10.5072", 5, 0),
		c("datacite-publish http://a 10.5072", 4, 1),
		c("datacite-publish http://a 10.9999", 1, 0),
		c("invenio http://b", 2, 0),
		c("invenio-draft http://b", 3, 0),
		c("invenio-draft http://c", 7, 0),
		c("invenio-file http://c", 21, 0),
		c("invenio-recheck http://c", 0, 2),
		c("idempotency-key http://d", 9, 0),
	})
	type row struct{ kind, step, of string }
	var got [][]row
	for _, g := range groups {
		var rows []row
		if g.deposit != nil {
			rows = append(rows, row{g.deposit.Kind, g.deposit.Step, g.deposit.Of})
		}
		for _, s := range g.steps {
			rows = append(rows, row{s.Kind, s.Step, s.Of})
		}
		got = append(got, rows)
	}
	require.Equal(t, [][]row{
		{{"deposit", "", ""}, {"step", "publish", "datacite http://a 10.5072"}},
		{{"step", "publish", ""}}, // a prefix with no deposits in the store
		{{"deposit", "", ""}, {"step", "draft", "invenio http://b"}},
		{{"deposit", "draft", ""}, {"step", "file", "invenio-draft http://c"}, {"step", "recheck", "invenio-draft http://c"}},
		{{"deposit", "", ""}},
	}, got)
	require.Equal(t, 2, groups[3].steps[1].Recheck, "notes to search again are not pending")
	require.Zero(t, groups[3].steps[1].Pending)
}
