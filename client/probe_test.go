package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/couchdb"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/put"
)

func TestProbeVerdicts(t *testing.T) {
	tests := []struct {
		name     string
		proto    string
		script   []storageAnswer // the answers in order: write, write, [read-back], delete
		verdict  ProbeVerdict
		sentinel error
		meaning  string // "" when the sentinel and the status say it all
		status   int    // the status of the *HTTPError the error carries
		methods  string
		deleted  bool
	}{
		{"201 then 412 is honoured", protocol.Put, []storageAnswer{{status: 201}, {status: 412}, {status: 204}},
			ProbeHonoured, nil, "", 0, "PUT PUT DELETE", true},
		{"201 then 204 is ignored", protocol.Put, []storageAnswer{{status: 201}, {status: 204}, {status: 204}},
			ProbeIgnored, nil, "", 0, "PUT PUT DELETE", true},
		{"put 409 that reads back is honoured", protocol.Put, []storageAnswer{{status: 201}, {status: 409}, {status: 200}, {status: 204}},
			ProbeHonoured, nil, "", 0, "PUT PUT GET DELETE", true},
		{"put 409 that never reads back is retried, then unresolved", protocol.Put, []storageAnswer{{status: 201},
			{status: 409}, {status: 404}, {status: 409}, {status: 404}, {status: 409}, {status: 404}, {status: 409}, {status: 404}, {status: 204}},
			"", ErrUnresolved, "does not read back", 409, "PUT PUT GET PUT GET PUT GET PUT GET DELETE", true},
		{"put 409 that reads back on a retry is honoured", protocol.Put, []storageAnswer{{status: 201}, {status: 409}, {status: 404}, {status: 409}, {status: 200}, {status: 204}},
			ProbeHonoured, nil, "", 0, "PUT PUT GET PUT GET DELETE", true},
		{"a refused delete is reported, the verdict stands", protocol.Put, []storageAnswer{{status: 201}, {status: 412}, {status: 405}},
			ProbeHonoured, nil, "", 0, "PUT PUT DELETE", false},
		{"a 503 on the first write is retried", protocol.Put, []storageAnswer{{status: 503}, {status: 201}, {status: 412}, {status: 204}},
			ProbeHonoured, nil, "", 0, "PUT PUT PUT DELETE", true},
		{"a 500 on the second write is retried, and its 412 is honoured", protocol.Put, []storageAnswer{{status: 201}, {status: 500}, {status: 412}, {status: 204}},
			ProbeHonoured, nil, "", 0, "PUT PUT PUT DELETE", true},
		{"a 502 on the second write, then created, is ignored", protocol.Put, []storageAnswer{{status: 201}, {status: 502}, {status: 204}, {status: 204}},
			ProbeIgnored, nil, "", 0, "PUT PUT PUT DELETE", true},
		{"a 500 on the delete is retried", protocol.Put, []storageAnswer{{status: 201}, {status: 412}, {status: 500}, {status: 204}},
			ProbeHonoured, nil, "", 0, "PUT PUT DELETE DELETE", true},
		{"a delete answered 404 is gone once a read finds nothing", protocol.Put, []storageAnswer{{status: 201}, {status: 412}, {status: 404}, {status: 404}},
			ProbeHonoured, nil, "", 0, "PUT PUT DELETE GET", true},
		{"401 stops: the credentials were refused", protocol.Put, []storageAnswer{{status: 401}},
			"", ErrStopRun, "", 401, "PUT", false},
		{"s3 403 stops: the credentials were refused", protocol.S3, []storageAnswer{s3Err(403, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")},
			"", ErrStopRun, "InvalidAccessKeyId", 403, "PUT", false},
		{"couchdb 404 stops: no such database", protocol.CouchDB, []storageAnswer{{status: 404, body: `{"error":"not_found","reason":"Database does not exist."}`}},
			"", ErrStopRun, "", 404, "PUT", false},
		{"405 fails: the URL is not writable", protocol.Put, []storageAnswer{{status: 405}},
			"", ErrTerminal, "", 405, "PUT", false},
		{"a first write answered exists is not a verdict", protocol.Put, []storageAnswer{{status: 412}},
			"", ErrStopRun, "answered as if the record existed", 412, "PUT", false},
		{"500s on the second write until the attempts are spent are unresolved, and the record is deleted", protocol.Put,
			[]storageAnswer{{status: 201}, {status: 500}, {status: 500}, {status: 500}, {status: 500}, {status: 204}},
			"", ErrUnresolved, "attempts exhausted", 500, "PUT PUT PUT PUT PUT DELETE", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newStorageServer(t, tt.script...)
			// S3 signs every request: its Authorization is the signer's,
			// and New refuses one of the caller's.
			header := http.Header{"Authorization": {"Bearer secret"}}
			if tt.proto == protocol.S3 {
				header = nil
			}
			p, err := NewProbe(Config{Target: targetFor(tt.proto, srv.URL+"/records"), Header: header, Retry: quickRetry})
			require.NoError(t, err)
			rep, err := p.Run(context.Background())
			var methods []string
			for _, r := range srv.requests() {
				methods = append(methods, r.Method)
				require.Equal(t, "/records/"+strings.TrimPrefix(p.URL, srv.URL+"/records/"), r.URL.Path)
				if tt.proto != protocol.S3 { // s3: the signature is the Authorization
					require.Equal(t, "Bearer secret", r.Header.Get("Authorization"))
				} else {
					require.True(t, strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 "), r.Header.Get("Authorization"))
				}
			}
			require.Equal(t, tt.methods, strings.Join(methods, " "))
			require.Equal(t, tt.deleted, rep.Deleted)
			if tt.sentinel == nil {
				require.NoError(t, err)
				require.Equal(t, tt.verdict, rep.Verdict)
				if !tt.deleted {
					require.Contains(t, rep.DeleteProblem, "405 Method Not Allowed")
					require.True(t, rep.DeleteRefused)
				}
				return
			}
			require.ErrorIs(t, err, tt.sentinel)
			require.ErrorContains(t, err, tt.meaning)
			var herr *HTTPError
			require.True(t, errors.As(err, &herr), "an HTTPError in %v", err)
			require.Equal(t, tt.status, herr.StatusCode)
			require.Equal(t, ProbeVerdict(""), rep.Verdict)
		})
	}
}

func TestProbeWritesTheSameNamedRecordTwice(t *testing.T) {
	srv := newStorageServer(t, storageAnswer{status: 201}, storageAnswer{status: 412}, storageAnswer{status: 204})
	p, err := NewProbe(Config{Target: put.Target{Endpoint: srv.URL}})
	require.NoError(t, err)
	require.Regexp(t, `^`+srv.URL+`/deposit-probe-[0-9a-f]{16}$`, p.URL)
	_, err = p.Run(context.Background())
	require.NoError(t, err)
	reqs := srv.requests()
	require.Equal(t, "*", reqs[0].Header.Get("If-None-Match"))
	require.Equal(t, reqs[0].URL.Path, reqs[1].URL.Path)
	require.Equal(t, string(p.Body), string(srv.bodies[0]))
	require.Equal(t, string(p.Body), string(srv.bodies[1]))

	other, err := NewProbe(Config{Target: put.Target{Endpoint: srv.URL}})
	require.NoError(t, err)
	require.NotEqual(t, p.URL, other.URL, "every probe has a new name")
}

func TestProbeDeletesACouchDBDocumentByItsRevision(t *testing.T) {
	srv := newStorageServer(t, storageAnswer{status: 201, body: `{"ok":true,"id":"x","rev":"1-abc"}`},
		storageAnswer{status: 409, body: `{"error":"conflict"}`}, storageAnswer{status: 200, body: `{"ok":true}`})
	p, err := NewProbe(Config{Target: couchdb.Target{Endpoint: srv.URL + "/db"}})
	require.NoError(t, err)
	rep, err := p.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, ProbeHonoured, rep.Verdict)
	require.True(t, rep.Deleted)
	require.Equal(t, "rev=1-abc", srv.requests()[2].URL.RawQuery)
}

func TestProbeSettlesAnswersDroppedAfterCommit(t *testing.T) {
	tests := []struct {
		name            string
		cfg             repotest.Config
		verdict         ProbeVerdict
		first, second   []string
		firstFound      bool
		deletes, faults int64
	}{
		// Every request of the key is numbered: the first write and its
		// retry are 1 and 2, the second write and its retry 3 and 4; the
		// DELETEs are numbered apart, so nth=1 drops the first of them too.
		{"both writes and the delete dropped: honoured, and the record is gone",
			repotest.Config{Faults: "nth=1:drop,nth=3:drop"}, ProbeHonoured,
			[]string{"no answer (EOF)", "412 Precondition Failed"}, []string{"no answer (EOF)", "412 Precondition Failed"}, true, 1, 3},
		{"a first write reset before commit, then created: honoured",
			repotest.Config{Faults: "nth=1:reset"}, ProbeHonoured,
			[]string{"no answer (EOF)", "201 Created"}, []string{"412 Precondition Failed"}, false, 1, 2},
		{"a server that ignores If-None-Match, its first answer dropped: ignored, and every version is gone",
			repotest.Config{Faults: "nth=1:drop", IgnoreIfNoneMatch: true}, ProbeIgnored,
			[]string{"no answer (EOF)", "200 OK"}, []string{"200 OK"}, false, 3, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := repotest.NewServer(tt.cfg)
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			p, err := NewProbe(Config{Target: put.Target{Endpoint: srv.URL}, Retry: quickRetry})
			require.NoError(t, err)
			rep, err := p.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, tt.verdict, rep.Verdict)
			require.Equal(t, tt.first, rep.FirstTries)
			require.Equal(t, tt.second, rep.SecondTries)
			require.Equal(t, tt.firstFound, rep.FirstFound)
			require.True(t, rep.Deleted, rep.DeleteProblem)
			require.Empty(t, srv.Records(), "no probe record is left")
			st := srv.Stats()
			require.Equal(t, tt.deletes, st.Deletes)
			require.Equal(t, tt.faults, st.Faults)
		})
	}
}

func TestProbeDeletesACouchDBDocumentWhoseCreateAnswerWasLost(t *testing.T) {
	// The first write's answer is a 502: it may have been stored. Its
	// retry finds the document, so its revision comes from a read.
	srv := newStorageServer(t, storageAnswer{status: 502}, storageAnswer{status: 409, body: `{"error":"conflict"}`},
		storageAnswer{status: 409, body: `{"error":"conflict"}`}, storageAnswer{status: 200, body: `{"_id":"x","_rev":"1-abc","name":"x"}`},
		storageAnswer{status: 200, body: `{"ok":true}`})
	p, err := NewProbe(Config{Target: couchdb.Target{Endpoint: srv.URL + "/db"}, Retry: quickRetry})
	require.NoError(t, err)
	rep, err := p.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, ProbeHonoured, rep.Verdict)
	require.True(t, rep.FirstFound)
	require.True(t, rep.Deleted, rep.DeleteProblem)
	var methods []string
	for _, r := range srv.requests() {
		methods = append(methods, r.Method)
	}
	require.Equal(t, "PUT PUT PUT GET DELETE", strings.Join(methods, " "))
	require.Equal(t, "rev=1-abc", srv.requests()[4].URL.RawQuery)
}

func TestProbeOfAnUnreachableEndpointIsUnresolved(t *testing.T) {
	srv := newStorageServer(t, storageAnswer{status: 201})
	url := srv.URL
	srv.Close()
	p, err := NewProbe(Config{Target: put.Target{Endpoint: url}})
	require.NoError(t, err)
	rep, err := p.Run(context.Background())
	require.ErrorIs(t, err, ErrUnresolved)
	require.ErrorContains(t, err, "no answer from the endpoint")
	require.Equal(t, 0, rep.First)
	var herr *HTTPError
	require.False(t, errors.As(err, &herr))
}

func TestProbeRefusesProtocolsWithoutAConditionalCreate(t *testing.T) {
	_, err := NewProbe(Config{Target: idempotencykey.Target{Endpoint: "http://127.0.0.1:1"}})
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "no conditional create to probe")
}
