package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/s3"
)

// storageAnswer is one scripted answer of a storage server.
type storageAnswer struct {
	status int
	ctype  string
	body   string
}

// storageServer is a real HTTP server on 127.0.0.1 that answers every
// request from a script (the last entry repeats) and records the requests.
// It emulates the answers of S3, WebDAV and CouchDB servers, not their
// storage: it keeps nothing.
type storageServer struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []*http.Request
	bodies  [][]byte
	answers []storageAnswer
}

func newStorageServer(t *testing.T, answers ...storageAnswer) *storageServer {
	t.Helper()
	s := &storageServer{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		a := s.answers[min(len(s.reqs), len(s.answers)-1)]
		s.reqs = append(s.reqs, r)
		s.bodies = append(s.bodies, body)
		s.mu.Unlock()
		if a.ctype != "" {
			w.Header().Set("Content-Type", a.ctype)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *storageServer) requests() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.reqs...)
}

// s3Err is an S3 error document.
func s3Err(status int, code, message string) storageAnswer {
	return storageAnswer{status: status, ctype: "application/xml", body: `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>` + code + `</Code><Message>` + message + `</Message><Resource>/bucket/x</Resource><RequestId>1</RequestId></Error>`}
}

// storageStore is a fresh SQLite store in the test's temporary directory.
func storageStore(t testing.TB) *dedup.SQLite {
	t.Helper()
	st, err := dedup.Open(filepath.Join(t.TempDir(), "deposit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// quickRetry keeps retries against scripted servers short.
var quickRetry = backoff.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxAttempts: 4, MaxElapsed: 10 * time.Second}

var testAWS = &s3.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", Region: "eu-west-2"}

func storageClient(t testing.TB, endpoint string, proto string) *Client {
	t.Helper()
	c, err := New(Config{Target: targetFor(proto, endpoint), Store: storageStore(t), Retry: quickRetry})
	require.NoError(t, err)
	return c
}

const storagePayload = `{"title":"Kelp Canopy Survey","year":2024}`

func TestStorageProtocolTable(t *testing.T) {
	tests := []struct {
		name     string
		proto    string
		script   []storageAnswer
		outcome  Outcome
		sentinel error // nil when the deposit succeeds
		problem  string
		requests int
	}{
		{"s3 200 is created", protocol.S3, []storageAnswer{{status: 200}}, OutcomeCreated, nil, "", 1},
		{"s3 412 is existing", protocol.S3, []storageAnswer{s3Err(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")}, OutcomeExisting, nil, "", 1},
		{"s3 409 ConditionalRequestConflict is retried, then created", protocol.S3,
			[]storageAnswer{s3Err(409, "ConditionalRequestConflict", "A conflicting operation occurred"), {status: 200}}, OutcomeCreated, nil, "", 2},
		{"s3 409 ConditionalRequestConflict, then 412, is existing", protocol.S3,
			[]storageAnswer{s3Err(409, "ConditionalRequestConflict", "A conflicting operation occurred"), s3Err(412, "PreconditionFailed", "")}, OutcomeExisting, nil, "", 2},
		{"s3 503 SlowDown is retried", protocol.S3, []storageAnswer{s3Err(503, "SlowDown", "Please reduce your request rate."), {status: 200}}, OutcomeCreated, nil, "", 2},
		{"s3 403 SignatureDoesNotMatch stops the run", protocol.S3, []storageAnswer{s3Err(403, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")},
			"", ErrStopRun, "SignatureDoesNotMatch: The request signature we calculated does not match", 1},
		{"s3 403 AccessDenied stops the run", protocol.S3, []storageAnswer{s3Err(403, "AccessDenied", "Access Denied")}, "", ErrStopRun, "AccessDenied: Access Denied", 1},
		{"s3 400 AuthorizationHeaderMalformed stops the run", protocol.S3, []storageAnswer{s3Err(400, "AuthorizationHeaderMalformed", "the region 'eu-west-2' is wrong; expecting 'us-east-1'")},
			"", ErrStopRun, "AuthorizationHeaderMalformed", 1},
		{"s3 301 PermanentRedirect stops the run", protocol.S3, []storageAnswer{s3Err(301, "PermanentRedirect", "use the specified endpoint")}, "", ErrStopRun, "PermanentRedirect", 1},
		{"s3 409 of another kind is a failure", protocol.S3, []storageAnswer{s3Err(409, "SomethingElse", "no")}, OutcomeFailed, ErrTerminal, "SomethingElse: no", 1},
		{"s3 400 EntityTooLarge is a failure", protocol.S3, []storageAnswer{s3Err(400, "EntityTooLarge", "too large")}, OutcomeFailed, ErrTerminal, "EntityTooLarge: too large", 1},
		{"s3 500 InternalError is retried", protocol.S3, []storageAnswer{s3Err(500, "InternalError", "try again"), {status: 200}}, OutcomeCreated, nil, "", 2},

		{"webdav 201 is created", protocol.WebDAV, []storageAnswer{{status: 201}}, OutcomeCreated, nil, "", 1},
		{"webdav 412 is existing", protocol.WebDAV, []storageAnswer{{status: 412}}, OutcomeExisting, nil, "", 1},
		{"webdav 409 stops the run: the collection is missing", protocol.WebDAV, []storageAnswer{{status: 409, ctype: "text/html", body: "<!DOCTYPE HTML>\n<html>Conflict</html>"}},
			"", ErrStopRun, "/bucket/ does not exist", 1},

		{"couchdb 201 is created", protocol.CouchDB, []storageAnswer{{status: 201, body: `{"ok":true,"id":"x","rev":"1-a"}`}}, OutcomeCreated, nil, "", 1},
		{"couchdb 202 is created", protocol.CouchDB, []storageAnswer{{status: 202, body: `{"ok":true,"id":"x","rev":"1-a"}`}}, OutcomeCreated, nil, "", 1},
		{"couchdb 409 conflict is existing", protocol.CouchDB, []storageAnswer{{status: 409, body: `{"error":"conflict","reason":"Document update conflict."}`}}, OutcomeExisting, nil, "", 1},
		{"couchdb 404 no database stops the run", protocol.CouchDB, []storageAnswer{{status: 404, body: `{"error":"not_found","reason":"Database does not exist."}`}}, "", ErrStopRun, "Database does not exist", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newStorageServer(t, tt.script...)
			c := storageClient(t, srv.URL+"/bucket", tt.proto)
			res, err := c.Deposit(context.Background(), []byte(storagePayload))
			require.Equal(t, tt.requests, len(srv.requests()))
			if tt.sentinel == nil {
				require.NoError(t, err)
				require.Equal(t, tt.outcome, res.Outcome)
				// Storage targets mint nothing: the identifier is the record URL.
				require.Equal(t, srv.URL+"/bucket/"+res.Key, res.Identifier)
				return
			}
			require.ErrorIs(t, err, tt.sentinel)
			var herr *HTTPError
			require.True(t, errors.As(err, &herr), "an HTTPError in %v", err)
			require.Contains(t, herr.Problem, tt.problem)
			if tt.outcome != "" {
				require.Equal(t, tt.outcome, OutcomeOf(err))
			}
		})
	}
}

func TestWebDAVMissingCollectionNamesIt(t *testing.T) {
	srv := newStorageServer(t, storageAnswer{status: 409})
	c := storageClient(t, srv.URL+"/dav/missing", protocol.WebDAV)
	_, err := c.Deposit(context.Background(), []byte(storagePayload))
	require.ErrorIs(t, err, ErrStopRun)
	require.Contains(t, err.Error(), "the collection "+srv.URL+"/dav/missing/ does not exist")
}

func TestS3RequestIsSignedPutObject(t *testing.T) {
	srv := newStorageServer(t, s3Err(503, "SlowDown", "slow down"), storageAnswer{status: 200})
	c := storageClient(t, srv.URL+"/bucket", protocol.S3)
	res, err := c.Deposit(context.Background(), []byte(storagePayload))
	require.NoError(t, err)
	reqs := srv.requests()
	require.Equal(t, 2, len(reqs))
	sum := sha256.Sum256(srv.bodies[0])
	require.Equal(t, res.Key, hex.EncodeToString(sum[:]), "the body is the canonical bytes")
	for _, r := range reqs {
		require.Equal(t, http.MethodPut, r.Method)
		require.Equal(t, "/bucket/"+res.Key, r.URL.Path)
		require.Equal(t, "*", r.Header.Get("If-None-Match"))
		require.Equal(t, hex.EncodeToString(sum[:]), r.Header.Get("X-Amz-Content-Sha256"))
		require.NotEmpty(t, r.Header.Get("X-Amz-Date"))
		auth := r.Header.Get("Authorization")
		require.True(t, strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"), auth)
		require.Contains(t, auth, "/eu-west-2/s3/aws4_request")
		require.Contains(t, auth, "SignedHeaders=host;x-amz-content-sha256;x-amz-date")
	}
	require.Equal(t, srv.bodies[0], srv.bodies[1], "a retry sends the same bytes")
}

func TestS3SessionTokenIsSent(t *testing.T) {
	srv := newStorageServer(t, storageAnswer{status: 200})
	aws := *testAWS
	aws.SessionToken = "token-123"
	c, err := New(Config{Target: s3.Target{Endpoint: srv.URL + "/bucket", AWS: aws}, Store: storageStore(t)})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), []byte(storagePayload))
	require.NoError(t, err)
	r := srv.requests()[0]
	require.Equal(t, "token-123", r.Header.Get("X-Amz-Security-Token"))
	require.Contains(t, r.Header.Get("Authorization"), "x-amz-security-token")
}

func TestS3WithoutCredentialsIsRefused(t *testing.T) {
	for _, aws := range []s3.Credentials{{}, {AccessKeyID: "AK"}, {SecretAccessKey: "SK"}} {
		_, err := New(Config{Target: s3.Target{Endpoint: "http://127.0.0.1:1/bucket", AWS: aws}, Store: storageStore(t)})
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, "s3.Target.AWS needs an access key id and a secret access key")
	}
}

func TestCouchDBRefusesWhatIsNotADocument(t *testing.T) {
	tests := []struct {
		name, payload, problem string
	}{
		{"an array is invalid", `[1,2]`, "a document must be a JSON object"},
		{"a string is invalid", `"text"`, "the payload is a string, not a document"}, // refused when keyed, for every target
		{"a reserved top-level member is invalid", `{"_rev":"1-abc","title":"x"}`, `top-level member "_rev"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newStorageServer(t, storageAnswer{status: 201})
			c := storageClient(t, srv.URL+"/db", protocol.CouchDB)
			_, err := c.Deposit(context.Background(), []byte(tt.payload))
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.problem)
			require.Equal(t, 0, len(srv.requests()))
		})
	}
	t.Run("a nested member starting with _ is sent", func(t *testing.T) {
		srv := newStorageServer(t, storageAnswer{status: 201})
		c := storageClient(t, srv.URL+"/db", protocol.CouchDB)
		_, err := c.Deposit(context.Background(), []byte(`{"meta":{"_note":"fine"}}`))
		require.NoError(t, err)
	})
}

func TestParseProtocolKnowsTheStorageProfiles(t *testing.T) {
	for _, name := range []string{"webdav", "s3", "couchdb"} {
		p, err := protocol.Parse(name)
		require.NoError(t, err)
		require.Equal(t, name, p)
	}
	_, err := protocol.Parse("ftp")
	for _, name := range []string{"webdav", "s3", "couchdb"} {
		require.ErrorContains(t, err, name, "the error lists the protocols")
	}
}
