package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/repotest"
)

// A line that holds a JSON value but no document is invalid, named by its
// line number, and the other lines are deposited: a bare string, number,
// true, false or null for every target, and an array for the targets whose
// payload is a record (DataCite, InvenioRDM, CouchDB); put,
// idempotency-key, WebDAV and S3 store an array as the document it is.
func TestRunRefusesAPayloadThatIsNotADocument(t *testing.T) {
	dataciteMeta := func(title string) string {
		return `{"titles":[{"title":"` + title + `"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Lab",` +
			`"publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://reef.example.org/` + title + `"}`
	}
	invenioMeta := func(title string) string {
		return `{"metadata":{"title":"` + title + `","creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-12-01","resource_type":{"id":"dataset"}}}`
	}
	plain := func(title string) string { return `{"title":"` + title + `"}` }
	for _, tc := range []struct {
		name    string
		record  func(title string) string
		arrayOK bool
		// target gives the run's target flags and environment.
		target func(t *testing.T) ([]string, map[string]string)
	}{
		{"put", plain, true, func(t *testing.T) ([]string, map[string]string) {
			return []string{"--endpoint", newServer(t, repotest.Config{}).URL}, nil
		}},
		{"idempotency-key", plain, true, func(t *testing.T) ([]string, map[string]string) {
			srv := newServer(t, repotest.Config{Protocol: repotest.ProtocolIdempotencyKey})
			return []string{"--protocol", "idempotency-key", "--endpoint", srv.URL}, nil
		}},
		{"webdav", plain, true, func(t *testing.T) ([]string, map[string]string) {
			return []string{"--protocol", "webdav", "--endpoint", peertest.Apache(t)}, nil
		}},
		{"s3", plain, true, func(t *testing.T) ([]string, map[string]string) {
			s3 := peertest.Versity(t)
			env := map[string]string{}
			for _, kv := range s3.Env() {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			return []string{"--protocol", "s3", "--endpoint", strings.TrimRight(s3.Endpoint, "/") + "/" + s3.Bucket}, env
		}},
		{"couchdb", plain, false, func(t *testing.T) ([]string, map[string]string) {
			return []string{"--protocol", "couchdb", "--endpoint", peertest.PouchDB(t)}, nil
		}},
		{"datacite", dataciteMeta, false, func(t *testing.T) ([]string, map[string]string) {
			srv, err := repotest.NewDataCiteServer(repotest.DataCiteConfig{Username: "ORG.REPO", Password: "s3cret"})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			return []string{"--protocol", "datacite", "--endpoint", srv.URL, "--doi-prefix", "10.5072", "--rate", "0"},
				map[string]string{"DATACITE_REPOSITORY_ID": "ORG.REPO", "DATACITE_PASSWORD": "s3cret"}
		}},
		{"invenio", invenioMeta, false, func(t *testing.T) ([]string, map[string]string) {
			srv, err := repotest.NewInvenioServer(repotest.InvenioConfig{Token: "tok3n"})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			return []string{"--protocol", "invenio", "--endpoint", srv.API, "--settle", "1ms", "--rate", "0", "--search-rate", "0"},
				map[string]string{"DEPOSIT_AUTHORIZATION": "tok3n"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, env := tc.target(t)
			dir := t.TempDir()
			input := writeFile(t, dir, "in.jsonl",
				tc.record("first"), // 1
				`"a string"`,       // 2
				`42`,               // 3
				`true`,             // 4
				`false`,            // 5
				`null`,             // 6
				`[1,2,3]`,          // 7
				tc.record("last"),  // 8
			)
			args := append([]string{"run", "--db", filepath.Join(dir, "deposit.db"), "--json"}, target...)
			r := deposit(t, env, append(args, input)...)

			require.Equal(t, exitFailed, r.code, r.stderr)
			bad := []int{2, 3, 4, 5, 6}
			created := 2
			if tc.arrayOK {
				created++
				require.NotContains(t, r.stderr, "line 7: invalid")
			} else {
				bad = append(bad, 7)
			}
			for _, line := range bad {
				require.Contains(t, r.stderr, fmt.Sprintf("line %d: invalid", line))
			}
			s := summaryOf(t, r.stdout)
			require.Equal(t, created, s.Created, r.stderr)
			require.Equal(t, len(bad), s.Invalid, r.stderr)
			require.Equal(t, 8, s.Total)
		})
	}
}

// deposit key and deposit run read one input alike: key prints a key for
// exactly the lines run deposits, and names every line run refuses as
// invalid in the same words, a line that is no document among them.
func TestKeyRefusesTheLinesRunRefusesInTheSameWords(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl",
		`{"title":"first"}`, // 1
		`42`,                // 2
		`"a bare string"`,   // 3
		`null`,              // 4
		`true`,              // 5
		`[1,2,3]`,           // 6: a document under put
		`{"title":`,         // 7
		``,                  // 8
		`{"title":"last"}`,  // 9
	)
	results := filepath.Join(dir, "results.jsonl")

	k := deposit(t, nil, "key", input)
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--results", results, input)

	require.Equal(t, exitFailed, k.code, k.stderr)
	require.Equal(t, exitFailed, r.code, r.stderr)
	invalid := regexp.MustCompile(`(?m)^line \d+: invalid: .*$`)
	keyInvalid, runInvalid := invalid.FindAllString(k.stderr, -1), invalid.FindAllString(r.stderr, -1)
	require.Len(t, keyInvalid, 5, k.stderr)
	require.ElementsMatch(t, keyInvalid, runInvalid, "the same lines refused, in the same words")
	require.Contains(t, k.stderr, "line 2: invalid: the payload is a number, not a document: want a JSON object or array")
	require.Contains(t, k.stderr, "line 3: invalid: the payload is a string, not a document: want a JSON object or array")

	text, err := os.ReadFile(results)
	require.NoError(t, err)
	var deposited []string
	for _, o := range jsonLines(t, string(text)) {
		if o["outcome"] != "invalid" {
			deposited = append(deposited, fmt.Sprintf("%d\t%s", int(o["line"].(float64)), o["key"]))
		}
	}
	require.ElementsMatch(t, deposited, strings.Split(strings.TrimSpace(k.stdout), "\n"), "key prints the key of each line run deposits")
}
