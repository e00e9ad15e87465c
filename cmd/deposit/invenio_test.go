package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
			"--rate", "1000", "--max-attempts", "4", "--db", db, "--results", results, "--json", input}
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

	t.Run("no token is a usage error", func(t *testing.T) {
		r := deposit(t, nil, args(filepath.Join(dir, "other.db"))...)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "DEPOSIT_AUTHORIZATION")
	})
	t.Run("a wrong token stops the run", func(t *testing.T) {
		r := deposit(t, map[string]string{"DEPOSIT_AUTHORIZATION": "n0tmine"}, args(filepath.Join(dir, "other2.db"))...)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "403")
		require.NotContains(t, r.stderr, "n0tmine")
	})
}
