package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/datacite"
)

// The command mints one DOI per distinct line through the DataCite stub,
// with credentials from the environment, publishes each once, and reports
// every line's DOI in --results; a re-run sends nothing.
func TestRunMintsDOIsOnceWithDataCite(t *testing.T) {
	srv, err := repotest.NewDataCiteServer(repotest.DataCiteConfig{
		Username: "ORG.REPO", Password: "s3cret", Faults: "drop=0.2,429=0.1", Seed: 5,
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	env := map[string]string{"DATACITE_REPOSITORY_ID": "ORG.REPO", "DATACITE_PASSWORD": "s3cret"}
	dir := t.TempDir()
	meta := func(title string) string {
		return `{"titles":[{"title":"` + title + `"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Lab",` +
			`"publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://reef.example.org/` + strings.ReplaceAll(title, " ", "-") + `"}`
	}
	lines := []string{
		meta("Reef temperature"),
		meta("Kelp cover"),
		" " + meta("Reef temperature") + " ", // the same deposit
	}
	input := writeFile(t, dir, "metadata.jsonl", lines...)
	db := filepath.Join(dir, "dois.db")
	results := filepath.Join(dir, "dois.jsonl")
	args := []string{"run", "--protocol", "datacite", "--endpoint", srv.URL, "--doi-prefix", "10.5072",
		"--event", "publish", "--rate", "1000", "--db", db, "--results", results, "--json", input}

	r := deposit(t, env, args...)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, env, args...)
	}
	require.Equal(t, exitDone, r.code, r.stderr)
	require.NotContains(t, r.stderr+r.stdout, "s3cret")

	st := srv.Stats()
	require.Equal(t, int64(2), st.Minted, "one DOI per distinct line")
	require.Equal(t, int64(2), st.Events, "each published once")
	var findable []string
	for _, d := range srv.DOIs() {
		require.Equal(t, "findable", d.State)
		findable = append(findable, d.DOI)
	}
	data, err := os.ReadFile(results)
	require.NoError(t, err)
	rows := jsonLines(t, string(data))
	require.Len(t, rows, 3)
	for _, row := range rows {
		doi := row["identifier"].(string)
		want, err := datacite.DOI("10.5072", row["key"].(string))
		require.NoError(t, err)
		require.Equal(t, want, doi)
		require.Contains(t, findable, doi)
		require.True(t, strings.HasPrefix(doi, "10.5072/dk-"), doi)
	}

	before := srv.Stats().Requests
	r = deposit(t, env, args...)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 3, summaryOf(t, r.stdout).Replayed)
	require.Equal(t, before, srv.Stats().Requests, "a re-run sends nothing")

	t.Run("wrong credentials stop the run", func(t *testing.T) {
		bad := map[string]string{"DATACITE_REPOSITORY_ID": "ORG.REPO", "DATACITE_PASSWORD": "wrong"}
		r := deposit(t, bad, "run", "--protocol", "datacite", "--endpoint", srv.URL, "--doi-prefix", "10.5072",
			"--db", filepath.Join(dir, "other.db"), input)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, "credentials")
		require.NotContains(t, r.stderr, "wrong")
	})
}
