package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/protocol"
)

// The command line's table of targets has one entry per protocol name, and
// each flag an entry claims is a flag of deposit run.
func TestEveryProtocolHasOneTargetSpec(t *testing.T) {
	require.Len(t, targetSpecs, len(protocol.Names()))
	run := runFlags(t)
	for _, name := range protocol.Names() {
		spec, ok := targetSpecs[name]
		require.True(t, ok, "no spec for %s", name)
		require.NotNil(t, spec.build, name)
		for _, f := range spec.flags {
			require.True(t, run[f], "%s claims --%s, which deposit run does not have", name, f)
		}
	}
	require.Equal(t, []string{protocol.Put, protocol.WebDAV, protocol.S3, protocol.CouchDB}, probed())
	var files []string
	for _, name := range protocol.Names() {
		if targetSpecs[name].storesFiles {
			files = append(files, name)
		}
	}
	require.Equal(t, []string{protocol.S3, protocol.CouchDB, protocol.Invenio, protocol.Dataverse, protocol.OSF, protocol.Figshare}, files, "the targets that store a dataset's files")
}

// runFlags names deposit run's flags, as its help lists them.
func runFlags(t *testing.T) map[string]bool {
	t.Helper()
	r := deposit(t, nil, "run", "-h")
	require.Equal(t, exitDone, r.code)
	flags := map[string]bool{}
	for line := range strings.Lines(r.stdout) {
		if name, ok := strings.CutPrefix(line, "  --"); ok {
			name, _, _ = strings.Cut(strings.TrimSpace(name), " ")
			flags[name] = true
		}
	}
	require.True(t, flags["endpoint"], "deposit run -h lists no flags:\n%s", r.stdout)
	return flags
}

// A flag of one target given with another is refused, never ignored.
func TestAnotherTargetsFlagIsRefused(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", `{"a":1}`)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--protocol", "put", "--no-publish"}, "--no-publish is a flag of --protocol invenio, not of put"},
		{[]string{"--protocol", "webdav", "--doi-prefix", "10.5072"}, "--doi-prefix is a flag of --protocol datacite, not of webdav"},
		{[]string{"--protocol", "invenio", "--id-pointer", "/id"}, "--id-pointer is a flag of --protocol put, not of invenio"},
	}
	for _, tt := range tests {
		args := append([]string{"run", "--endpoint", "http://127.0.0.1:9/x", "--db", dir + "/d.db"}, tt.args...)
		r := deposit(t, nil, append(args, input)...)
		require.Equal(t, exitStop, r.code, r.stderr)
		require.Contains(t, r.stderr, tt.want)
	}
	// A flag two targets share is taken by both.
	r := deposit(t, nil, "run", "--protocol", "idempotency-key", "--id-pointer", "/x", "--endpoint", "http://127.0.0.1:9/x", "--db", dir+"/d.db", input)
	require.NotContains(t, r.stderr, "is a flag of")
	require.True(t, slices.Contains(targetSpecs[protocol.IdempotencyKey].flags, "id-pointer"))
}
