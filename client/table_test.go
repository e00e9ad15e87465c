package client

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/put"
)

// reply is one scripted server answer.
type reply struct {
	status int
	header map[string]string
	body   string
}

// scripted is a real HTTP server on 127.0.0.1 that answers writes from a
// script (the last entry repeats) and reads with read, and records what it
// was sent.
type scripted struct {
	*httptest.Server
	mu       sync.Mutex
	writes   []*http.Request
	bodies   [][]byte
	reads    int
	script   []reply
	readBack reply
}

func newScripted(t *testing.T, readBack reply, script ...reply) *scripted {
	s := &scripted{script: script, readBack: readBack}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		var a reply
		if r.Method == http.MethodGet {
			s.reads++
			a = s.readBack
		} else {
			i := min(len(s.writes), len(s.script)-1)
			s.writes = append(s.writes, r)
			s.bodies = append(s.bodies, body)
			a = s.script[i]
		}
		s.mu.Unlock()
		for k, v := range a.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *scripted) writeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

func openStore(t *testing.T) *dedup.SQLite {
	t.Helper()
	st, err := dedup.Open(filepath.Join(t.TempDir(), "deposit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

// fastRetry keeps test retries quick: waits of at most 20 ms, Retry-After
// included (the cap applies to it too).
var fastRetry = backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 4, MaxElapsed: 10 * time.Second}

func newTestClient(t *testing.T, endpoint string, proto string, store Store) *Client {
	t.Helper()
	c, err := New(Config{Target: targetFor(proto, endpoint), Store: store, Retry: fastRetry})
	require.NoError(t, err)
	return c
}

const payload = `{"title":"Reef Temperature Series","creators":["Vega, A."]}`

// stateNoRow is the wanted state of a key the store must not hold.
const stateNoRow dedup.State = ""

func TestProtocolTable(t *testing.T) {
	created := reply{status: 201, body: `{"identifier":"10.5072/abc","id":"10.5072/abc"}`}
	readOK := reply{status: 200, body: `{"identifier":"10.5072/found"}`}
	read404 := reply{status: 404}
	problem := reply{status: 422, header: map[string]string{"Content-Type": "application/problem+json"}, body: `{"title":"Unprocessable","detail":"title is empty"}`}
	retry := func(s int) reply {
		return reply{status: s, header: map[string]string{"Retry-After": "1"}}
	}
	tests := []struct {
		name       string
		proto      string
		script     []reply
		readBack   reply
		outcome    Outcome
		identifier string // "" means the record URL
		writes     int
		reads      int
		wantErr    error
		wantState  dedup.State
	}{
		{name: "put 201 is created with the identifier of the body", proto: protocol.Put, script: []reply{created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 1, wantState: dedup.StateDone},
		{name: "put 201 without body uses Location", proto: protocol.Put, script: []reply{{status: 201, header: map[string]string{"Location": "/records/77"}}}, outcome: OutcomeCreated, identifier: "LOCATION", writes: 1, wantState: dedup.StateDone},
		{name: "put 200 is created (and warned about)", proto: protocol.Put, script: []reply{{status: 200}}, outcome: OutcomeCreated, writes: 1, wantState: dedup.StateDone},
		{name: "put 204 is created", proto: protocol.Put, script: []reply{{status: 204}}, outcome: OutcomeCreated, writes: 1, wantState: dedup.StateDone},
		{name: "put 412 is existing with the identifier read back", proto: protocol.Put, script: []reply{{status: 412}}, readBack: readOK, outcome: OutcomeExisting, identifier: "10.5072/found", writes: 1, reads: 1, wantState: dedup.StateDone},
		{name: "put 412 with a refused read-back is the record URL", proto: protocol.Put, script: []reply{{status: 412}}, readBack: reply{status: 403}, outcome: OutcomeExisting, writes: 1, reads: 1, wantState: dedup.StateDone},
		{name: "put 412 with a read-back echoing the payload is the record URL", proto: protocol.Put, script: []reply{{status: 412}}, readBack: reply{status: 200, body: payload}, outcome: OutcomeExisting, writes: 1, reads: 1, wantState: dedup.StateDone},
		{name: "put 409 confirmed by read-back is existing", proto: protocol.Put, script: []reply{{status: 409}}, readBack: readOK, outcome: OutcomeExisting, identifier: "10.5072/found", writes: 1, reads: 1, wantState: dedup.StateDone},
		{name: "put 409 without a record is retried then unresolved", proto: protocol.Put, script: []reply{{status: 409}}, readBack: read404, writes: 4, reads: 4, wantErr: ErrUnresolved, wantState: dedup.StatePending},
		{name: "put 409 then 201 is created", proto: protocol.Put, script: []reply{{status: 409}, created}, readBack: read404, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 2, reads: 1, wantState: dedup.StateDone},
		{name: "put 422 is terminal and recorded", proto: protocol.Put, script: []reply{problem}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "put 400 is terminal", proto: protocol.Put, script: []reply{{status: 400}}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "put 405 is terminal", proto: protocol.Put, script: []reply{{status: 405}}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "put 413 is terminal", proto: protocol.Put, script: []reply{{status: 413}}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "put 415 is terminal", proto: protocol.Put, script: []reply{{status: 415}}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "put 428 is terminal", proto: protocol.Put, script: []reply{{status: 428}}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "put 401 stops the run", proto: protocol.Put, script: []reply{{status: 401}}, writes: 1, wantErr: ErrStopRun, wantState: stateNoRow},
		{name: "put 403 stops the run", proto: protocol.Put, script: []reply{{status: 403}}, writes: 1, wantErr: ErrStopRun, wantState: stateNoRow},
		{name: "put 404 stops the run", proto: protocol.Put, script: []reply{{status: 404}}, writes: 1, wantErr: ErrStopRun, wantState: stateNoRow},
		{name: "put 501 stops the run", proto: protocol.Put, script: []reply{{status: 501}}, writes: 1, wantErr: ErrStopRun, wantState: stateNoRow},
		{name: "put 429 with Retry-After is retried", proto: protocol.Put, script: []reply{retry(429), created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 2, wantState: dedup.StateDone},
		{name: "put 503 with Retry-After is retried", proto: protocol.Put, script: []reply{retry(503), created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 2, wantState: dedup.StateDone},
		{name: "put 500 is retried with the same key", proto: protocol.Put, script: []reply{{status: 500}, created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 2, wantState: dedup.StateDone},
		{name: "put 502 is retried", proto: protocol.Put, script: []reply{{status: 502}, created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 2, wantState: dedup.StateDone},
		{name: "put 504 is retried", proto: protocol.Put, script: []reply{{status: 504}, created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 2, wantState: dedup.StateDone},
		{name: "put 500 then 412 is created: the 500 may have stored it", proto: protocol.Put, script: []reply{{status: 500}, {status: 412}}, readBack: readOK, outcome: OutcomeCreated, identifier: "10.5072/found", writes: 2, reads: 1, wantState: dedup.StateDone},
		{name: "put 504 then 409 confirmed by read-back is created", proto: protocol.Put, script: []reply{{status: 504}, {status: 409}}, readBack: readOK, outcome: OutcomeCreated, identifier: "10.5072/found", writes: 2, reads: 1, wantState: dedup.StateDone},
		{name: "put 503 then 412 is existing: a 503 stored nothing", proto: protocol.Put, script: []reply{retry(503), {status: 412}}, readBack: readOK, outcome: OutcomeExisting, identifier: "10.5072/found", writes: 2, reads: 1, wantState: dedup.StateDone},
		{name: "put 503 forever ends unresolved after the attempt limit, leaving no intent: a 503 stored nothing", proto: protocol.Put, script: []reply{retry(503)}, writes: 4, wantErr: ErrUnresolved, wantState: stateNoRow},

		{name: "idempotency-key 201 is created with /id", proto: protocol.IdempotencyKey, script: []reply{created}, outcome: OutcomeCreated, identifier: "10.5072/abc", writes: 1, wantState: dedup.StateDone},
		{name: "idempotency-key 200 is created", proto: protocol.IdempotencyKey, script: []reply{{status: 200, body: `{"id":"job-1"}`}}, outcome: OutcomeCreated, identifier: "job-1", writes: 1, wantState: dedup.StateDone},
		{name: "idempotency-key hit is existing", proto: protocol.IdempotencyKey, script: []reply{{status: 200, header: map[string]string{"Idempotency-Key-Reply": "hit"}, body: `{"id":"job-1"}`}}, outcome: OutcomeExisting, identifier: "job-1", writes: 1, wantState: dedup.StateDone},
		{name: "idempotency-key 500 then hit is created: the 500 may have run it", proto: protocol.IdempotencyKey, script: []reply{{status: 500}, {status: 200, header: map[string]string{"Idempotency-Key-Reply": "hit"}, body: `{"id":"job-1"}`}}, outcome: OutcomeCreated, identifier: "job-1", writes: 2, wantState: dedup.StateDone},
		{name: "idempotency-key 409 in flight then hit is existing: the request in flight was another's", proto: protocol.IdempotencyKey, script: []reply{{status: 409}, {status: 200, header: map[string]string{"Idempotency-Key-Reply": "hit"}, body: `{"id":"job-1"}`}}, outcome: OutcomeExisting, identifier: "job-1", writes: 2, wantState: dedup.StateDone},
		{name: "idempotency-key 409 in flight is retried", proto: protocol.IdempotencyKey, script: []reply{{status: 409}, {status: 200, body: `{"id":"job-1"}`}}, outcome: OutcomeCreated, identifier: "job-1", writes: 2, wantState: dedup.StateDone},
		{name: "idempotency-key 422 key reused is terminal", proto: protocol.IdempotencyKey, script: []reply{problem}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "idempotency-key 412 is terminal", proto: protocol.IdempotencyKey, script: []reply{{status: 412}}, writes: 1, wantErr: ErrTerminal, wantState: dedup.StateFailed},
		{name: "idempotency-key 501 stops and is never retried", proto: protocol.IdempotencyKey, script: []reply{{status: 501}}, writes: 1, wantErr: ErrStopRun, wantState: stateNoRow},
		{name: "idempotency-key 401 stops the run", proto: protocol.IdempotencyKey, script: []reply{{status: 401}}, writes: 1, wantErr: ErrStopRun, wantState: stateNoRow},
		{name: "idempotency-key 503 is retried", proto: protocol.IdempotencyKey, script: []reply{retry(503), {status: 201, body: `{"id":"job-1"}`}}, outcome: OutcomeCreated, identifier: "job-1", writes: 2, wantState: dedup.StateDone},
		{name: "idempotency-key 500 is retried with the same key", proto: protocol.IdempotencyKey, script: []reply{{status: 500}, {status: 201, body: `{"id":"job-1"}`}}, outcome: OutcomeCreated, identifier: "job-1", writes: 2, wantState: dedup.StateDone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newScripted(t, tt.readBack, tt.script...)
			store := openStore(t)
			c := newTestClient(t, srv.URL, tt.proto, store)
			res, err := c.Deposit(context.Background(), []byte(payload))

			require.Equal(t, tt.writes, srv.writeCount(), "write requests")
			require.Equal(t, tt.reads, srv.readCount(), "read-back requests")
			require.Equal(t, tt.writes+tt.reads, res.Requests, "requests counted by the client")
			rec, lerr := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
			if tt.wantState == stateNoRow {
				// A refusal that stops the run, or answers that say the
				// request did not run, created nothing: the key must not
				// look uncertain to the next run.
				require.ErrorIs(t, lerr, dedup.ErrNotFound)
			} else {
				require.NoError(t, lerr)
				require.Equal(t, tt.wantState, rec.State)
			}
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.outcome, res.Outcome)
			want := tt.identifier
			switch want {
			case "":
				want = srv.URL + "/" + res.Key
			case "LOCATION":
				want = srv.URL + "/records/77"
			}
			require.Equal(t, want, res.Identifier)
			require.Equal(t, want, rec.Identifier)
		})
	}
}

func TestWriteRequestShape(t *testing.T) {
	t.Run("put sends the canonical body to endpoint/key with If-None-Match", func(t *testing.T) {
		srv := newScripted(t, reply{}, reply{status: 201})
		c := newTestClient(t, srv.URL+"/records/", protocol.Put, openStore(t))
		res, err := c.Deposit(context.Background(), []byte(`{ "b": 1, "a": [true, null] }`))
		require.NoError(t, err)
		require.Len(t, srv.writes, 1)
		r := srv.writes[0]
		require.Equal(t, http.MethodPut, r.Method)
		require.Equal(t, "/records/"+res.Key, r.URL.Path)
		require.Equal(t, "*", r.Header.Get("If-None-Match"))
		require.Equal(t, `{"a":[true,null],"b":1}`, string(srv.bodies[0]))
	})
	t.Run("idempotency-key sends the same quoted key on every retry", func(t *testing.T) {
		srv := newScripted(t, reply{}, reply{status: 500}, reply{status: 503}, reply{status: 201, body: `{"id":"x"}`})
		c := newTestClient(t, srv.URL, protocol.IdempotencyKey, openStore(t))
		res, err := c.Deposit(context.Background(), []byte(payload))
		require.NoError(t, err)
		require.Len(t, srv.writes, 3)
		want := driver.IdempotencyKey(mustEndpoint(srv.URL), res.Key, nil)
		require.Regexp(t, `^"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$`, want)
		for i, r := range srv.writes {
			require.Equal(t, http.MethodPost, r.Method)
			require.Equal(t, want, r.Header.Get("Idempotency-Key"), "attempt %d", i+1)
			require.Equal(t, srv.bodies[0], srv.bodies[i])
		}
	})
}

func TestProblemDetailIsKept(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 422, header: map[string]string{"Content-Type": "application/problem+json"}, body: `{"title":"Unprocessable","detail":"title is empty"}`})
	store := openStore(t)
	c := newTestClient(t, srv.URL, protocol.Put, store)
	res, err := c.Deposit(context.Background(), []byte(payload))
	var herr *HTTPError
	require.ErrorAs(t, err, &herr)
	require.Equal(t, 422, herr.StatusCode)
	require.Equal(t, "Unprocessable: title is empty", herr.Problem)
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, "Unprocessable: title is empty", rec.Problem)
	require.Equal(t, 422, rec.Status)

	t.Run("a recorded failure is not sent again", func(t *testing.T) {
		_, err := c.Deposit(context.Background(), []byte(payload))
		require.ErrorIs(t, err, ErrTerminal)
		require.Equal(t, 1, srv.writeCount())
	})
	t.Run("a recorded failure keeps its status and problem", func(t *testing.T) {
		first := herr
		res, err := c.Deposit(context.Background(), []byte(payload))
		require.ErrorIs(t, err, ErrTerminal)
		var replayed *HTTPError
		require.ErrorAs(t, err, &replayed)
		require.Equal(t, first.StatusCode, replayed.StatusCode)
		require.Equal(t, first.Problem, replayed.Problem)
		require.Equal(t, first.Method, replayed.Method)
		require.Equal(t, first.URL, replayed.URL)
		require.Equal(t, 422, res.Status)
		require.Equal(t, 1, srv.writeCount())
	})
	t.Run("RetryFailed sends it again", func(t *testing.T) {
		c2, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Retry: fastRetry, RetryFailed: true})
		require.NoError(t, err)
		_, err = c2.Deposit(context.Background(), []byte(payload))
		require.ErrorIs(t, err, ErrTerminal)
		require.Equal(t, 2, srv.writeCount())
	})
}

func TestRetryAfterIsHonouredAndCapped(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 503, header: map[string]string{"Retry-After": "3600"}}, reply{status: 201})
	var waits []time.Duration
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: openStore(t), Retry: fastRetry,
		Hooks: Hooks{OnRetry: func(e RetryEvent) { waits = append(waits, e.Wait) }}})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err)
	require.Equal(t, []time.Duration{fastRetry.Cap}, waits)
}

func TestErrorsNeverCarryCredentialsOrQueries(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 422})
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL + "/x?token=s3cret"}, Store: openStore(t), Retry: fastRetry,
		Header: http.Header{"Authorization": {"Bearer s3cret"}}})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), []byte(payload))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	require.Equal(t, "Bearer s3cret", srv.writes[0].Header.Get("Authorization"))
	require.Equal(t, "token=s3cret", srv.writes[0].URL.RawQuery)
}

func TestSameKeyIsNeverInFlightTwice(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	writes := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		writes++
		if writes == 1 {
			close(arrived)
		}
		mu.Unlock()
		<-release
		w.WriteHeader(201)
		fmt.Fprint(w, `{"identifier":"10.5072/one"}`)
	}))
	defer srv.Close()
	c := newTestClient(t, srv.URL, protocol.Put, openStore(t))

	const n = 8
	results := make(chan Result, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			res, err := c.Deposit(context.Background(), []byte(payload))
			errs <- err
			results <- res
		}()
	}
	// Hold the first request until the others have had time to pile up
	// behind it; whether they join the flight or find the stored result,
	// none may send a request of its own.
	<-arrived
	time.Sleep(20 * time.Millisecond)
	close(release)
	outcomes := map[Outcome]int{}
	for range n {
		require.NoError(t, <-errs)
		res := <-results
		require.Equal(t, "10.5072/one", res.Identifier)
		outcomes[res.Outcome]++
	}
	mu.Lock()
	require.Equal(t, 1, writes)
	mu.Unlock()
	require.Equal(t, 1, outcomes[OutcomeCreated])
	require.Equal(t, n-1, outcomes[OutcomeReplayed])
}

func TestSettingsMismatchIsRefusedBeforeAnyRequest(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 201})
	store := openStore(t)
	_, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Ignore: []string{"/created"}})
	require.NoError(t, err)
	_, err = New(Config{Target: put.Target{Endpoint: srv.URL + "/"}, Store: store})
	require.ErrorIs(t, err, ErrSettingsMismatch)
	_, err = New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Form: "python", Ignore: []string{"/created"}})
	require.ErrorIs(t, err, ErrSettingsMismatch)
	_, err = New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Ignore: []string{"/created"}})
	require.NoError(t, err, "the same settings are accepted again")
	_, err = New(Config{Target: idempotencykey.Target{Endpoint: srv.URL, KeySecret: []byte("a")}, Store: store})
	require.NoError(t, err, "another protocol is another target")
	_, err = New(Config{Target: idempotencykey.Target{Endpoint: srv.URL, KeySecret: []byte("b")}, Store: store})
	require.ErrorIs(t, err, ErrSettingsMismatch)
	require.Equal(t, 0, srv.writeCount())
}

func TestASettingsMismatchSaysSoOnce(t *testing.T) {
	store := openStore(t)
	_, err := New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store})
	require.NoError(t, err)
	_, err = New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store, Form: "python"})
	require.ErrorIs(t, err, ErrSettingsMismatch)
	require.ErrorIs(t, err, dedup.ErrSettingsMismatch, "the store's own error is kept")
	require.Equal(t, 1, strings.Count(err.Error(), "key settings differ"), err.Error())
	require.ErrorContains(t, err, "python", "the message names the settings")
}

func TestInvalidPayloadSendsNothing(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 201})
	c := newTestClient(t, srv.URL, protocol.Put, openStore(t))
	for _, in := range []string{`{"a":1,"a":2}`, `{"a":NaN}`, `{"a":`, "\xff", `[1] x`} {
		_, err := c.Deposit(context.Background(), []byte(in))
		require.ErrorIs(t, err, ErrInvalid, in)
	}
	require.Equal(t, 0, srv.writeCount())
}

// A deposit cancelled while it waits to retry an answer that may have
// taken effect (a 500) keeps its intent pending: the next run settles it.
func TestCancelledContextLeavesThePendingIntent(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 500})
	store := openStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store,
		Retry: backoff.Policy{Base: time.Second, Cap: time.Second, MaxAttempts: 10}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	c.hooks.OnRetry = func(RetryEvent) { cancel() }
	res, err := c.Deposit(ctx, []byte(payload))
	require.ErrorIs(t, err, ErrUnresolved)
	require.True(t, errors.Is(err, context.Canceled) || errors.Is(err, ErrInterrupted), err)
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)
}
