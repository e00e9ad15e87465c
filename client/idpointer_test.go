package client

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/put"
)

// An IDPointer the user chose that names nothing in the server's JSON
// answers is a mistake to report, once per client; the default pointers
// finding nothing is a server that mints nothing, and no news.
func TestAWrongIDPointerIsWarnedOnce(t *testing.T) {
	const warning = "names no string or integer in the server's answer"
	created := reply{status: 201, header: map[string]string{"Content-Type": "application/json"}, body: `{"id":"rec-1","doi":"10.5072/x"}`}
	for _, tc := range []struct {
		name     string
		target   func(endpoint string) Target
		script   reply
		readBack reply
		warnings int
	}{
		{name: "put with a pointer the create answer lacks warns once",
			target: func(ep string) Target { return put.Target{Endpoint: ep, IDPointer: "/identifer"} }, script: created, warnings: 1},
		{name: "put with a pointer the read-back lacks warns once",
			target:   func(ep string) Target { return put.Target{Endpoint: ep, IDPointer: "/identifer"} },
			script:   reply{status: 412},
			readBack: reply{status: 200, header: map[string]string{"Content-Type": "application/json"}, body: payload}, warnings: 1},
		{name: "idempotency-key with a pointer the create answer lacks warns once",
			target: func(ep string) Target { return idempotencykey.Target{Endpoint: ep, IDPointer: "/identifer"} }, script: created, warnings: 1},
		{name: "a pointer that names a string does not warn",
			target: func(ep string) Target { return put.Target{Endpoint: ep, IDPointer: "/doi"} }, script: created},
		{name: "the default pointer finding nothing does not warn",
			target: func(ep string) Target { return put.Target{Endpoint: ep} }, script: created},
		{name: "an answer without a JSON body does not warn",
			target: func(ep string) Target { return put.Target{Endpoint: ep, IDPointer: "/identifer"} }, script: reply{status: 201}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newScripted(t, tc.readBack, tc.script)
			var logs bytes.Buffer
			c, err := New(Config{Target: tc.target(srv.URL), Store: openStore(t), Retry: fastRetry,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			for _, p := range []string{payload, `{"title":"another"}`} {
				_, err := c.Deposit(context.Background(), []byte(p))
				require.NoError(t, err)
			}
			require.Equal(t, tc.warnings, strings.Count(logs.String(), warning), logs.String())
		})
	}
}
