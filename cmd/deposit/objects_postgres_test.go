package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/pgtest"
	"github.com/depositkit/deposit/repotest"
)

// Objects kept in PostgreSQL: a corrected line updates the record once, the
// old file is stale, and deposit status counts them.
func TestObjectsOnPostgres(t *testing.T) {
	db := pgtest.URL(t) + "&schema=objects"
	srv := newServer(t, repotest.Config{Faults: "drop=0.2,500=0.1", Seed: 3})
	dir := t.TempDir()
	v1 := writeFile(t, dir, "v1.jsonl", `{"id":"a","n":1}`, `{"id":"b","n":1}`, `{"id":"c","n":1}`)
	v2 := writeFile(t, dir, "v2.jsonl", `{"id":"a","n":2}`, `{"id":"b","n":1}`, `{"id":"c","n":2}`)
	run := func(input string) summaryJSON {
		t.Helper()
		r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--identity", "/id", "--json", input)
		for round := 1; r.code == exitUnresolved && round < 10; round++ {
			r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--identity", "/id", "--json", input)
		}
		require.Equal(t, exitDone, r.code, r.stderr)
		return summaryOf(t, r.stdout)
	}
	run(v1)
	s := run(v2)
	require.Equal(t, 1, s.Replayed, "b is unchanged")
	s = run(v1)
	require.Equal(t, 2, s.Stale, "a and c are older than what their records hold")
	require.Zero(t, s.Requests)
	st := srv.Stats()
	require.Equal(t, int64(3), st.Records)
	require.Equal(t, int64(2), st.Updates, "each change applied once")

	r := deposit(t, nil, "status", "--db", db)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stdout, "objects: 3, 5 versions applied (3 first, 2 updates), 2 stale lines")

	r = deposit(t, nil, "status", "--db", db, "--objects", "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	var updates, stale int
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3, "one line per object")
	for _, line := range lines {
		var o objectJSON
		require.NoError(t, json.Unmarshal([]byte(line), &o))
		require.NotEmpty(t, o.Version)
		require.NotEmpty(t, o.AppliedAt)
		updates += o.Updates
		stale += o.Stale
	}
	require.Equal(t, 2, updates)
	require.Equal(t, 2, stale)
}
