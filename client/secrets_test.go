package client

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
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
		c, err := New(Config{Target: Put{Endpoint: srv.URL + "/recs?token=" + secret}, Store: openStore(t), Retry: fastRetry})
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
		c, err := New(Config{Target: Put{Endpoint: ep}, Store: openStore(t)})
		require.NoError(t, err)
		require.Equal(t, "put "+ep, c.StoreTarget())
	}
	c, err := New(Config{Target: DataCite{Endpoint: "https://api.test.datacite.org?client=x", Prefix: "10.5072"}, Store: openStore(t)})
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
		_, err := New(Config{Target: Put{Endpoint: tc.endpoint}, Store: openStore(t)})
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "QSECRET")
	}
}
