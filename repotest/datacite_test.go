package repotest

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

const jsonAPI = "application/vnd.api+json"

func startDataCite(t testing.TB, cfg DataCiteConfig) *DataCiteServer {
	t.Helper()
	s, err := NewDataCiteServer(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// doiDoc is a JSON:API create or update body with the given attributes.
func doiDoc(attrs string) string { return `{"data":{"type":"dois","attributes":` + attrs + `}}` }

// state reads a DOI back and returns its state ("" when it is not found).
func state(t *testing.T, s *DataCiteServer, doi string) string {
	t.Helper()
	a := mustSend(t, s.Client(), "GET", s.URL+"/dois/"+doi, "")
	if a.status == http.StatusNotFound {
		return ""
	}
	require.Equal(t, http.StatusOK, a.status)
	var doc struct {
		Data struct {
			Attributes struct {
				State string `json:"state"`
			} `json:"attributes"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(a.body, &doc))
	return doc.Data.Attributes.State
}

const complete = `"url":"https://example.org/1","creators":[{"name":"Vega, A."}],"titles":[{"title":"Reef"}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"}`

func TestDataCitePrefixOnlyPostMintsANewDOIEachTime(t *testing.T) {
	s := startDataCite(t, DataCiteConfig{})
	seen := map[string]bool{}
	for range 3 {
		a := mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"prefix":"10.5072"}`), "Content-Type", jsonAPI)
		require.Equal(t, http.StatusCreated, a.status, "body %s", a.body)
		var doc struct {
			Data struct{ ID string } `json:"data"`
		}
		require.NoError(t, json.Unmarshal(a.body, &doc))
		require.Regexp(t, regexp.MustCompile(`^10\.5072/[a-z2-7]{4}-[a-z2-7]{4}$`), doc.Data.ID)
		seen[doc.Data.ID] = true
	}
	require.Len(t, seen, 3)
	require.Equal(t, int64(3), s.Stats().Minted)
}

func TestDataCiteExplicitDOIIsTakenOnce(t *testing.T) {
	s := startDataCite(t, DataCiteConfig{})
	a := mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/DK-AbC"}`), "Content-Type", jsonAPI)
	require.Equal(t, http.StatusCreated, a.status)
	require.Equal(t, s.URL+"/dois/10.5072/dk-abc", a.header.Get("Location"))

	a = mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/dk-abc"}`), "Content-Type", jsonAPI)
	require.Equal(t, http.StatusUnprocessableEntity, a.status)
	require.Equal(t, `{"errors":[{"source":"doi","title":"This DOI has already been taken","uid":"10.5072/dk-abc"}]}`, string(a.body))
	require.Equal(t, "application/vnd.api+json; charset=utf-8", a.header.Get("Content-Type"))

	require.Equal(t, "draft", state(t, s, "10.5072/DK-ABC"), "DOIs are case-insensitive")
	st := s.Stats()
	require.Equal(t, int64(1), st.Minted)
	require.Equal(t, int64(1), st.Taken)
	require.Equal(t, "10.5072/dk-abc", s.DOIs()[0].DOI)
}

func TestDataCiteRacingCreatorGets409(t *testing.T) {
	release := make(chan struct{})
	waiting := make(chan struct{})
	var once sync.Once
	s := startDataCite(t, DataCiteConfig{
		beforeCommit: func(string) { <-release },
		onWait:       func(string) { once.Do(func() { close(waiting) }) },
	})
	// One create holds the DOI, committing, until the other is seen
	// waiting for it; then it commits and the waiter loses the race.
	go func() {
		<-waiting
		close(release)
	}()
	body := doiDoc(`{"doi":"10.5072/race"}`)
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			a, err := send(s.Client(), "POST", s.URL+"/dois", body, "Content-Type", jsonAPI)
			if err != nil {
				a.status = -1
			}
			answers <- a
		}()
	}
	a1, a2 := <-answers, <-answers
	if a1.status != http.StatusCreated { // either may arrive first
		a1, a2 = a2, a1
	}
	require.Equal(t, http.StatusCreated, a1.status)
	require.Equal(t, http.StatusConflict, a2.status)
	require.Equal(t, `{"errors":[{"status":"409","title":"The resource already exists."}]}`, string(a2.body))
	st := s.Stats()
	require.Equal(t, int64(1), st.Minted)
	require.Equal(t, int64(1), st.Conflicts)
}

func TestDataCitePutIsAnUpsertAndEventsMoveTheState(t *testing.T) {
	s := startDataCite(t, DataCiteConfig{})
	put := func(attrs string) answer {
		return mustSend(t, s.Client(), "PUT", s.URL+"/dois/10.5072/up", doiDoc(attrs), "Content-Type", jsonAPI)
	}
	require.Equal(t, http.StatusCreated, put(`{"titles":[{"title":"Reef"}]}`).status, "creates")
	require.Equal(t, "draft", state(t, s, "10.5072/up"))
	a := put(`{"event":"publish"}`)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "publishing needs the metadata")
	require.Contains(t, string(a.body), `{"source":"url","title":"Can't be blank","uid":"10.5072/up"}`)
	require.Equal(t, http.StatusOK, put(`{`+complete+`}`).status, "updates")

	for _, step := range []struct{ event, want string }{
		{"register", "registered"},
		{"register", "registered"}, // not from registered: no change
		{"publish", "findable"},
		{"publish", "findable"}, // publishing a findable DOI changes nothing
		{"hide", "registered"},
		{"publish", "findable"},
	} {
		require.Equal(t, http.StatusOK, put(`{"event":"`+step.event+`"}`).status)
		require.Equal(t, step.want, state(t, s, "10.5072/up"), "after %s", step.event)
	}
	st := s.Stats()
	require.Equal(t, int64(1), st.Minted)
	require.Equal(t, int64(6), st.EventRequests)
	require.Equal(t, int64(4), st.Events)
}

func TestDataCiteAnswersRefusals(t *testing.T) {
	s := startDataCite(t, DataCiteConfig{Username: "REPO.ID", Password: "secret"})
	good := []string{"Content-Type", jsonAPI, "Authorization", "Basic UkVQTy5JRDpzZWNyZXQ="}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   string
		hdr    []string
		status int
	}{
		{"no credentials on a create is 401", "POST", "/dois", doiDoc(`{"doi":"10.5072/a"}`), []string{"Content-Type", jsonAPI}, 401},
		{"wrong credentials are 401", "GET", "/dois/10.5072/a", "", []string{"Authorization", "Basic d3Jvbmc6d3Jvbmc="}, 401},
		{"another prefix is 403", "POST", "/dois", doiDoc(`{"doi":"10.9999/a"}`), good, 403},
		{"neither doi nor prefix is 422", "POST", "/dois", doiDoc(`{"titles":[]}`), good, 422},
		{"a body that is not JSON:API is 400", "POST", "/dois", `{"doi":"10.5072/a"}`, good, 400},
		{"a text body is 415", "POST", "/dois", doiDoc(`{}`), []string{"Content-Type", "text/plain", "Authorization", "Basic UkVQTy5JRDpzZWNyZXQ="}, 415},
		{"an unknown DOI is 404", "GET", "/dois/10.5072/none", "", good, 404},
		{"another path is 404", "GET", "/clients", "", good, 404},
		{"DELETE is 405", "DELETE", "/dois/10.5072/a", "", good, 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := mustSend(t, s.Client(), tc.method, s.URL+tc.path, tc.body, tc.hdr...)
			require.Equal(t, tc.status, a.status, "body %s", a.body)
			var doc struct {
				Errors []dcErr `json:"errors"`
			}
			require.NoError(t, json.Unmarshal(a.body, &doc))
			require.NotEmpty(t, doc.Errors)
		})
	}
	require.Equal(t, int64(0), s.Stats().Minted)

	t.Run("drafts are private, findable DOIs public", func(t *testing.T) {
		a := mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/pub",`+complete+`}`), good...)
		require.Equal(t, http.StatusCreated, a.status)
		require.Equal(t, http.StatusNotFound, mustSend(t, s.Client(), "GET", s.URL+"/dois/10.5072/pub", "").status)
		a = mustSend(t, s.Client(), "PUT", s.URL+"/dois/10.5072/pub", doiDoc(`{"event":"publish"}`), good...)
		require.Equal(t, http.StatusOK, a.status)
		require.Equal(t, "findable", state(t, s, "10.5072/pub"))
	})
}

func TestDataCiteFaults(t *testing.T) {
	t.Run("429 answers before anything is minted", func(t *testing.T) {
		s := startDataCite(t, DataCiteConfig{Faults: "nth=1:429"})
		a := mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/f"}`), "Content-Type", jsonAPI)
		require.Equal(t, http.StatusTooManyRequests, a.status)
		require.Empty(t, s.DOIs())
		a = mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/f"}`), "Content-Type", jsonAPI)
		require.Equal(t, http.StatusCreated, a.status)
	})
	t.Run("a drop commits, then hangs up", func(t *testing.T) {
		s := startDataCite(t, DataCiteConfig{Faults: "nth=1:drop"})
		_, err := send(s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/f"}`), "Content-Type", jsonAPI)
		require.Error(t, err)
		require.Equal(t, "draft", state(t, s, "10.5072/f"))
		a := mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"doi":"10.5072/f"}`), "Content-Type", jsonAPI)
		require.Equal(t, http.StatusUnprocessableEntity, a.status)
		st := s.Stats()
		require.Equal(t, int64(1), st.Minted)
		require.Equal(t, int64(1), st.FaultsByKind["drop"])
	})
	t.Run("a prefix-only retry after a drop mints a second DOI", func(t *testing.T) {
		// The hazard the deposit client avoids by always naming the DOI.
		s := startDataCite(t, DataCiteConfig{Faults: "nth=1:drop"})
		_, err := send(s.Client(), "POST", s.URL+"/dois", doiDoc(`{"prefix":"10.5072"}`), "Content-Type", jsonAPI)
		require.Error(t, err)
		a := mustSend(t, s.Client(), "POST", s.URL+"/dois", doiDoc(`{"prefix":"10.5072"}`), "Content-Type", jsonAPI)
		require.Equal(t, http.StatusCreated, a.status)
		require.Equal(t, int64(2), s.Stats().Minted)
	})
	t.Run("a bad fault spec is refused", func(t *testing.T) {
		_, err := NewDataCite(DataCiteConfig{Faults: "drop=2"})
		require.ErrorIs(t, err, ErrConfig)
		require.True(t, strings.Contains(err.Error(), "drop=2"))
	})
}

// A metadata update keeps a findable DOI findable, replaces its
// alternateIdentifiers as a whole, and counts as a version; an event
// alone is no new version.
func TestDataCiteMetadataUpdatesKeepTheStateAndCountVersions(t *testing.T) {
	s := startDataCite(t, DataCiteConfig{})
	put := func(attrs string) answer {
		return mustSend(t, s.Client(), "PUT", s.URL+"/dois/10.5072/v", doiDoc(attrs), "Content-Type", jsonAPI)
	}
	require.Equal(t, http.StatusCreated, put(`{`+complete+`,"alternateIdentifiers":[{"alternateIdentifier":"a","alternateIdentifierType":"deposit-version"}]}`).status)
	require.Equal(t, http.StatusOK, put(`{"event":"publish"}`).status)
	a := put(`{"titles":[{"title":"Reef, corrected"}],"alternateIdentifiers":[{"alternateIdentifier":"b","alternateIdentifierType":"deposit-version"}]}`)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "findable", state(t, s, "10.5072/v"), "an update without an event keeps the state")
	read := mustSend(t, s.Client(), "GET", s.URL+"/dois/10.5072/v", "")
	var doc struct {
		Data struct {
			Attributes struct {
				Titles               []map[string]string `json:"titles"`
				AlternateIdentifiers []map[string]string `json:"alternateIdentifiers"`
			} `json:"attributes"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(read.body, &doc))
	require.Equal(t, []map[string]string{{"alternateIdentifier": "b", "alternateIdentifierType": "deposit-version"}}, doc.Data.Attributes.AlternateIdentifiers)
	require.Equal(t, "Reef, corrected", doc.Data.Attributes.Titles[0]["title"])
	st := s.Stats()
	require.Equal(t, int64(2), st.Updates, "the event's PUT and the metadata's")
	require.Equal(t, int64(1), st.MetadataUpdates)
	require.Equal(t, 2, s.DOIs()[0].Versions)
}
