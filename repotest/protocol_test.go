package repotest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const inm = "If-None-Match"

func TestPutCreatesOnceAndAnswers412ForAnExistingKey(t *testing.T) {
	s := startServer(t, Config{})
	c := s.Client()

	created := mustSend(t, c, "PUT", s.URL+"/k1", `{"title":"a"}`, inm, "*")
	require.Equal(t, http.StatusCreated, created.status)
	id := field(t, created.body, "identifier")
	require.True(t, strings.HasPrefix(id, "10.5072/dk."), id)
	require.NotContains(t, id, "k1")
	require.Equal(t, "k1", field(t, created.body, "key"))
	require.Equal(t, s.URL+"/k1", created.header.Get("Location"))

	exists := mustSend(t, c, "PUT", s.URL+"/k1", `{"title":"a"}`, inm, "*")
	require.Equal(t, http.StatusPreconditionFailed, exists.status)
	require.Empty(t, exists.body)

	read := mustSend(t, c, "GET", s.URL+"/k1", "")
	require.Equal(t, http.StatusOK, read.status)
	require.Equal(t, id, field(t, read.body, "identifier"))
	require.Equal(t, "k1", field(t, read.body, "key"))
	require.Contains(t, string(read.body), `"metadata":{"title":"a"}`)

	st := s.Stats()
	require.Equal(t, int64(3), st.Requests)
	require.Equal(t, int64(1), st.Creates)
	require.Equal(t, int64(1), st.Replays)
	require.Equal(t, int64(1), st.Records)
	require.Equal(t, int64(0), st.Duplicates)
	require.Equal(t, []Record{{Key: "k1", Path: "/k1", Identifier: id, Body: []byte(`{"title":"a"}`), Created: s.Records()[0].Created}}, s.Records())
}

func TestPutRefusals(t *testing.T) {
	body := `{"title":"a"}`
	sum := sha256.Sum256([]byte(body))
	goodKey := hex.EncodeToString(sum[:])
	tests := []struct {
		name   string
		cfg    Config
		method string
		path   string
		body   string
		hdr    []string
		status int
	}{
		{"missing If-None-Match is 428", Config{}, "PUT", "/k", body, nil, 428},
		{"If-None-Match other than star is 428", Config{}, "PUT", "/k", body, []string{inm, `"x"`}, 428},
		{"key that is not the body hash is 422", Config{VerifyKey: true}, "PUT", "/k", body, []string{inm, "*"}, 422},
		{"body that is not JSON is 400", Config{}, "PUT", "/k", `{"title":`, []string{inm, "*"}, 400},
		{"trailing data after JSON is 400", Config{}, "PUT", "/k", `{} {}`, []string{inm, "*"}, 400},
		{"non-JSON content type is 415", Config{}, "PUT", "/k", body, []string{inm, "*", "Content-Type", "text/plain"}, 415},
		{"body over the limit is 413", Config{MaxBodyBytes: 4}, "PUT", "/k", body, []string{inm, "*"}, 413},
		{"absent record is 404", Config{}, "GET", "/nothing", "", nil, 404},
		{"nested path is 404", Config{}, "PUT", "/a/b", body, []string{inm, "*"}, 404},
		{"root is 404", Config{}, "PUT", "/", body, []string{inm, "*"}, 404},
		{"DELETE of an absent record is 404", Config{}, "DELETE", "/k", "", nil, 404},
		{"POST is 405", Config{}, "POST", "/k", body, nil, 405},
		{"no credentials is 401", Config{Authorization: "Bearer s3"}, "PUT", "/k", body, []string{inm, "*"}, 401},
		{"wrong credentials is 403", Config{Authorization: "Bearer s3"}, "PUT", "/k", body, []string{inm, "*", "Authorization", "Bearer no"}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, tt.cfg)
			requireProblem(t, tt.status, mustSend(t, s.Client(), tt.method, s.URL+tt.path, tt.body, tt.hdr...))
			require.Equal(t, int64(0), s.Stats().Records)
		})
	}

	t.Run("key that is the body hash is 201 under VerifyKey", func(t *testing.T) {
		s := startServer(t, Config{VerifyKey: true})
		require.Equal(t, 201, mustSend(t, s.Client(), "PUT", s.URL+"/"+goodKey, body, inm, "*").status)
	})
	t.Run("right credentials are accepted", func(t *testing.T) {
		s := startServer(t, Config{Authorization: "Bearer s3"})
		require.Equal(t, 201, mustSend(t, s.Client(), "PUT", s.URL+"/k", body, inm, "*", "Authorization", "Bearer s3", "Content-Type", "application/json").status)
	})
	t.Run("405 names the allowed methods", func(t *testing.T) {
		s := startServer(t, Config{})
		require.Equal(t, "DELETE, GET, HEAD, PUT", mustSend(t, s.Client(), "POST", s.URL+"/k", body).header.Get("Allow"))
	})
}

func TestPutDeleteRemovesTheRecordAndItsIdentifierIsNotMintedAgain(t *testing.T) {
	s := startServer(t, Config{})
	c := s.Client()
	first := mustSend(t, c, "PUT", s.URL+"/k", `{"title":"a"}`, inm, "*")
	require.Equal(t, http.StatusCreated, first.status)
	require.Equal(t, http.StatusCreated, mustSend(t, c, "PUT", s.URL+"/other", `{"title":"b"}`, inm, "*").status)

	gone := mustSend(t, c, "DELETE", s.URL+"/k", "")
	require.Equal(t, http.StatusNoContent, gone.status)
	require.Empty(t, gone.body)
	requireProblem(t, http.StatusNotFound, mustSend(t, c, "GET", s.URL+"/k", ""))
	requireProblem(t, http.StatusNotFound, mustSend(t, c, "DELETE", s.URL+"/k", ""))
	require.Len(t, s.Records(), 1)
	require.Equal(t, "other", s.Records()[0].Key)

	again := mustSend(t, c, "PUT", s.URL+"/k", `{"title":"a"}`, inm, "*")
	require.Equal(t, http.StatusCreated, again.status, "the key is free again")
	require.NotEqual(t, field(t, first.body, "identifier"), field(t, again.body, "identifier"))
	st := s.Stats()
	require.Equal(t, int64(1), st.Deletes)
	require.Equal(t, int64(2), st.Records)
	require.Equal(t, int64(0), st.Duplicates, "a record made again after its deletion is no duplicate")
}

func TestPutDeleteFaultsAreDrawnApartFromTheCreates(t *testing.T) {
	s := startServer(t, Config{Faults: "nth=1:drop"})
	c := s.Client()
	_, err := send(c, "PUT", s.URL+"/k", `{"title":"a"}`, inm, "*")
	require.Error(t, err, "the first PUT of the key is dropped after commit")
	require.Equal(t, http.StatusPreconditionFailed, mustSend(t, c, "PUT", s.URL+"/k", `{"title":"a"}`, inm, "*").status)

	_, err = send(c, "DELETE", s.URL+"/k", "")
	require.Error(t, err, "the first DELETE of the key is dropped after it removed the record")
	require.Empty(t, s.Records())
	requireProblem(t, http.StatusNotFound, mustSend(t, c, "DELETE", s.URL+"/k", ""))
	require.Equal(t, int64(2), s.Stats().FaultsByKind["drop"])
}

func TestPutIgnoringIfNoneMatchCreatesDuplicateVersions(t *testing.T) {
	s := startServer(t, Config{IgnoreIfNoneMatch: true})
	c := s.Client()
	first := mustSend(t, c, "PUT", s.URL+"/k", `{"v":1}`)
	require.Equal(t, http.StatusCreated, first.status)
	second := mustSend(t, c, "PUT", s.URL+"/k", `{"v":2}`, inm, "*")
	require.Equal(t, http.StatusOK, second.status)
	require.NotEqual(t, field(t, first.body, "identifier"), field(t, second.body, "identifier"))
	require.Equal(t, field(t, second.body, "identifier"), field(t, mustSend(t, c, "GET", s.URL+"/k", "").body, "identifier"))
	st := s.Stats()
	require.Equal(t, int64(2), st.Records)
	require.Equal(t, int64(1), st.Duplicates)
}

const ik = "Idempotency-Key"

func TestIdempotencyKeyMissThenHitReplaysTheSameAnswer(t *testing.T) {
	s := startServer(t, Config{Protocol: ProtocolIdempotencyKey})
	c := s.Client()
	key := `"8e03978e-40d5-43e8-bc93-6894a57f9324"`

	miss := mustSend(t, c, "POST", s.URL, `{"a":1,"b":[1,2]}`, ik, key)
	require.Equal(t, http.StatusCreated, miss.status)
	require.Equal(t, "miss", miss.header.Get("Idempotency-Key-Reply"))
	id := field(t, miss.body, "id")
	require.True(t, strings.HasPrefix(id, "10.5072/dk."), id)

	// Member order and whitespace do not make a different request.
	hit := mustSend(t, c, "POST", s.URL, "{ \"b\": [1, 2], \"a\": 1 }", ik, key)
	require.Equal(t, http.StatusCreated, hit.status)
	require.Equal(t, "hit", hit.header.Get("Idempotency-Key-Reply"))
	require.Equal(t, miss.body, hit.body)

	requireProblem(t, http.StatusUnprocessableEntity, mustSend(t, c, "POST", s.URL, `{"a":2}`, ik, key))

	// The resource is part of the cache key: the same key elsewhere is a new request.
	other := mustSend(t, c, "POST", s.URL+"/compute/job/r2", `{"a":1,"b":[1,2]}`, ik, key)
	require.Equal(t, "miss", other.header.Get("Idempotency-Key-Reply"))
	require.NotEqual(t, id, field(t, other.body, "id"))

	st := s.Stats()
	require.Equal(t, int64(2), st.Creates)
	require.Equal(t, int64(1), st.Replays)
	require.Equal(t, int64(1), st.Duplicates, "the second resource got the same body")
	recs := s.Records()
	require.Equal(t, "8e03978e-40d5-43e8-bc93-6894a57f9324", recs[0].Key)
	require.Equal(t, "/compute/job/r2", recs[1].Path)
}

func TestIdempotencyKeyRefusals(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		method string
		hdr    []string
		status int
	}{
		{"missing key is 400", Config{}, "POST", nil, 400},
		{"unquoted key is 400", Config{}, "POST", []string{ik, "abc"}, 400},
		{"empty string key is 400", Config{}, "POST", []string{ik, `""`}, 400},
		{"key with parameters is 400", Config{}, "POST", []string{ik, `"abc";a=1`}, 400},
		{"bad escape is 400", Config{}, "POST", []string{ik, `"a\b"`}, 400},
		{"unterminated key is 400", Config{}, "POST", []string{ik, `"abc`}, 400},
		{"two keys are 400", Config{}, "POST", []string{ik, `"a"`, ik, `"b"`}, 400},
		{"key on a server without idempotency is 501", Config{IdempotencyDisabled: true}, "POST", []string{ik, `"a"`}, 501},
		{"GET is 405", Config{}, "GET", nil, 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Protocol = ProtocolIdempotencyKey
			s := startServer(t, tt.cfg)
			requireProblem(t, tt.status, mustSend(t, s.Client(), tt.method, s.URL, `{}`, tt.hdr...))
			require.Equal(t, int64(0), s.Stats().Records)
		})
	}
}

func TestIdempotencyKeyEscapedStringIsUnquoted(t *testing.T) {
	s := startServer(t, Config{Protocol: ProtocolIdempotencyKey})
	require.Equal(t, 201, mustSend(t, s.Client(), "POST", s.URL, `{}`, ik, ` "a\"b\\c" `).status)
	require.Equal(t, `a"b\c`, s.Records()[0].Key)
}

func TestPostWithoutKeyIsUnprotectedWhereAllowed(t *testing.T) {
	for _, cfg := range []Config{{IdempotencyKeyOptional: true}, {IdempotencyDisabled: true}} {
		cfg.Protocol = ProtocolIdempotencyKey
		s := startServer(t, cfg)
		for range 2 {
			a := mustSend(t, s.Client(), "POST", s.URL, `{"x":1}`)
			require.Equal(t, http.StatusCreated, a.status)
			require.Empty(t, a.header.Get("Idempotency-Key-Reply"))
		}
		st := s.Stats()
		require.Equal(t, int64(2), st.Records)
		require.Equal(t, int64(1), st.Duplicates)
	}
}

// gate blocks the first create that reaches it until released.
type gate struct {
	once     sync.Once
	arrived  chan struct{}
	released chan struct{}
}

func newGate() *gate { return &gate{arrived: make(chan struct{}), released: make(chan struct{})} }

func (g *gate) hook(string) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.arrived)
		<-g.released
	}
}

func TestIdempotencyKeyInFlightIs409UntilTheLockExpires(t *testing.T) {
	clk := newClock()
	g := newGate()
	s := startServer(t, Config{Protocol: ProtocolIdempotencyKey, LockTTL: 10 * time.Second, now: clk.now, beforeCommit: g.hook})
	c := s.Client()
	var release sync.Once
	open := func() { release.Do(func() { close(g.released) }) }
	t.Cleanup(open) // runs before the server's Close, even when the test fails

	first := make(chan answer, 1)
	go func() {
		a, _ := send(c, "POST", s.URL, `{"a":1}`, ik, `"k"`)
		first <- a
	}()
	<-g.arrived

	busy := mustSend(t, c, "POST", s.URL, `{"a":1}`, ik, `"k"`)
	requireProblem(t, http.StatusConflict, busy)
	require.Empty(t, busy.header.Get("Retry-After"), "IRI answers an in-flight key without Retry-After")
	// In flight, even a different body gets 409, as in the IRI demo stores.
	requireProblem(t, http.StatusConflict, mustSend(t, c, "POST", s.URL, `{"a":2}`, ik, `"k"`))

	// The lock is not renewed: once it expires, a retry runs the create again.
	clk.advance(10 * time.Second)
	second := mustSend(t, c, "POST", s.URL, `{"a":1}`, ik, `"k"`)
	require.Equal(t, http.StatusCreated, second.status)
	require.Equal(t, "miss", second.header.Get("Idempotency-Key-Reply"))

	open()
	a := <-first
	require.Equal(t, http.StatusCreated, a.status)
	require.Equal(t, "miss", a.header.Get("Idempotency-Key-Reply"))

	st := s.Stats()
	require.Equal(t, int64(2), st.Conflicts)
	require.Equal(t, int64(2), st.Records)
	require.Equal(t, int64(1), st.Duplicates)
}

func TestIdempotencyKeyResultExpiresAfterResultTTL(t *testing.T) {
	clk := newClock()
	s := startServer(t, Config{Protocol: ProtocolIdempotencyKey, ResultTTL: time.Hour, now: clk.now})
	c := s.Client()
	require.Equal(t, "miss", mustSend(t, c, "POST", s.URL, `{}`, ik, `"k"`).header.Get("Idempotency-Key-Reply"))
	clk.advance(time.Hour - time.Nanosecond)
	require.Equal(t, "hit", mustSend(t, c, "POST", s.URL, `{}`, ik, `"k"`).header.Get("Idempotency-Key-Reply"))
	clk.advance(time.Nanosecond)
	require.Equal(t, "miss", mustSend(t, c, "POST", s.URL, `{}`, ik, `"k"`).header.Get("Idempotency-Key-Reply"))
	require.Equal(t, int64(1), s.Stats().Duplicates)
}

func TestNewHandlerRefusesABadConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"unknown protocol":  {Protocol: "post"},
		"bad faults":        {Faults: "drop=2"},
		"negative lock TTL": {LockTTL: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewHandler(cfg)
			require.ErrorIs(t, err, ErrConfig)
		})
	}
}

func TestClosedHandlerAnswers503(t *testing.T) {
	h, err := NewHandler(Config{})
	require.NoError(t, err)
	require.NoError(t, h.Close())
	require.NoError(t, h.Close())
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("PUT", "/k", strings.NewReader(`{}`)))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

func TestAClientThatGivesUpDuringLatencyStillGetsItsRecordCommitted(t *testing.T) {
	for _, protocol := range []Protocol{ProtocolPut, ProtocolIdempotencyKey} {
		t.Run(string(protocol), func(t *testing.T) {
			g := newGate()
			s := startServer(t, Config{Protocol: protocol, Latency: 50 * time.Millisecond, beforeCommit: g.hook})
			var release sync.Once
			open := func() { release.Do(func() { close(g.released) }) }
			t.Cleanup(open)

			ctx, cancel := context.WithCancel(context.Background())
			method, url, hdr := "PUT", s.URL+"/k", []string{inm, "*"}
			if protocol == ProtocolIdempotencyKey {
				method, url, hdr = "POST", s.URL, []string{ik, `"k"`}
			}
			req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(`{}`))
			require.NoError(t, err)
			req.Header.Set(hdr[0], hdr[1])
			errc := make(chan error, 1)
			go func() {
				resp, err := s.Client().Do(req)
				if err == nil {
					resp.Body.Close()
				}
				errc <- err
			}()
			<-g.arrived
			cancel()
			require.ErrorIs(t, <-errc, context.Canceled)
			open()
			s.Close() // waits for the request to finish on the server
			require.Equal(t, int64(1), s.Stats().Records)
		})
	}
}

// Two writes of one key at once are counted as an overlap; writes of other
// keys, or one after another, are not. The two writes of k1 are held
// reading their bodies (inside the handler, past the point where a write
// is counted) until both have come that far, so they overlap however the
// machine schedules them.
func TestOverlappingWritesOfAKeyAreCounted(t *testing.T) {
	h, err := NewHandler(Config{})
	require.NoError(t, err)
	var both sync.WaitGroup
	both.Add(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/k1" {
			r.Body = &heldBody{ReadCloser: r.Body, hold: func() { both.Done(); both.Wait() }}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	body := `{"title":"x"}`
	var wg sync.WaitGroup
	for _, key := range []string{"k1", "k1", "k2"} {
		wg.Go(func() {
			_, err := send(srv.Client(), http.MethodPut, srv.URL+"/"+key, body, "If-None-Match", "*", "Content-Type", "application/json")
			assert.NoError(t, err) // off the test goroutine
		})
	}
	wg.Wait()
	_, err = send(srv.Client(), http.MethodPut, srv.URL+"/k2", body, "If-None-Match", "*", "Content-Type", "application/json")
	require.NoError(t, err)
	require.Equal(t, int64(1), h.Stats().Overlaps)
}

// heldBody calls hold before its first read.
type heldBody struct {
	io.ReadCloser
	hold func()
	once sync.Once
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.once.Do(b.hold)
	return b.ReadCloser.Read(p)
}
