package repotest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const ivToken = "Bearer t0ken"

func startInvenio(t testing.TB, cfg InvenioConfig) *InvenioServer {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = "t0ken"
	}
	s, err := NewInvenioServer(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

const ivMinimal = `{"access":{"record":"public","files":"public"},"files":{"enabled":true},
"metadata":{"title":"t","creators":[{"person_or_org":{"type":"personal","family_name":"B"}}],
"publication_date":"2020-06-01","resource_type":{"id":"dataset"},
"identifiers":[{"scheme":"urn","identifier":"urn:example:one"}]}}`

func ivJSON(t testing.TB, a answer) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m), string(a.body))
	return m
}

func TestInvenioDepositFlowFollowsTheDocs(t *testing.T) {
	s := startInvenio(t, InvenioConfig{})
	c := s.Client()
	auth := []string{"Authorization", ivToken, "Content-Type", "application/json"}

	a := mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, auth...)
	require.Equal(t, http.StatusCreated, a.status, string(a.body))
	id := ivJSON(t, a)["id"].(string)

	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+id+"/draft/files", `[{"key":"dir/a.txt"}]`, auth...)
	require.Equal(t, http.StatusCreated, a.status, string(a.body))
	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+id+"/draft/files", `[{"key":"dir/a.txt"}]`, auth...)
	require.Equal(t, http.StatusBadRequest, a.status)
	require.Equal(t, "File with key dir/a.txt already exists.", ivJSON(t, a)["message"])

	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+id+"/draft/files/dir/a.txt/commit", "", "Authorization", ivToken)
	require.Equal(t, http.StatusInternalServerError, a.status, "a commit before any content")

	a = mustSend(t, c, http.MethodPut, s.API+"/records/"+id+"/draft/files/dir/a.txt/content", "hello", "Authorization", ivToken, "Content-Type", "application/octet-stream")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	require.Equal(t, "pending", ivJSON(t, a)["status"])
	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+id+"/draft/files/dir/a.txt/commit", "", "Authorization", ivToken)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "md5:5d41402abc4b2a76b9719d911017c592", ivJSON(t, a)["checksum"])
	a = mustSend(t, c, http.MethodPut, s.API+"/records/"+id+"/draft/files/dir/a.txt/content", "other", "Authorization", ivToken)
	require.Equal(t, http.StatusBadRequest, a.status, "content to a committed file")

	a = mustSend(t, c, http.MethodGet, s.API+"/records/"+id, "", "Authorization", ivToken)
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, "The persistent identifier is not registered.", ivJSON(t, a)["message"])

	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+id+"/draft/actions/publish", "", "Authorization", ivToken)
	require.Equal(t, http.StatusAccepted, a.status, string(a.body))
	rec := ivJSON(t, a)
	require.Equal(t, true, rec["is_published"])
	require.Equal(t, "10.5072/"+id, rec["pids"].(map[string]any)["doi"].(map[string]any)["identifier"])

	a = mustSend(t, c, http.MethodGet, s.API+"/records/"+id+"/draft", "", "Authorization", ivToken)
	require.Equal(t, http.StatusNotFound, a.status, "no draft after publishing")
	a = mustSend(t, c, http.MethodGet, s.API+"/records/"+id, "")
	require.Equal(t, http.StatusOK, a.status, "a published record is public")

	recs := s.Records()
	require.Len(t, recs, 1)
	require.Equal(t, []InvenioFile{{Key: "dir/a.txt", Status: "completed", Checksum: "md5:5d41402abc4b2a76b9719d911017c592", Size: 5}}, recs[0].Files)
}

func TestInvenioPublishRefusesWhatCreateAccepted(t *testing.T) {
	s := startInvenio(t, InvenioConfig{})
	c := s.Client()
	a := mustSend(t, c, http.MethodPost, s.API+"/records", `{"metadata":{"title":"only"},"files":{"enabled":true}}`,
		"Authorization", ivToken, "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, a.status)
	draft := ivJSON(t, a)
	require.NotEmpty(t, draft["errors"], "a partial draft is created with its errors")

	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+draft["id"].(string)+"/draft/actions/publish", "", "Authorization", ivToken)
	require.Equal(t, http.StatusBadRequest, a.status)
	body := ivJSON(t, a)
	require.Equal(t, "A validation error occurred.", body["message"])
	fields := map[string]bool{}
	for _, e := range body["errors"].([]any) {
		fields[e.(map[string]any)["field"].(string)] = true
	}
	require.True(t, fields["metadata.creators"])
	require.True(t, fields["files.enabled"])
}

func TestInvenioRefusesAnonymousWritesAndOtherContentTypes(t *testing.T) {
	s := startInvenio(t, InvenioConfig{})
	c := s.Client()
	a := mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, "Content-Type", "application/json")
	require.Equal(t, http.StatusForbidden, a.status)
	a = mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, "Authorization", "Bearer wrong", "Content-Type", "application/json")
	require.Equal(t, http.StatusForbidden, a.status)
	a = mustSend(t, c, http.MethodGet, s.API+"/user/records", "")
	require.Equal(t, http.StatusForbidden, a.status)
	a = mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, "Authorization", ivToken, "Content-Type", "application/json; charset=utf-8")
	require.Equal(t, http.StatusUnsupportedMediaType, a.status)
	require.Zero(t, s.Stats().Drafts)
}

func TestInvenioSearchLagsWritesUntilADraftIsDeleted(t *testing.T) {
	s := startInvenio(t, InvenioConfig{IndexLag: time.Hour})
	c := s.Client()
	a := mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, "Authorization", ivToken, "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, a.status)
	a = mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, "Authorization", ivToken, "Content-Type", "application/json")
	second := ivJSON(t, a)["id"].(string)

	q := s.API + "/user/records?q=" + url.QueryEscape(`metadata.identifiers.identifier:"urn:example:one"`)
	a = mustSend(t, c, http.MethodGet, q, "", "Authorization", ivToken)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, float64(0), ivJSON(t, a)["hits"].(map[string]any)["total"], "not indexed yet: no server-side dedup either")

	a = mustSend(t, c, http.MethodDelete, s.API+"/records/"+second+"/draft", "", "Authorization", ivToken)
	require.Equal(t, http.StatusNoContent, a.status)
	a = mustSend(t, c, http.MethodGet, q, "", "Authorization", ivToken)
	hits := ivJSON(t, a)["hits"].(map[string]any)
	require.Equal(t, float64(1), hits["total"], "a delete refreshes the index")
	require.Zero(t, s.Stats().FallbackQueries)
}

func TestInvenioSearchFallsBackToAnyTokenForOtherQueries(t *testing.T) {
	s := startInvenio(t, InvenioConfig{})
	c := s.Client()
	mustSend(t, c, http.MethodPost, s.API+"/records", ivMinimal, "Authorization", ivToken, "Content-Type", "application/json")
	a := mustSend(t, c, http.MethodGet, s.API+"/user/records?q="+url.QueryEscape(`identifier=urn:nothing`), "", "Authorization", ivToken)
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, float64(1), ivJSON(t, a)["hits"].(map[string]any)["total"], `"urn" is a token of the record`)
	require.Equal(t, int64(1), s.Stats().FallbackQueries)

	a = mustSend(t, c, http.MethodGet, s.API+"/user/records?size=0", "", "Authorization", ivToken)
	require.Equal(t, http.StatusBadRequest, a.status)
}

func TestInvenioRateLimitAnswers429WithTheResetTime(t *testing.T) {
	s := startInvenio(t, InvenioConfig{Limit: 2, SearchLimit: 1, Window: time.Hour, RetryAfter: true})
	c := s.Client()
	for range 2 {
		a := mustSend(t, c, http.MethodGet, s.API+"/records/none", "")
		require.Equal(t, http.StatusNotFound, a.status)
	}
	a := mustSend(t, c, http.MethodGet, s.API+"/records/none", "")
	require.Equal(t, http.StatusTooManyRequests, a.status)
	reset, err := strconv.ParseInt(a.header.Get("X-RateLimit-Reset"), 10, 64)
	require.NoError(t, err)
	require.Greater(t, reset, time.Now().Unix())
	require.NotEmpty(t, a.header.Get("Retry-After"))

	a = mustSend(t, c, http.MethodGet, s.API+"/user/records", "", "Authorization", ivToken)
	require.Equal(t, http.StatusOK, a.status, "searches have a budget of their own")
	a = mustSend(t, c, http.MethodGet, s.API+"/user/records", "", "Authorization", ivToken)
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Equal(t, int64(2), s.Stats().RateLimited)
}

func TestInvenio504AfterPublishingHasPublished(t *testing.T) {
	s := startInvenio(t, InvenioConfig{Faults: "nth=1:504"})
	c := s.Client()
	a := mustSend(t, c, http.MethodPost, s.API+"/records", `{"metadata":{"title":"t","creators":[{}],"publication_date":"2020","resource_type":{"id":"x"}},"files":{"enabled":false}}`,
		"Authorization", ivToken, "Content-Type", "application/json")
	require.Equal(t, http.StatusGatewayTimeout, a.status, "the create's first attempt is refused before it commits")
	require.Zero(t, s.Stats().Drafts)
	a = mustSend(t, c, http.MethodPost, s.API+"/records", `{"metadata":{"title":"t","creators":[{}],"publication_date":"2020","resource_type":{"id":"x"}},"files":{"enabled":false}}`,
		"Authorization", ivToken, "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, a.status)
	id := ivJSON(t, a)["id"].(string)
	a = mustSend(t, c, http.MethodPost, s.API+"/records/"+id+"/draft/actions/publish", "", "Authorization", ivToken)
	require.Equal(t, http.StatusGatewayTimeout, a.status)
	require.Equal(t, int64(1), s.Stats().Published, "the gateway timed out, the publish went through")
}
