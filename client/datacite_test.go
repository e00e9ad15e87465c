package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/datacite"
)

const testPrefix = "10.5072"

// newDataCiteClient is a client of the stub with quick retries and no rate
// limit.
func newDataCiteClient(t *testing.T, srv *repotest.DataCiteServer, store Store, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{
		Target: datacite.Target{Endpoint: srv.URL, Prefix: testPrefix}, Store: store,
		Retry: fastRetry, Rate: -1, HTTPClient: srv.Client(),
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	require.NoError(t, err)
	return c
}

// setEvent sets the DataCite event of cfg's target.
func setEvent(cfg *Config, event string) {
	dc := cfg.Target.(datacite.Target)
	dc.Event = event
	cfg.Target = dc
}

// dataciteCreate is the create request of a deposit of key with body, as
// c's DataCite target builds it.
func dataciteCreate(c *Client, key string, body []byte) (request, error) {
	steps, err := c.target.Steps(canonical.Keyed{Key: key, Body: body}, "")
	if err != nil {
		return request{}, err
	}
	return steps[0].Build(nil)
}

func newStub(t *testing.T, cfg repotest.DataCiteConfig) *repotest.DataCiteServer {
	t.Helper()
	srv, err := repotest.NewDataCiteServer(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// dcPayload is a complete set of DOI attributes, enough to publish.
func dcPayload(i int) []byte {
	return fmt.Appendf(nil, `{"titles":[{"title":"Reef temperature, station %d"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/reef/%d"}`, i, i)
}

func TestDataCiteConfig(t *testing.T) {
	store := openStore(t)
	t.Run("the test system and DataCite's rate are the defaults", func(t *testing.T) {
		c, err := New(Config{Target: datacite.Target{Prefix: testPrefix}, Store: store})
		require.NoError(t, err)
		require.Equal(t, "datacite "+datacite.TestEndpoint+" "+testPrefix, c.StoreTarget())
		require.NotNil(t, c.http.Transport.(*sharedTransport).limiter, "rate limited by default")
	})
	t.Run("a negative rate is unlimited", func(t *testing.T) {
		c, err := New(Config{Target: datacite.Target{Prefix: testPrefix}, Store: store, Rate: -1})
		require.NoError(t, err)
		require.Nil(t, c.http.Transport.(*sharedTransport).limiter)
	})
	t.Run("production only when named", func(t *testing.T) {
		c, err := New(Config{Target: datacite.Target{Endpoint: datacite.Endpoint, Prefix: "10.1234"}, Store: store})
		require.NoError(t, err)
		require.Equal(t, "datacite "+datacite.Endpoint+" 10.1234", c.StoreTarget())
	})
	t.Run("a missing prefix is refused", func(t *testing.T) {
		_, err := New(Config{Target: datacite.Target{}, Store: store})
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, "datacite.Target.Prefix")
	})
	t.Run("an unknown event is refused", func(t *testing.T) {
		_, err := New(Config{Target: datacite.Target{Prefix: testPrefix, Event: "hide"}, Store: store})
		require.ErrorIs(t, err, ErrConfig)
		require.ErrorContains(t, err, "datacite.Target.Event")
	})
	t.Run("datacite is a protocol name", func(t *testing.T) {
		p, err := protocol.Parse("datacite")
		require.NoError(t, err)
		require.Equal(t, protocol.DataCite, p)
	})
}

func TestDataCiteRequestBody(t *testing.T) {
	srv := newStub(t, repotest.DataCiteConfig{})
	c := newDataCiteClient(t, srv, openStore(t), nil)
	line := []byte(`{"titles":[{"title":"A <b> & c"}],"alternateIdentifiers":[{"alternateIdentifier":"x-1","alternateIdentifierType":"local"}],"prefix":"10.5072"}`)
	k, err := c.Key(line)
	require.NoError(t, err)
	doi, err := datacite.DOI(testPrefix, k.Key)
	require.NoError(t, err)

	t.Run("the payload's attributes with the DOI and the key added", func(t *testing.T) {
		req, err := dataciteCreate(c, k.Key, k.Body)
		require.NoError(t, err)
		require.Equal(t, http.MethodPost, req.Method)
		require.Equal(t, srv.URL+"/dois", req.URL)
		require.Equal(t, "application/vnd.api+json", req.Header.Get("Content-Type"))
		body := req.Body
		var doc struct {
			Data struct {
				Type       string         `json:"type"`
				Attributes map[string]any `json:"attributes"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(body, &doc))
		require.Equal(t, "dois", doc.Data.Type)
		require.Equal(t, doi, doc.Data.Attributes["doi"])
		require.NotContains(t, doc.Data.Attributes, "prefix")
		require.Equal(t, []any{
			map[string]any{"alternateIdentifier": "x-1", "alternateIdentifierType": "local"},
			map[string]any{"alternateIdentifier": k.Key, "alternateIdentifierType": "deposit-sha256"},
		}, doc.Data.Attributes["alternateIdentifiers"])
		require.Contains(t, string(body), `"A <b> & c"`, "sent as given, not HTML-escaped")
	})
	t.Run("a JSON:API document gives the same attributes", func(t *testing.T) {
		k2, err := c.Key([]byte(`{"data":{"type":"dois","attributes":` + string(line) + `}}`))
		require.NoError(t, err)
		require.NotEqual(t, k.Key, k2.Key, "the key is over the line as given")
		req, err := dataciteCreate(c, k2.Key, k2.Body)
		require.NoError(t, err)
		require.Contains(t, string(req.Body), `"x-1"`)
	})
	for name, bad := range map[string]string{
		"another doi is refused":                     `{"doi":"10.5072/other"}`,
		"another prefix is refused":                  `{"prefix":"10.9999"}`,
		"another deposit-sha256 key is refused":      `{"alternateIdentifiers":[{"alternateIdentifier":"abc","alternateIdentifierType":"deposit-sha256"}]}`,
		"alternateIdentifiers not a list is refused": `{"alternateIdentifiers":{}}`,
		"a JSON:API document with an id is refused":  `{"data":{"id":"10.5072/x","attributes":{}}}`,
		"an array is refused":                        `[1]`,
	} {
		t.Run(name, func(t *testing.T) {
			kb, err := c.Key([]byte(bad))
			require.NoError(t, err)
			_, err = dataciteCreate(c, kb.Key, kb.Body)
			require.Error(t, err)
		})
	}
	t.Run("a doi equal to the derived one in another case is accepted", func(t *testing.T) {
		// A body naming the DOI the client sends for this key (checked
		// case-insensitively) is not a conflict.
		_, err := dataciteCreate(c, k.Key, []byte(`{"doi":"`+strings.ToUpper(doi)+`"}`))
		require.NoError(t, err)
	})
}

// TestDataCiteChaos mints DOIs for 400 lines (about 10% repeats) through a
// stub that drops 15% of creates after committing them, resets 5% before,
// and answers 503, 429 and 500, publishing each DOI as a second step under
// the same faults, at concurrency 8, re-running while items are unresolved.
// The stub must end with exactly one DOI per distinct payload, each findable
// and carrying its key, and every result's identifier must be the stub's DOI.
func TestDataCiteChaos(t *testing.T) {
	var lines [][]byte
	distinct := 0
	for i := range 400 {
		if i > 0 && i%10 == 0 {
			lines = append(lines, lines[i/3])
			continue
		}
		distinct++
		lines = append(lines, dcPayload(i))
	}
	srv := newStub(t, repotest.DataCiteConfig{
		Faults:   "drop=0.15,reset=0.05,503=0.08,429=0.08:retry-after=1,500=0.04,reads",
		Seed:     11,
		Username: "REPO.ID", Password: "secret",
	})
	store := openStore(t)
	auth := http.Header{}
	req, _ := http.NewRequest(http.MethodGet, "/", nil)
	req.SetBasicAuth("REPO.ID", "secret")
	auth.Set("Authorization", req.Header.Get("Authorization"))
	newClient := func() *Client {
		return newDataCiteClient(t, srv, store, func(cfg *Config) {
			setEvent(cfg, "publish")
			cfg.Header = auth
			cfg.Retry = backoff.Policy{Base: time.Millisecond, Cap: 5 * time.Millisecond, MaxAttempts: 4}
		})
	}

	final := map[int64]ItemResult{}
	rounds := 0
	for ; rounds < 10; rounds++ {
		unresolved := 0
		sum, err := newClient().Run(context.Background(), items(lines), BatchOptions{Concurrency: 8, OnResult: func(r ItemResult) {
			final[r.Line] = r
			if r.Outcome == OutcomeUnresolved {
				unresolved++
			}
		}})
		require.NoError(t, err)
		require.Equal(t, 0, sum.Failed+sum.Invalid)
		if unresolved == 0 {
			break
		}
	}
	require.Less(t, rounds, 10, "still unresolved after 10 rounds")

	st := srv.Stats()
	require.Equal(t, int64(distinct), st.Minted, "one DOI per distinct payload")
	require.Positive(t, st.FaultsByKind["drop"], "faults were injected")
	require.Positive(t, st.Taken, "dropped creates were found taken")
	require.Equal(t, int64(distinct), st.Events, "each DOI published once")

	byDOI := map[string]repotest.DataCiteDOI{}
	for _, d := range srv.DOIs() {
		byDOI[d.DOI] = d
	}
	require.Len(t, byDOI, distinct)
	for line, r := range final {
		require.NoError(t, r.Err, "line %d", line)
		want, err := datacite.DOI(testPrefix, r.Key)
		require.NoError(t, err)
		require.Equal(t, want, r.Identifier, "line %d", line)
		d, ok := byDOI[r.Identifier]
		require.True(t, ok, "line %d: %s is the stub's", line, r.Identifier)
		require.Equal(t, "findable", d.State)
		require.Contains(t, string(d.Attributes), r.Key)
	}

	// A replay sends nothing: neither creates nor events.
	before := srv.Stats().Requests
	sum, err := newClient().Run(context.Background(), items(lines), BatchOptions{Concurrency: 8})
	require.NoError(t, err)
	require.Equal(t, len(lines), sum.Replayed)
	require.Equal(t, 0, sum.Requests)
	require.Equal(t, before, srv.Stats().Requests)
	t.Logf("%d rounds, stub stats %+v", rounds+1, st)
}

func TestDataCiteForeignDOIIsReportedNotClaimed(t *testing.T) {
	for name, foreignAttrs := range map[string]string{
		"no key at all":   `{"titles":[{"title":"Someone else's"}]}`,
		"another deposit": `{"alternateIdentifiers":[{"alternateIdentifier":"` + strings.Repeat("ab", 32) + `","alternateIdentifierType":"deposit-sha256"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := newStub(t, repotest.DataCiteConfig{})
			store := openStore(t)
			c := newDataCiteClient(t, srv, store, nil)
			payload := dcPayload(1)
			k, err := c.Key(payload)
			require.NoError(t, err)
			doi, err := datacite.DOI(testPrefix, k.Key)
			require.NoError(t, err)

			// Someone else holds our derived name.
			var attrs map[string]any
			require.NoError(t, json.Unmarshal([]byte(foreignAttrs), &attrs))
			attrs["doi"] = strings.ToUpper(doi)
			body, _ := json.Marshal(map[string]any{"data": map[string]any{"type": "dois", "attributes": attrs}})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/dois", strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/vnd.api+json")
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)

			res, err := c.Deposit(context.Background(), payload)
			require.ErrorIs(t, err, ErrTerminal)
			require.ErrorContains(t, err, "not this deposit's")
			require.ErrorContains(t, err, doi)
			require.Empty(t, res.Identifier, "not claimed")
			require.Equal(t, int64(1), srv.Stats().Minted)
			rec, err := store.Lookup(context.Background(), c.StoreTarget(), k.Key)
			require.NoError(t, err)
			require.Equal(t, dedup.StateFailed, rec.State)

			// A re-run reports the recorded failure without a request.
			before := srv.Stats().Requests
			_, err = c.Deposit(context.Background(), payload)
			require.ErrorIs(t, err, ErrTerminal)
			require.Equal(t, before, srv.Stats().Requests)
		})
	}
}

// A DOI that is taken but cannot be read back (another repository's draft)
// is never claimed: the item stays unresolved.
func TestDataCiteTakenButUnreadableStaysUnresolved(t *testing.T) {
	s := newScripted(t,
		reply{status: http.StatusNotFound, body: `{"errors":[{"status":"404","title":"The resource you are looking for doesn't exist."}]}`},
		reply{status: http.StatusUnprocessableEntity, body: `{"errors":[{"source":"doi","title":"This DOI has already been taken","uid":"10.5072/x"}]}`},
	)
	store := openStore(t)
	c, err := New(Config{Target: datacite.Target{Endpoint: s.URL, Prefix: testPrefix}, Store: store, Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), dcPayload(1))
	require.ErrorIs(t, err, ErrUnresolved)
	require.Empty(t, res.Identifier)
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)
	require.Equal(t, fastRetry.MaxAttempts, s.writeCount(), "the attempts are the writes': a read-back that read its answer spends none")
	doi, err := datacite.DOI(testPrefix, res.Key)
	require.NoError(t, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, body := range s.bodies {
		require.Contains(t, string(body), `"doi":"`+doi+`"`, "every attempt names the same DOI")
	}
}

func TestDataCiteAnswers(t *testing.T) {
	t.Run("a validation 422 is terminal with DataCite's messages", func(t *testing.T) {
		srv := newStub(t, repotest.DataCiteConfig{})
		c := newDataCiteClient(t, srv, openStore(t), nil)
		_, err := c.Deposit(context.Background(), []byte(`{"titles":[{"title":"No URL"}],"event":"publish"}`))
		require.ErrorIs(t, err, ErrTerminal)
		var herr *HTTPError
		require.True(t, errors.As(err, &herr))
		require.Equal(t, http.StatusUnprocessableEntity, herr.StatusCode)
		require.Contains(t, herr.Problem, "Can't be blank")
		require.Equal(t, int64(0), srv.Stats().Minted)
	})
	t.Run("wrong credentials stop the run", func(t *testing.T) {
		srv := newStub(t, repotest.DataCiteConfig{Username: "REPO.ID", Password: "secret"})
		c := newDataCiteClient(t, srv, openStore(t), func(cfg *Config) {
			cfg.Header = http.Header{"Authorization": {"Basic d3Jvbmc6d3Jvbmc="}}
		})
		_, err := c.Deposit(context.Background(), dcPayload(1))
		require.ErrorIs(t, err, ErrStopRun)
		require.Equal(t, int64(0), srv.Stats().Minted)
	})
	t.Run("429 is retried and mints once", func(t *testing.T) {
		srv := newStub(t, repotest.DataCiteConfig{Faults: "nth=1:429,nth=2:429"})
		c := newDataCiteClient(t, srv, openStore(t), nil)
		res, err := c.Deposit(context.Background(), dcPayload(1))
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, res.Outcome)
		require.Equal(t, 2, res.Retries)
		require.Equal(t, int64(1), srv.Stats().Minted)
	})
	t.Run("a dropped create is found taken, read back as ours, and created", func(t *testing.T) {
		srv := newStub(t, repotest.DataCiteConfig{Faults: "nth=1:drop"})
		c := newDataCiteClient(t, srv, openStore(t), nil)
		res, err := c.Deposit(context.Background(), dcPayload(1))
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, res.Outcome, "the dropped create was this deposit's")
		want, _ := datacite.DOI(testPrefix, res.Key)
		require.Equal(t, want, res.Identifier)
		st := srv.Stats()
		require.Equal(t, int64(1), st.Minted)
		require.Equal(t, int64(1), st.Taken)
	})
}

// Two processes (two stores) racing to mint the same payload: one creates,
// the other finds it (422 or 409) and reads it back; one DOI.
func TestDataCiteRacingCreatorsMintOnce(t *testing.T) {
	srv := newStub(t, repotest.DataCiteConfig{Latency: 20 * time.Millisecond})
	payload := dcPayload(7)
	const racers = 6
	results := make([]Result, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		c := newDataCiteClient(t, srv, openStore(t), nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = c.Deposit(context.Background(), payload)
		}()
	}
	wg.Wait()
	created := 0
	for i := range racers {
		require.NoError(t, errs[i])
		require.Equal(t, results[0].Identifier, results[i].Identifier)
		if results[i].Outcome == OutcomeCreated {
			created++
		}
	}
	require.Equal(t, 1, created)
	require.Equal(t, int64(1), srv.Stats().Minted)
}

// failPUT fails every PUT before it leaves: the event step cannot reach the
// server, as in a run whose network broke after the creates.
type failPUT struct{ next http.RoundTripper }

func (f failPUT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, errors.New("network down")
	}
	return f.next.RoundTrip(r)
}

func TestDataCitePublishRunsOnceAcrossRuns(t *testing.T) {
	srv := newStub(t, repotest.DataCiteConfig{})
	store := openStore(t)
	var lines [][]byte
	for i := range 5 {
		lines = append(lines, dcPayload(i))
	}
	publishing := func(cfg *Config) { setEvent(cfg, "publish") }

	// Run 1: every DOI is created, no publish gets through.
	c1 := newDataCiteClient(t, srv, store, func(cfg *Config) {
		publishing(cfg)
		cfg.HTTPClient = &http.Client{Transport: failPUT{srv.Client().Transport}}
	})
	var first []ItemResult
	sum, err := c1.Run(context.Background(), items(lines), BatchOptions{Concurrency: 2, OnResult: func(r ItemResult) { first = append(first, r) }})
	require.NoError(t, err)
	require.Equal(t, 5, sum.Unresolved)
	for _, r := range first {
		require.ErrorIs(t, r.Err, ErrUnresolved)
		require.ErrorContains(t, r.Err, "publish step")
		want, _ := datacite.DOI(testPrefix, r.Key)
		require.Equal(t, want, r.Identifier, "the DOI is reported even though publishing failed")
	}
	st := srv.Stats()
	require.Equal(t, int64(5), st.Minted)
	require.Equal(t, int64(0), st.EventRequests)

	// Run 2: the DOIs are replayed from the store and published, once each.
	sum, err = newDataCiteClient(t, srv, store, publishing).Run(context.Background(), items(lines), BatchOptions{Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, 5, sum.Replayed)
	require.Equal(t, 5, sum.Requests, "one PUT per DOI, no create")
	st = srv.Stats()
	require.Equal(t, int64(5), st.Minted)
	require.Equal(t, int64(5), st.EventRequests)
	require.Equal(t, int64(5), st.Events)
	for _, d := range srv.DOIs() {
		require.Equal(t, "findable", d.State)
	}

	// Run 3: nothing is sent again.
	sum, err = newDataCiteClient(t, srv, store, publishing).Run(context.Background(), items(lines), BatchOptions{Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, 5, sum.Replayed)
	require.Equal(t, 0, sum.Requests)
	require.Equal(t, int64(5), srv.Stats().EventRequests)
	counts, err := store.Count(context.Background(), "")
	require.NoError(t, err)
	require.Equal(t, dedup.Counts{Done: 10}, counts, "5 creates and 5 publishes, each under its own target")
}

func TestDataCitePublishRefusedIsRecordedFailed(t *testing.T) {
	srv := newStub(t, repotest.DataCiteConfig{})
	store := openStore(t)
	c := newDataCiteClient(t, srv, store, func(cfg *Config) { setEvent(cfg, "register") })
	res, err := c.Deposit(context.Background(), []byte(`{"titles":[{"title":"Draft only"}]}`))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "register step")
	want, _ := datacite.DOI(testPrefix, res.Key)
	require.Equal(t, want, res.Identifier, "the draft DOI exists and is reported")
	require.Equal(t, int64(1), srv.Stats().Minted)

	// Not re-sent on a re-run, unless asked.
	before := srv.Stats().Requests
	_, err = c.Deposit(context.Background(), []byte(`{"titles":[{"title":"Draft only"}]}`))
	require.ErrorIs(t, err, ErrTerminal)
	require.Equal(t, before, srv.Stats().Requests)
}

// BenchmarkDataCiteDeposit mints and publishes DOIs through the stub at
// concurrency 8, rate limit off; one op is one new DOI (a POST and a PUT).
func BenchmarkDataCiteDeposit(b *testing.B) {
	srv, err := repotest.NewDataCiteServer(repotest.DataCiteConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	store, err := dedup.Open(b.TempDir() + "/deposit.db")
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	c, err := New(Config{Target: datacite.Target{Endpoint: srv.URL, Prefix: testPrefix, Event: "publish"},
		Store: store, Rate: -1, HTTPClient: srv.Client()})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	sum, err := c.Run(context.Background(), func(yield func(Item) bool) {
		for i := range b.N {
			if !yield(Item{Line: int64(i), Payload: dcPayload(i)}) {
				return
			}
		}
	}, BatchOptions{Concurrency: 8})
	if err != nil || sum.Created != b.N {
		b.Fatalf("%+v %v", sum, err)
	}
}
