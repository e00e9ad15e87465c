package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
)

// An https:// endpoint whose server speaks plain HTTP fails every TLS
// handshake, so no request reaches it: the run stops at its first request
// and says to check the scheme, retries nothing and keeps no intent.
// Before, it retried the handshake 516 times and left every line pending.
func TestAnHTTPSEndpointOfAPlainServerStopsAtOnce(t *testing.T) {
	srv := newServer(t, repotest.Config{})
	endpoint := "https" + strings.TrimPrefix(srv.URL, "http")
	dir := t.TempDir()
	input := writeFile(t, dir, "in.jsonl", payloads(200)...)
	db := filepath.Join(dir, "d.db")
	r := deposit(t, nil, "run", "--endpoint", endpoint, "--db", db, "--json", input)
	require.Equal(t, exitStop, r.code, r.stderr)
	require.Equal(t, "deposit run: stopped: the endpoint "+endpoint+" is unreachable: the server there speaks plain HTTP, not HTTPS: check the scheme of --endpoint",
		lastLine(r.stderr))
	s := summaryOf(t, r.stdout)
	require.Equal(t, 0, s.Retries)
	require.Empty(t, storeRows(t, db), "no request reached the server: no intent stays")
	require.Equal(t, int64(0), srv.Stats().Requests)
}
