package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// A --results that names what the run reads or keeps, however it is
// spelled or linked, is refused before anything is opened for writing:
// exit 2, a message naming both files, the folder's files byte for byte as
// they were, and no request sent. A results file that is merely old is
// overwritten as before.
func TestResultsNeverOverwritesTheInputOrTheStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		// results returns the --results path in dir, beside the store db
		// and the input; it may open the store, to hold its files in use.
		results func(t *testing.T, dir, db, input string) string
		// says is what the refusal names besides --results.
		says string
	}{
		{"the store", func(t *testing.T, dir, db, input string) string { return db }, "is the store --db "},
		{"the store spelled otherwise", func(t *testing.T, dir, db, input string) string {
			return filepath.Join(dir, "..", filepath.Base(dir), ".", "deposit.db")
		}, "is the store --db "},
		{"a hard link to the store", func(t *testing.T, dir, db, input string) string {
			p := filepath.Join(dir, "results.jsonl")
			require.NoError(t, os.Link(db, p))
			return p
		}, "is the store --db "},
		{"a symbolic link to the store", func(t *testing.T, dir, db, input string) string {
			p := filepath.Join(t.TempDir(), "results.jsonl")
			require.NoError(t, os.Symlink(db, p))
			return p
		}, "is the store --db "},
		{"the write-ahead log, not there yet", func(t *testing.T, dir, db, input string) string {
			require.NoFileExists(t, db+"-wal")
			return db + "-wal"
		}, "the write-ahead log of the store --db "},
		{"the write-ahead log of a store in use", func(t *testing.T, dir, db, input string) string {
			holdOpen(t, db)
			require.FileExists(t, db+"-wal")
			return db + "-wal"
		}, "the write-ahead log of the store --db "},
		{"a dangling symbolic link to the shared-memory index", func(t *testing.T, dir, db, input string) string {
			p := filepath.Join(t.TempDir(), "results.jsonl")
			require.NoError(t, os.Symlink(db+"-shm", p))
			return p
		}, "the shared-memory index of the store --db "},
		{"a file in the folder of owner locks", func(t *testing.T, dir, db, input string) string {
			holdOpen(t, db)
			require.DirExists(t, db+"-owners")
			return filepath.Join(db+"-owners", "results.jsonl")
		}, "the folder of owner locks of the store --db "},
		{"the input", func(t *testing.T, dir, db, input string) string { return input }, "is the input "},
		{"a hard link to the input", func(t *testing.T, dir, db, input string) string {
			p := filepath.Join(dir, "results.jsonl")
			require.NoError(t, os.Link(input, p))
			return p
		}, "is the input "},
		{"another program's SQLite database", func(t *testing.T, dir, db, input string) string {
			p := filepath.Join(dir, "notes.db")
			other, err := sql.Open("sqlite", p)
			require.NoError(t, err)
			_, err = other.Exec("CREATE TABLE notes (body TEXT)")
			require.NoError(t, err)
			require.NoError(t, other.Close())
			return p
		}, "is a SQLite database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, repotest.Config{})
			dir := t.TempDir()
			db := filepath.Join(dir, "deposit.db")
			input := writeFile(t, dir, "records.jsonl", payloads(3)...)
			args := func(results string) []string {
				return []string{"run", "--endpoint", srv.URL, "--db", db, "--results", results, input}
			}
			require.Equal(t, exitDone, deposit(t, nil, args(filepath.Join(t.TempDir(), "first.jsonl"))...).code)
			results := tc.results(t, dir, db, input)
			before, requests := filesUnder(t, dir), srv.Stats().Requests

			r := deposit(t, nil, args(results)...)

			require.Equal(t, exitStop, r.code, r.stderr)
			require.Contains(t, r.stderr, "--results "+results+" ")
			require.Contains(t, r.stderr, tc.says)
			if !strings.Contains(tc.says, "SQLite") {
				named := input
				if !strings.Contains(tc.says, "input") {
					named = db
				}
				require.Contains(t, r.stderr, named, "the message names both")
			}
			require.Equal(t, before, filesUnder(t, dir), "every file as it was")
			require.Equal(t, requests, srv.Stats().Requests, "nothing was sent")
		})
	}

	t.Run("an old results file is overwritten", func(t *testing.T) {
		srv := newServer(t, repotest.Config{})
		dir := t.TempDir()
		results := writeFile(t, dir, "results.jsonl", `{"line":1,"outcome":"unresolved"}`, `{"line":9,"outcome":"created"}`)
		input := writeFile(t, dir, "records.jsonl", payloads(2)...)
		r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--results", results, input)
		require.Equal(t, exitDone, r.code, r.stderr)
		text, err := os.ReadFile(results)
		require.NoError(t, err)
		lines := jsonLines(t, string(text))
		require.Len(t, lines, 2)
		for _, l := range lines {
			require.Equal(t, "created", l["outcome"])
		}
	})
}

// A --results that is the file on stdin is refused too, and the file is
// left whole.
func TestResultsNeverOverwritesTheInputOnStdin(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "records.jsonl", payloads(3)...)
	before, err := os.ReadFile(input)
	require.NoError(t, err)
	f, err := os.Open(input)
	require.NoError(t, err)
	defer f.Close()
	var out, errOut bytes.Buffer
	code := realMain(context.Background(), []string{"run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"),
		"--results", input, "-"}, f, &out, &errOut, func(string) string { return "" })
	require.Equal(t, exitStop, code, errOut.String())
	require.Contains(t, errOut.String(), "--results "+input+" is the input (stdin)")
	after, err := os.ReadFile(input)
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.NoFileExists(t, filepath.Join(dir, "deposit.db"), "the store was not even created")
}

// holdOpen opens the store at db and claims a key in it until the test
// ends, so that its write-ahead log, shared-memory index and folder of
// owner locks exist.
func holdOpen(t *testing.T, db string) {
	t.Helper()
	s, err := dedup.Open(db)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	_, err = s.ClaimMany(context.Background(), dedup.Lease{Owner: "test", TTL: time.Minute},
		[]dedup.Intent{{Ref: dedup.Ref{Target: "held", Key: strings.Repeat("ab", 32)}, Body: []byte(`{}`)}})
	require.NoError(t, err)
}

// filesUnder is every file under dir, by path, with its bytes.
func filesUnder(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	}))
	return out
}
