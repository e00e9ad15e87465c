package client

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/target/couchdb"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
	"github.com/depositkit/deposit/target/s3"
	"github.com/depositkit/deposit/target/webdav"
)

// A caller's header that would replace one the target sets for
// exactly-once is refused by name; other headers pass.
func TestNewRefusesHeadersTheTargetGuards(t *testing.T) {
	const ep = "http://127.0.0.1:1/records"
	tests := []struct {
		name   string
		target Target
		header string
		refuse bool
	}{
		{"put: If-None-Match", put.Target{Endpoint: ep}, "If-None-Match", true},
		{"put: if-match in lower case", put.Target{Endpoint: ep}, "if-match", true},
		{"put: Authorization passes", put.Target{Endpoint: ep}, "Authorization", false},
		{"idempotency-key: Idempotency-Key", idempotencykey.Target{Endpoint: ep}, "Idempotency-Key", true},
		{"webdav: If-None-Match", webdav.Target{Endpoint: ep}, "If-None-Match", true},
		{"couchdb: If-Match (a revision would update)", couchdb.Target{Endpoint: ep}, "If-Match", true},
		{"s3: Authorization (the signer's)", targetFor("s3", ep), "Authorization", true},
		{"s3: X-Amz-Date", targetFor("s3", ep), "x-amz-date", true},
		{"s3: Content-Language passes", targetFor("s3", ep), "Content-Language", false},
		{"datacite: Authorization passes", datacite.Target{Endpoint: ep, Prefix: "10.5072"}, "Authorization", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set(tt.header, "x")
			_, err := New(Config{Target: tt.target, Store: openStore(t), Header: h})
			if !tt.refuse {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, http.CanonicalHeaderKey(tt.header))
			_, err = NewProbe(Config{Target: tt.target, Header: h})
			require.Error(t, err)
		})
	}
}

func TestNewRefusesAMalformedIDPointer(t *testing.T) {
	for _, target := range []Target{put.Target{Endpoint: "http://127.0.0.1:1", IDPointer: "id"}, idempotencykey.Target{Endpoint: "http://127.0.0.1:1", IDPointer: "/a~2"}} {
		_, err := New(Config{Target: target, Store: openStore(t)})
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, "IDPointer")
	}
}

// A target without an endpoint is told the endpoint is required, by the
// field's name, not that "" has the wrong scheme.
func TestNewSaysAMissingEndpointIsRequired(t *testing.T) {
	for _, tt := range []struct {
		field  string
		target Target
	}{
		{"put.Target.Endpoint", put.Target{}},
		{"idempotencykey.Target.Endpoint", idempotencykey.Target{Endpoint: "  "}},
		{"webdav.Target.Endpoint", webdav.Target{}},
		{"s3.Target.Endpoint", s3.Target{AWS: *testAWS}},
		{"couchdb.Target.Endpoint", couchdb.Target{}},
	} {
		t.Run(tt.field, func(t *testing.T) {
			_, err := New(Config{Target: tt.target, Store: openStore(t)})
			require.ErrorIs(t, err, ErrConfig)
			require.ErrorContains(t, err, tt.field+" is required")
			require.NotContains(t, err.Error(), "scheme")
		})
	}
}

// A nil error is a success whose outcome (created, existing or replayed)
// only the Result knows: OutcomeOf does not guess.
func TestOutcomeOfNilIsNoOutcome(t *testing.T) {
	require.Equal(t, Outcome(""), OutcomeOf(nil))
}

// NoRateLimit leaves every target without a client limit, those with a
// default rate of their own included; the zero Rate is that default.
func TestNoRateLimitIsUnlimitedUnderEveryTarget(t *testing.T) {
	for _, tc := range []struct {
		target Target
		def    float64
	}{
		{put.Target{Endpoint: "http://repo.example/recs"}, 0},
		{datacite.Target{Prefix: "10.5072"}, datacite.Rate},
		{invenio.Target{Endpoint: "http://repo.example/api"}, invenio.Rate},
	} {
		d, err := tc.target.Driver()
		require.NoError(t, err)
		limiterOf := func(rate float64) *backoff.Limiter {
			hc, _ := newHTTPClient(nil, d, rate, false)
			return hc.Transport.(*sharedTransport).limiter
		}
		require.Nil(t, limiterOf(NoRateLimit), "%T with NoRateLimit", tc.target)
		require.Equal(t, tc.def == 0, limiterOf(0) == nil, "%T with the zero Rate has its default", tc.target)
	}
}
