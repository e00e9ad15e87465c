package client

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
)

// A token in the endpoint's query string goes to the server with every
// request and nowhere else: not into the store file, the store's target
// name, the identifier, the logs or an error.
func TestAQueryTokenIsSentAndNeverKept(t *testing.T) {
	const secret = "QSECRET"
	for _, proto := range []string{protocol.Put, protocol.IdempotencyKey, protocol.WebDAV, protocol.S3, protocol.CouchDB} {
		t.Run(proto+" keeps the token out of the store, the identifier and the logs", func(t *testing.T) {
			srv := newScripted(t, reply{status: 404}, reply{status: 201})
			path := filepath.Join(t.TempDir(), "deposit.db")
			st, err := dedup.Open(path)
			require.NoError(t, err)
			var logs bytes.Buffer
			c, err := New(Config{Target: targetFor(proto, srv.URL+"/recs?community=reef&access_token="+secret),
				Store: st, Retry: fastRetry,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			require.NoError(t, err)

			res, err := c.Deposit(context.Background(), []byte(payload))
			require.NoError(t, err)
			require.Equal(t, "community=reef&access_token="+secret, srv.writes[0].URL.RawQuery, "the token is still sent")
			require.NotContains(t, res.Identifier, secret)
			require.Contains(t, res.Identifier, "?community=reef", "the rest of the query stays in the record URL")
			require.NotContains(t, c.StoreTarget(), secret)
			require.Contains(t, c.StoreTarget(), "access_token=redacted-sha256-")

			_, err = c.Deposit(context.Background(), []byte(payload))
			require.NoError(t, err, "a replay finds the row under the same name")
			require.Equal(t, 1, srv.writeCount())
			require.NoError(t, st.Close())
			require.NotContains(t, logs.String(), secret)
			for _, f := range []string{path, path + "-wal"} {
				b, err := os.ReadFile(f)
				if err == nil {
					require.False(t, bytes.Contains(b, []byte(secret)), "%s holds the token", filepath.Base(f))
				}
			}
		})
	}
	t.Run("an answer that fails names no token", func(t *testing.T) {
		srv := newScripted(t, reply{}, reply{status: 500})
		c, err := New(Config{Target: put.Target{Endpoint: srv.URL + "/recs?token=" + secret}, Store: openStore(t), Retry: fastRetry})
		require.NoError(t, err)
		_, err = c.Deposit(context.Background(), []byte(payload))
		require.ErrorIs(t, err, ErrUnresolved)
		require.NotContains(t, err.Error(), secret)
	})
}

// Target names a store already holds stay the same for every endpoint
// without a credential in its query, so existing stores keep working.
func TestATargetNameWithoutCredentialsIsUnchanged(t *testing.T) {
	for _, ep := range []string{"http://repo.example/recs", "http://repo.example/recs?community=reef&page=2", "http://repo.example/recs?"} {
		c, err := New(Config{Target: put.Target{Endpoint: ep}, Store: openStore(t)})
		require.NoError(t, err)
		require.Equal(t, "put "+ep, c.StoreTarget())
	}
	c, err := New(Config{Target: datacite.Target{Endpoint: "https://api.test.datacite.org?client=x", Prefix: "10.5072"}, Store: openStore(t)})
	require.NoError(t, err)
	require.Equal(t, "datacite https://api.test.datacite.org?client=x 10.5072", c.StoreTarget())
	require.False(t, strings.Contains(c.StoreTarget(), "redacted"))
}

// An endpoint that is not a URL is named as the caller wrote it, without
// percent-encoding and without its query, whatever made it unusable.
func TestABadEndpointIsNamedAsWrittenWithoutItsQuery(t *testing.T) {
	for _, tc := range []struct{ endpoint, want string }{
		{"not a url?token=QSECRET", `endpoint "not a url": scheme must be http or https`},
		{"http://exa mple.org/x?token=QSECRET", `endpoint "http://exa mple.org/x": invalid character " " in host name`},
		{"http:///x?token=QSECRET", `endpoint "http:///x": no host`},
	} {
		_, err := New(Config{Target: put.Target{Endpoint: tc.endpoint}, Store: openStore(t)})
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "QSECRET")
	}
}

// tokenCase is a target of one kind at an endpoint whose query carries
// secret, and one deposit through it.
type tokenCase struct {
	name   string
	config func(t *testing.T, secret string) Config // Target, Header, HTTPClient
	// deposit makes the deposit; it may be called again for a replay.
	deposit func(c *Client) (Result, error)
}

// tokenCases covers every target.
func tokenCases(t *testing.T) []tokenCase {
	var cases []tokenCase
	for _, proto := range []string{protocol.Put, protocol.IdempotencyKey, protocol.WebDAV, protocol.S3, protocol.CouchDB} {
		cases = append(cases, tokenCase{
			name: proto,
			config: func(t *testing.T, secret string) Config {
				srv := newScripted(t, reply{status: 404}, reply{status: 201})
				return Config{Target: targetFor(proto, srv.URL+"/recs?community=reef&access_token="+secret)}
			},
			deposit: func(c *Client) (Result, error) { return c.Deposit(context.Background(), []byte(payload)) },
		})
	}
	cases = append(cases, tokenCase{
		name: protocol.DataCite + " with its publish event",
		config: func(t *testing.T, secret string) Config {
			srv := newStub(t, repotest.DataCiteConfig{})
			return Config{Target: datacite.Target{Endpoint: srv.URL + "?access_token=" + secret, Prefix: testPrefix, Event: "publish"},
				HTTPClient: srv.Client()}
		},
		deposit: func(c *Client) (Result, error) { return c.Deposit(context.Background(), dcPayload(1)) },
	})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.csv"), []byte("depth,temp\n3,27.5\n"), 0o600))
	cases = append(cases, tokenCase{
		name: protocol.Invenio + " with a file",
		config: func(t *testing.T, secret string) Config {
			s := startInvenioStub(t, repotest.InvenioConfig{})
			return Config{Target: invenio.Target{Endpoint: s.API + "?access_token=" + secret, SettleTime: invenioSettle, SearchRate: -1},
				HTTPClient: s.Client(), Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}}
		},
		deposit: func(c *Client) (Result, error) {
			return c.DepositDataset(context.Background(), dir, invenioRecord(1), []string{"data.csv"})
		},
	})
	return cases
}

// sentQueries is a transport that records whether every request carried
// want in its query.
type sentQueries struct {
	next    http.RoundTripper
	want    string
	mu      sync.Mutex
	sent    int
	without int
}

func (s *sentQueries) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.sent++
	if !strings.Contains(req.URL.RawQuery, s.want) {
		s.without++
	}
	s.mu.Unlock()
	return s.next.RoundTrip(req)
}

// requireNoToken fails t if a file of the store at path holds secret.
func requireNoToken(t *testing.T, path, secret string) {
	t.Helper()
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err == nil {
			require.False(t, bytes.Contains(b, []byte(secret)), "%s holds the token", filepath.Base(f))
		}
	}
}

// As the release at commit 07baeba named its targets: InvenioRDM's with
// the endpoint as given, token and all; every other target as today.
// asRelease turns the store at path into one that release wrote: those
// names, and its schema version (3), without the tables added since.
func asRelease(t *testing.T, path, secret string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer db.Close()
	digest := strings.TrimPrefix(credential.Digest("http://x?access_token="+secret), "http://x?access_token=")
	rows, err := db.Query(`SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT IN ('schema_migrations', 'settings', 'records')`)
	require.NoError(t, err)
	var added []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		added = append(added, n)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	stmts := []string{
		`UPDATE records SET target = replace(target, '` + digest + `', '` + secret + `') WHERE target LIKE 'invenio%'`,
		`UPDATE settings SET target = replace(target, '` + digest + `', '` + secret + `') WHERE target LIKE 'invenio%'`,
		// Columns later migrations added, as tables are dropped below.
		`ALTER TABLE settings DROP COLUMN identity_pointers`,
		`DELETE FROM schema_migrations WHERE version > 3`,
		`PRAGMA user_version = 3`,
	}
	for _, table := range added {
		stmts = append(stmts, `DROP TABLE "`+table+`"`)
	}
	for _, q := range stmts {
		_, err := db.Exec(q)
		require.NoError(t, err, q)
	}
}

// Under every target, a token in the endpoint's query goes to the server
// with every request and is never kept; a store the last release wrote
// (07baeba, which kept InvenioRDM's token in its target names) is migrated
// on open, loses the token, and replays every deposit without a request.
func TestEveryTargetKeepsNoTokenAndReplaysAnOlderStore(t *testing.T) {
	const secret = "QSECRET9"
	for _, tc := range tokenCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "deposit.db")
			cfg := tc.config(t, secret)
			base := cfg.HTTPClient
			if base == nil {
				base = &http.Client{}
			}
			sent := &sentQueries{next: cmp.Or[http.RoundTripper](base.Transport, http.DefaultTransport), want: "access_token=" + secret}
			cfg.HTTPClient = &http.Client{Transport: sent}
			cfg.Retry, cfg.Rate = fastRetry, NoRateLimit
			var logs bytes.Buffer
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			var requests atomic.Int64
			cfg.Hooks.OnRequest = func(RequestEvent) { requests.Add(1) }

			st, err := dedup.Open(path)
			require.NoError(t, err)
			cfg.Store = st
			c, err := New(cfg)
			require.NoError(t, err)
			first, err := tc.deposit(c)
			require.NoError(t, err)
			require.Equal(t, OutcomeCreated, first.Outcome)
			require.NotZero(t, sent.sent)
			require.Zero(t, sent.without, "every request carries the token")
			for _, name := range append([]string{c.target.Name()}, c.target.StepTargets()...) {
				require.NotContains(t, name, secret)
			}
			require.NotContains(t, first.Identifier, secret)
			require.NoError(t, st.Close())
			requireNoToken(t, path, secret)
			require.NotContains(t, logs.String(), secret)

			asRelease(t, path, secret)
			st, err = dedup.Open(path)
			require.NoError(t, err)
			cfg.Store = st
			c, err = New(cfg)
			require.NoError(t, err)
			requests.Store(0)
			again, err := tc.deposit(c)
			require.NoError(t, err)
			require.Equal(t, OutcomeReplayed, again.Outcome)
			require.Equal(t, first.Identifier, again.Identifier)
			require.Zero(t, requests.Load(), "requests of the replay")
			require.NoError(t, st.Close())
			requireNoToken(t, path, secret)
		})
	}
}
