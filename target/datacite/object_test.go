package datacite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/datacite"
)

// The datacite target with an identity, through the client, against the
// DataCite stub: DOIs named by the payloads (--identity /doi) and DOIs
// derived from the object key.

const prefix = "10.5072"

var fastRetry = backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 6, MaxElapsed: 10 * time.Second}

// namedDOI is a payload naming its DOI, 10.5072/reef-N, with a title.
func namedDOI(n int, title string) string {
	return fmt.Sprintf(`{"doi":"10.5072/reef-%d","titles":[{"title":%q}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/reef/%d"}`, n, title, n)
}

// localID is a payload naming no DOI, its catalogue's own identifier the
// first alternate identifier.
func localID(id, title string) string {
	return fmt.Sprintf(`{"alternateIdentifiers":[{"alternateIdentifier":%q,"alternateIdentifierType":"local"}],"titles":[{"title":%q}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/%s"}`, id, title, id)
}

func openStore(t *testing.T) *dedup.SQLite {
	t.Helper()
	st, err := dedup.Open(filepath.Join(t.TempDir(), "deposit.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func stub(t *testing.T) *repotest.DataCiteServer {
	t.Helper()
	s, err := repotest.NewDataCiteServer(repotest.DataCiteConfig{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, endpoint string, st client.Store, event string, identity ...string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{Target: datacite.Target{Endpoint: endpoint, Prefix: prefix, Event: event},
		Store: st, Retry: fastRetry, Rate: client.NoRateLimit, Identity: identity})
	require.NoError(t, err)
	return c
}

func deposit(t *testing.T, c *client.Client, payload string) client.Result {
	t.Helper()
	res, err := c.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err, payload)
	return res
}

// markersOf are the deposit markers a stub DOI carries, by type.
func markersOf(t *testing.T, d repotest.DataCiteDOI) map[string]string {
	t.Helper()
	var attrs struct {
		AlternateIdentifiers []map[string]string `json:"alternateIdentifiers"`
	}
	require.NoError(t, json.Unmarshal(d.Attributes, &attrs))
	out := map[string]string{}
	for _, a := range attrs.AlternateIdentifiers {
		out[a["alternateIdentifierType"]] = a["alternateIdentifier"]
	}
	return out
}

func titleOf(t *testing.T, d repotest.DataCiteDOI) string {
	t.Helper()
	var attrs struct {
		Titles []map[string]string `json:"titles"`
	}
	require.NoError(t, json.Unmarshal(d.Attributes, &attrs))
	return attrs.Titles[0]["title"]
}

// A payload's own DOI is its record: created once, each correction an
// update that keeps the DOI findable, the same payload replayed and an
// old one stale, nothing sent for either.
func TestANamedDOIIsCreatedOnceAndUpdatedOnce(t *testing.T) {
	s := stub(t)
	c := newClient(t, s.URL, openStore(t), "publish", "/doi")
	v1, v2 := namedDOI(1, "Reef temperature"), namedDOI(1, "Reef temperature, corrected")

	created := deposit(t, c, v1)
	require.Equal(t, client.OutcomeCreated, created.Outcome)
	require.Equal(t, "10.5072/reef-1", created.Identifier)
	updated := deposit(t, c, v2)
	require.Equal(t, client.OutcomeUpdated, updated.Outcome)
	require.Equal(t, 2, updated.Requests, "the read, then the PUT")
	before := s.Stats().Requests
	require.Equal(t, client.OutcomeReplayed, deposit(t, c, v2).Outcome)
	stale := deposit(t, c, v1)
	require.Equal(t, client.OutcomeStale, stale.Outcome)
	require.Equal(t, updated.Key, stale.Current)
	require.Equal(t, before, s.Stats().Requests, "a replay and a stale line send nothing")

	st := s.Stats()
	require.Equal(t, int64(1), st.Minted)
	require.Equal(t, int64(1), st.MetadataUpdates)
	require.Equal(t, int64(1), st.Events, "published once; the update sent no event")
	dois := s.DOIs()
	require.Len(t, dois, 1)
	require.Equal(t, "findable", dois[0].State)
	require.Equal(t, 2, dois[0].Versions)
	require.Equal(t, "Reef temperature, corrected", titleOf(t, dois[0]))
	require.Equal(t, map[string]string{"deposit-sha256": created.Object, "deposit-version": updated.Key}, markersOf(t, dois[0]))
}

// Without a DOI in the payload, the identity's object key derives the
// DOI: a correction updates it rather than minting another.
func TestADerivedDOIWithAnIdentityStaysAcrossCorrections(t *testing.T) {
	s := stub(t)
	c := newClient(t, s.URL, openStore(t), "", "/alternateIdentifiers/0/alternateIdentifier")
	created := deposit(t, c, localID("reef-7", "Kelp cover"))
	want, err := datacite.DOI(prefix, created.Object)
	require.NoError(t, err)
	require.Equal(t, want, created.Identifier)
	updated := deposit(t, c, localID("reef-7", "Kelp cover, corrected"))
	require.Equal(t, client.OutcomeUpdated, updated.Outcome)
	require.Equal(t, want, updated.Identifier)
	require.Equal(t, int64(1), s.Stats().Minted)
	require.Equal(t, int64(1), s.Stats().MetadataUpdates)
	d := s.DOIs()[0]
	require.Equal(t, "draft", d.State)
	require.Equal(t, map[string]string{"local": "reef-7", "deposit-sha256": created.Object, "deposit-version": updated.Key}, markersOf(t, d))
}

// A lost store: the create meets 422 "has already been taken", the DOI is
// read back, carries this object's marker, and its version marker says
// what it holds: the payload updates it, or is found there.
func TestALostStoreReadsTheDOIAndGoesOnFromItsVersion(t *testing.T) {
	s := stub(t)
	deposit(t, newClient(t, s.URL, openStore(t), "", "/doi"), namedDOI(2, "v1"))
	res := deposit(t, newClient(t, s.URL, openStore(t), "", "/doi"), namedDOI(2, "v2"))
	require.Equal(t, client.OutcomeUpdated, res.Outcome)
	require.Equal(t, int64(1), s.Stats().MetadataUpdates)
	res = deposit(t, newClient(t, s.URL, openStore(t), "", "/doi"), namedDOI(2, "v2"))
	require.Equal(t, client.OutcomeExisting, res.Outcome)
	st := s.Stats()
	require.Equal(t, int64(1), st.Minted)
	require.Equal(t, int64(1), st.MetadataUpdates, "found holding its version: nothing updated")
	require.Equal(t, int64(2), st.Taken)
}

// A write by another tool between two deposits changes the version
// marker: the read before the update sees it, and nothing is sent.
func TestAnUpdateIsNotSentOverAChangeMadeElsewhere(t *testing.T) {
	s := stub(t)
	c := newClient(t, s.URL, openStore(t), "", "/doi")
	created := deposit(t, c, namedDOI(3, "ours"))
	put(t, s, "10.5072/reef-3", `{"titles":[{"title":"theirs"}],"alternateIdentifiers":[{"alternateIdentifier":"`+created.Object+`","alternateIdentifierType":"deposit-sha256"},{"alternateIdentifier":"elsewhere","alternateIdentifierType":"deposit-version"}]}`)
	_, err := c.Deposit(context.Background(), []byte(namedDOI(3, "ours, corrected")))
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "changed elsewhere")
	require.Equal(t, "theirs", titleOf(t, s.DOIs()[0]))
	require.Equal(t, int64(1), s.Stats().MetadataUpdates, "theirs only")
}

// put writes a DOI's attributes on the stub, as another tool would.
func put(t *testing.T, s *repotest.DataCiteServer, doi, attrs string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, s.URL+"/dois/"+doi, strings.NewReader(`{"data":{"type":"dois","attributes":`+attrs+`}}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/vnd.api+json")
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, resp.StatusCode)
}

// A DOI another object holds (its deposit-sha256 marker is that
// object's) is never claimed, nor updated.
func TestAnotherObjectsDOIIsForeign(t *testing.T) {
	s := stub(t)
	c := newClient(t, s.URL, openStore(t), "", "/alternateIdentifiers/0/alternateIdentifier")
	withDOI := func(id, title string) string {
		return strings.Replace(localID(id, title), `{`, `{"doi":"10.5072/shared",`, 1)
	}
	deposit(t, c, withDOI("a", "A's"))
	_, err := c.Deposit(context.Background(), []byte(withDOI("b", "B's")))
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "another object's DOI")
	require.Equal(t, "A's", titleOf(t, s.DOIs()[0]))
	require.Zero(t, s.Stats().MetadataUpdates)
}

// A DOI registered before deposit was used carries no markers: it is not
// taken over (that would need --adopt, not built).
func TestADOIWithoutMarkersIsForeign(t *testing.T) {
	s := stub(t)
	put(t, s, "10.5072/reef-4", `{"titles":[{"title":"registered by hand"}]}`)
	_, err := newClient(t, s.URL, openStore(t), "", "/doi").Deposit(context.Background(), []byte(namedDOI(4, "ours")))
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "no deposit markers")
	require.ErrorContains(t, err, "--adopt")
	require.Equal(t, "registered by hand", titleOf(t, s.DOIs()[0]))
	require.Zero(t, s.Stats().MetadataUpdates)
}

// A payload's DOI must be under the prefix; without an identity a payload
// naming its DOI stays refused, as before.
func TestANamedDOIOutsideThePrefixIsInvalid(t *testing.T) {
	s := stub(t)
	_, err := newClient(t, s.URL, openStore(t), "", "/doi").Deposit(context.Background(),
		[]byte(strings.Replace(namedDOI(5, "x"), "10.5072/", "10.9999/", 1)))
	require.ErrorIs(t, err, client.ErrInvalid)
	require.ErrorContains(t, err, "not under the DOI prefix 10.5072 (--doi-prefix)")
	_, err = newClient(t, s.URL, openStore(t), "").Deposit(context.Background(), []byte(namedDOI(5, "x")))
	require.ErrorIs(t, err, client.ErrInvalid)
	require.ErrorContains(t, err, "leave it out")
	require.Zero(t, s.Stats().Requests)
}

// An update whose answer is lost after the stub applied it is settled by
// the read that follows: updated, applied once.
func TestAnAmbiguousUpdateIsSettledByTheRead(t *testing.T) {
	dc, err := repotest.NewDataCite(repotest.DataCiteConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dc.Close() })
	var mu sync.Mutex
	dropped := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		drop := r.Method == http.MethodPut && !dropped
		dropped = dropped || drop
		mu.Unlock()
		if drop {
			dc.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		dc.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, openStore(t), "", "/doi")
	deposit(t, c, namedDOI(6, "v1"))
	res := deposit(t, c, namedDOI(6, "v2"))
	require.True(t, dropped)
	require.Equal(t, client.OutcomeUpdated, res.Outcome)
	require.Equal(t, int64(1), dc.Stats().MetadataUpdates, "exactly one update at the stub")
	require.Equal(t, "v2", titleOf(t, dc.DOIs()[0]))
}

// DOIs are case-insensitive: lines naming 10.5072/Reef-1 and
// 10.5072/REEF-1 are one object, one DOI, the second line its update; a
// DOI in lower case keys as it always did.
func TestADOIInAnotherCaseIsTheSameObject(t *testing.T) {
	s := stub(t)
	c := newClient(t, s.URL, openStore(t), "", "/doi")
	lower := deposit(t, c, namedDOI(1, "Reef"))
	k, err := c.Key([]byte(namedDOI(1, "Reef")))
	require.NoError(t, err)
	require.Equal(t, lower.Object, k.Object)

	mixed := strings.Replace(namedDOI(2, "Reef 2"), "reef-2", "Reef-2", 1)
	upper := strings.Replace(namedDOI(2, "Reef 2, corrected"), "reef-2", "REEF-2", 1)
	first := deposit(t, c, mixed)
	require.Equal(t, client.OutcomeCreated, first.Outcome)
	second := deposit(t, c, upper)
	require.Equal(t, client.OutcomeUpdated, second.Outcome)
	require.Equal(t, first.Object, second.Object, "one object")
	require.Equal(t, "10.5072/reef-2", second.Identifier)
	require.Len(t, s.DOIs(), 2, "one DOI per object")
}

// A DOI registered before deposit was used (no markers) is another's
// without --adopt, and with it is ours to update: the update adds the
// markers, and the next correction is an ordinary update.
func TestAnUnmarkedDOIIsFailedUnlessAdopted(t *testing.T) {
	s := stub(t)
	body := `{"data":{"type":"dois","attributes":` + namedDOI(3, "Reef, registered by hand") + `}}`
	resp, err := http.Post(s.URL+"/dois", "application/vnd.api+json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	c := newClient(t, s.URL, openStore(t), "", "/doi")
	_, err = c.Deposit(context.Background(), []byte(namedDOI(3, "Reef")))
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "carries no deposit markers")

	adopt, err := client.New(client.Config{Target: datacite.Target{Endpoint: s.URL, Prefix: prefix, Adopt: true},
		Store: openStore(t), Retry: fastRetry, Rate: client.NoRateLimit, Identity: []string{"/doi"}})
	require.NoError(t, err)
	res := deposit(t, adopt, namedDOI(3, "Reef"))
	require.Equal(t, client.OutcomeUpdated, res.Outcome)
	require.Equal(t, "10.5072/reef-3", res.Identifier)
	dois := s.DOIs()
	require.Len(t, dois, 1)
	require.Equal(t, map[string]string{"deposit-sha256": res.Object, "deposit-version": res.Key}, markersOf(t, dois[0]))
	again := deposit(t, adopt, namedDOI(3, "Reef, corrected"))
	require.Equal(t, client.OutcomeUpdated, again.Outcome)
	require.Equal(t, client.OutcomeReplayed, deposit(t, adopt, namedDOI(3, "Reef, corrected")).Outcome)
}

// A DOI registered by hand with the very metadata of a line is that
// object's first version, existing, with nothing written; a changed line
// of it fails as another's DOI, as a DOI with other metadata does at once.
func TestAnUnmarkedDOIHoldingTheLinesMetadataIsExisting(t *testing.T) {
	s := stub(t)
	register := func(n int, title string) {
		body := `{"data":{"type":"dois","attributes":` + namedDOI(n, title) + `}}`
		resp, err := http.Post(s.URL+"/dois", "application/vnd.api+json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusCreated, resp.StatusCode)
	}
	register(5, "Reef")
	register(6, "Reef, by hand")
	before := s.Stats()

	c := newClient(t, s.URL, openStore(t), "", "/doi")
	res := deposit(t, c, namedDOI(5, "Reef"))
	require.Equal(t, client.OutcomeExisting, res.Outcome)
	require.Equal(t, "10.5072/reef-5", res.Identifier)
	require.Equal(t, client.OutcomeReplayed, deposit(t, c, namedDOI(5, "Reef")).Outcome)
	_, err := c.Deposit(context.Background(), []byte(namedDOI(5, "Reef, corrected")))
	require.ErrorIs(t, err, client.ErrTerminal)
	require.ErrorContains(t, err, "carries no deposit markers")
	_, err = c.Deposit(context.Background(), []byte(namedDOI(6, "Reef")))
	require.ErrorIs(t, err, client.ErrTerminal, "other metadata is another's DOI")
	require.ErrorContains(t, err, "carries no deposit markers")

	after := s.Stats()
	require.Equal(t, before.MetadataUpdates, after.MetadataUpdates, "nothing written to either DOI")
	for _, d := range s.DOIs() {
		require.Empty(t, markersOf(t, d), "no marker added")
	}
}
