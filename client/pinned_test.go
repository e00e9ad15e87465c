package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/target/couchdb"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
	"github.com/depositkit/deposit/target/s3"
	"github.com/depositkit/deposit/target/webdav"
)

// A store written before the targets left package client holds its rows
// under these names, spelled out here rather than computed by the targets:
// a run of every built-in target on such a store finds each deposit done
// and replays it with no request at all.
func TestAStoreWrittenBeforeReplaysWithNoRequest(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	ep := srv.URL + "/api" // normalised already: http, an IP, no default port
	for _, tc := range []struct {
		name   string
		target Target
		rows   []string // the deposit's rows, its primary one last
	}{
		{"put", put.Target{Endpoint: ep}, []string{"put " + ep}},
		{"idempotency-key", idempotencykey.Target{Endpoint: ep}, []string{"idempotency-key " + ep}},
		{"webdav", webdav.Target{Endpoint: ep}, []string{"webdav " + ep}},
		{"s3", s3.Target{Endpoint: ep, AWS: *testAWS}, []string{"s3 " + ep}},
		{"couchdb", couchdb.Target{Endpoint: ep}, []string{"couchdb " + ep}},
		{"datacite", datacite.Target{Endpoint: ep, Prefix: "10.5072"}, []string{"datacite " + ep + " 10.5072"}},
		{"datacite with an event", datacite.Target{Endpoint: ep, Prefix: "10.5072", Event: "publish"},
			[]string{"datacite-publish " + ep + " 10.5072", "datacite " + ep + " 10.5072"}},
		{"invenio", invenio.Target{Endpoint: ep}, []string{"invenio-draft " + ep, "invenio " + ep}},
		{"invenio without publishing", invenio.Target{Endpoint: ep, NoPublish: true}, []string{"invenio-draft " + ep}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := openStore(t)
			c, err := New(Config{Target: tc.target, Store: store, Retry: fastRetry})
			require.NoError(t, err)
			payload := []byte(`{"title":"Reef Temperature Series","creators":["Vega, A."]}`)
			k, err := c.Key(payload)
			require.NoError(t, err)
			for _, target := range tc.rows {
				_, err := store.Begin(ctx, target, k.Key, nil)
				require.NoError(t, err)
				_, err = store.Complete(ctx, target, k.Key, dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "id-" + target})
				require.NoError(t, err)
			}
			before := requests.Load()
			res, err := c.Deposit(ctx, payload)
			require.NoError(t, err)
			require.Equal(t, OutcomeReplayed, res.Outcome)
			require.Equal(t, "id-"+tc.rows[len(tc.rows)-1], res.Identifier)
			require.Zero(t, res.Requests)
			require.Equal(t, before, requests.Load(), "no request reached the server")
		})
	}
}
