package repotest

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ivSession talks to an InvenioRDM stub with the token.
type ivSession struct {
	t testing.TB
	s *InvenioServer
	c *http.Client
	// faulty: the server injects faults, so an answer dropped after its
	// write committed is no failure, and a 503 refused before anything
	// committed is sent again.
	faulty bool
}

func newIVSession(t testing.TB, cfg InvenioConfig) *ivSession {
	s := startInvenio(t, cfg)
	return &ivSession{t: t, s: s, c: s.Client(), faulty: cfg.Faults != ""}
}

// do sends one request; nil when its answer was dropped on a faulty server.
func (v *ivSession) do(method, path, body string) *answer {
	v.t.Helper()
	hdr := []string{"Authorization", ivToken}
	switch {
	case strings.HasSuffix(path, "/content"):
		hdr = append(hdr, "Content-Type", "application/octet-stream")
	case body != "":
		hdr = append(hdr, "Content-Type", "application/json")
	}
	a, err := send(v.c, method, v.s.API+path, body, hdr...)
	if err != nil {
		require.True(v.t, v.faulty, "%s %s: %v", method, path, err)
		return nil
	}
	return &a
}

// want sends a request and requires the status; it answers the body as a
// JSON object, nil when there is none or it was dropped.
func (v *ivSession) want(status int, method, path, body string) map[string]any {
	v.t.Helper()
	a := v.do(method, path, body)
	for a != nil && v.faulty && a.status == http.StatusServiceUnavailable {
		a = v.do(method, path, body)
	}
	if a == nil {
		return nil
	}
	require.Equal(v.t, status, a.status, "%s %s: %s", method, path, a.body)
	if len(a.body) == 0 {
		return nil
	}
	return ivJSON(v.t, *a)
}

// draft creates a draft of body and commits the files to it: its id.
func (v *ivSession) draft(body string, files map[string]string) string {
	v.t.Helper()
	before := len(v.s.Records())
	d := v.want(http.StatusCreated, http.MethodPost, "/records", body)
	id := ""
	if d != nil {
		id = d["id"].(string)
	} else {
		recs := v.s.Records()
		require.Len(v.t, recs, before+1, "a dropped create committed one draft")
		id = recs[before].ID
	}
	for key, content := range files {
		v.want(http.StatusCreated, http.MethodPost, "/records/"+id+"/draft/files", `[{"key":"`+key+`"}]`)
		v.want(http.StatusOK, http.MethodPut, "/records/"+id+"/draft/files/"+key+"/content", content)
		v.want(http.StatusOK, http.MethodPost, "/records/"+id+"/draft/files/"+key+"/commit", "")
	}
	return id
}

// published creates, fills and publishes a record: its id.
func (v *ivSession) published(body string, files map[string]string) string {
	v.t.Helper()
	id := v.draft(body, files)
	v.want(http.StatusAccepted, http.MethodPost, "/records/"+id+"/draft/actions/publish", "")
	return id
}

// record is the stub's view of record id.
func (v *ivSession) record(id string) InvenioRecord {
	v.t.Helper()
	for _, r := range v.s.Records() {
		if r.ID == id {
			return r
		}
	}
	require.Failf(v.t, "no record", "record %s", id)
	return InvenioRecord{}
}

// ivVersioned is a record whose alternate identifiers carry a marker.
const ivVersioned = `{"access":{"record":"public","files":"public"},"files":{"enabled":true},
"metadata":{"title":"v","creators":[{"person_or_org":{"type":"personal","family_name":"B"}}],
"publication_date":"2020-06-01","resource_type":{"id":"dataset"},"version":"1.0",
"identifiers":[{"scheme":"urn","identifier":"urn:marker:k1"}]}}`

const ivMarkerQuery = `q=metadata.identifiers.identifier:%22urn:marker:k1%22`

func TestInvenioNewVersionCopiesTheLatestAndReturnsTheOpenDraft(t *testing.T) {
	v := newIVSession(t, InvenioConfig{})
	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})
	parent := v.record(v1).Parent
	require.NotEmpty(t, parent)

	d := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")
	v2 := d["id"].(string)
	require.NotEqual(t, v1, v2)
	require.Equal(t, parent, d["parent"].(map[string]any)["id"])
	require.Equal(t, map[string]any{"index": float64(2), "is_latest": false, "is_latest_draft": true}, d["versions"])
	require.Equal(t, false, d["is_published"])
	require.Equal(t, map[string]any{}, d["pids"])
	require.Equal(t, map[string]any{"enabled": true}, d["files"])
	md := d["metadata"].(map[string]any)
	require.Equal(t, []any{map[string]any{"scheme": "urn", "identifier": "urn:marker:k1"}}, md["identifiers"], "the marker is copied")
	require.NotContains(t, md, "version")
	require.Equal(t, time.Now().UTC().Format("2006-01-02"), md["publication_date"])
	files := v.want(http.StatusOK, http.MethodGet, "/records/"+v2+"/draft/files", "")
	require.Empty(t, files["entries"], "a new version starts with no files")

	again := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")
	require.Equal(t, v2, again["id"], "the open draft is returned")
	refused := v.want(http.StatusNotFound, http.MethodPost, "/records/"+v2+"/versions", "")
	require.Equal(t, "The persistent identifier is not registered.", refused["message"])

	v.want(http.StatusCreated, http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")
	v.want(http.StatusAccepted, http.MethodPost, "/records/"+v2+"/draft/actions/publish", "")
	v3 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")
	require.NotEqual(t, v2, v3["id"], "after a publish the call opens another version")
	require.Equal(t, float64(3), v3["versions"].(map[string]any)["index"])

	v.want(http.StatusNoContent, http.MethodDelete, "/records/"+v3["id"].(string)+"/draft", "")
	v4 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v2+"/versions", "")
	require.NotEqual(t, v3["id"], v4["id"], "after a discard the call opens another")
	require.Equal(t, float64(3), v4["versions"].(map[string]any)["index"])
	require.Equal(t, int64(3), v.s.Stats().Versions)
	require.Equal(t, 2, v.record(v2).Version)
	require.Equal(t, parent, v.record(v2).Parent)
}

func TestInvenioFilesImportRefusesADraftWithFiles(t *testing.T) {
	v := newIVSession(t, InvenioConfig{})
	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})
	first := v.draft(ivMinimal, nil)
	missing := v.want(http.StatusNotFound, http.MethodPost, "/records/"+first+"/draft/actions/files-import", "")
	require.Equal(t, "Not found.", missing["message"], "a first version has no version to import from")

	v2 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")["id"].(string)
	v.want(http.StatusBadRequest, http.MethodPost, "/records/"+v2+"/draft/actions/publish", "")

	imported := v.want(http.StatusCreated, http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")
	entries := imported["entries"].([]any)
	require.Len(t, entries, 1)
	require.Equal(t, "a.txt", entries[0].(map[string]any)["key"])
	require.Equal(t, "md5:5d41402abc4b2a76b9719d911017c592", entries[0].(map[string]any)["checksum"])

	again := v.want(http.StatusBadRequest, http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")
	require.Equal(t, "A validation error occurred.", again["message"])
	require.Equal(t, []any{map[string]any{"field": "files.enabled", "messages": []any{"Please remove all files first."}}}, again["errors"])

	v.want(http.StatusAccepted, http.MethodPost, "/records/"+v2+"/draft/actions/publish", "")
	require.Equal(t, []InvenioFile{{Key: "a.txt", Status: "completed", Checksum: "md5:5d41402abc4b2a76b9719d911017c592", Size: 5}}, v.record(v2).Files)
	require.Equal(t, int64(1), v.s.Stats().FileImports)
}

func TestInvenioLatestVersionIsResolvedWithoutSearch(t *testing.T) {
	v := newIVSession(t, InvenioConfig{IndexLag: time.Hour})
	noRedirect := *v.c
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})
	latest := func(id string) answer {
		t.Helper()
		return mustSend(t, &noRedirect, http.MethodGet, v.s.API+"/records/"+id+"/versions/latest", "")
	}
	a := latest(v1)
	require.Equal(t, http.StatusMovedPermanently, a.status, string(a.body))
	require.Equal(t, v.s.API+"/records/"+v1, a.header.Get("Location"))

	v2 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")["id"].(string)
	require.Equal(t, v.s.API+"/records/"+v1, latest(v1).header.Get("Location"), "a draft is not a version yet")
	v.want(http.StatusCreated, http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")
	v.want(http.StatusAccepted, http.MethodPost, "/records/"+v2+"/draft/actions/publish", "")

	a = latest(v1)
	require.Equal(t, http.StatusMovedPermanently, a.status)
	require.Equal(t, v.s.API+"/records/"+v2, a.header.Get("Location"), "no index lag")
	require.Equal(t, "Redirecting...", ivJSON(t, a)["message"])
	require.Equal(t, v.s.API+"/records/"+v2, latest(v.record(v1).Parent).header.Get("Location"), "the parent's id resolves too")
	followed := mustSend(t, v.c, http.MethodGet, v.s.API+"/records/"+v1+"/versions/latest", "")
	require.Equal(t, http.StatusOK, followed.status)
	require.Equal(t, v2, ivJSON(t, followed)["id"])

	listed := v.want(http.StatusOK, http.MethodGet, "/records/"+v1+"/versions", "")
	require.Equal(t, float64(0), listed["hits"].(map[string]any)["total"], "the list of versions goes through search, which lags")

	draft := v.draft(ivMinimal, nil)
	a = latest(draft)
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, "The persistent identifier is not registered.", ivJSON(t, a)["message"])
	a = latest("nope0-00000")
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, "The persistent identifier does not exist.", ivJSON(t, a)["message"])
}

func TestInvenioSearchesReturnLatestVersionsUnlessAllVersions(t *testing.T) {
	v := newIVSession(t, InvenioConfig{})
	v1 := v.published(ivVersioned, map[string]string{"a.txt": "hello"})
	v2 := v.want(http.StatusCreated, http.MethodPost, "/records/"+v1+"/versions", "")["id"].(string)
	ids := func(path string) []string {
		t.Helper()
		body := v.want(http.StatusOK, http.MethodGet, path, "")
		var out []string
		for _, h := range body["hits"].(map[string]any)["hits"].([]any) {
			out = append(out, h.(map[string]any)["id"].(string))
		}
		require.Equal(t, float64(len(out)), body["hits"].(map[string]any)["total"])
		return out
	}

	require.Equal(t, []string{v1}, ids("/records?"+ivMarkerQuery), "only published records")
	require.Equal(t, []string{v2}, ids("/user/records?"+ivMarkerQuery), "the latest draft")
	require.Equal(t, []string{v2, v1}, ids("/user/records?allversions=true&"+ivMarkerQuery))

	v.want(http.StatusCreated, http.MethodPost, "/records/"+v2+"/draft/actions/files-import", "")
	v.want(http.StatusAccepted, http.MethodPost, "/records/"+v2+"/draft/actions/publish", "")
	require.Equal(t, []string{v2}, ids("/records?"+ivMarkerQuery))
	require.Equal(t, []string{v2, v1}, ids("/records?allversions=true&"+ivMarkerQuery))
	require.Equal(t, []string{v2}, ids("/user/records?"+ivMarkerQuery))
	require.Equal(t, []string{v2, v1}, ids("/records/"+v1+"/versions"), "highest version first")

	anonymous := mustSend(t, v.c, http.MethodGet, v.s.API+"/records?allversions=true", "")
	require.Equal(t, http.StatusOK, anonymous.status, "anyone may search published records")
	require.Equal(t, float64(2), ivJSON(t, anonymous)["hits"].(map[string]any)["total"])
	bad := v.want(http.StatusBadRequest, http.MethodGet, "/records?allversions="+url.QueryEscape("perhaps"), "")
	require.Equal(t, "allversions", bad["errors"].([]any)[0].(map[string]any)["field"])
}
