package client

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/target/put"
)

// At Debug, the Logger sees every request, retry (with its wait), replay
// and settlement, and never a credential or a query string.
func TestDebugLogShowsRequestsRetriesReplaysAndSettlements(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 503, header: map[string]string{"Retry-After": "0"}}, reply{status: 201})
	var logs bytes.Buffer
	c, err := New(Config{
		Target: put.Target{Endpoint: srv.URL + "/recs?token=QSECRET"},
		Store:  openStore(t),
		Retry:  fastRetry,
		Header: http.Header{"Authorization": {"Bearer HSECRET"}},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	require.NoError(t, err)
	for range 2 {
		_, err := c.Deposit(context.Background(), []byte(payload))
		require.NoError(t, err)
	}
	out := logs.String()
	require.Equal(t, 2, strings.Count(out, "msg=request "), out)
	require.Equal(t, 1, strings.Count(out, "msg=retry "), out)
	require.Contains(t, out, "wait=")
	require.Equal(t, 1, strings.Count(out, "msg=settled "), out)
	require.Equal(t, 1, strings.Count(out, "msg=replay "), out)
	require.NotContains(t, out, "QSECRET")
	require.NotContains(t, out, "HSECRET")
}
