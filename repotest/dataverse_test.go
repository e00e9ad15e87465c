package repotest

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const dvToken = "dv-t0ken"

func startDataverse(t testing.TB, cfg DataverseConfig) *DataverseServer {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = dvToken
	}
	s, err := NewDataverseServer(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// dvDatasetJSON is a native dataset JSON with the required citation fields
// and one otherId marker. It names a PID of its own, which the server must
// ignore.
func dvDatasetJSON(marker string) string {
	return `{"datasetVersion":{"protocol":"doi","authority":"10.9999","identifier":"MINE",
"license":{"name":"CC0 1.0","uri":"http://creativecommons.org/publicdomain/zero/1.0"},
"metadataBlocks":{"citation":{"fields":[
{"typeName":"title","multiple":false,"typeClass":"primitive","value":"Rainfall in Utrecht"},
{"typeName":"author","multiple":true,"typeClass":"compound","value":[{"authorName":{"typeName":"authorName","multiple":false,"typeClass":"primitive","value":"B, A"}}]},
{"typeName":"datasetContact","multiple":true,"typeClass":"compound","value":[{"datasetContactEmail":{"typeName":"datasetContactEmail","multiple":false,"typeClass":"primitive","value":"a@example.org"}}]},
{"typeName":"dsDescription","multiple":true,"typeClass":"compound","value":[{"dsDescriptionValue":{"typeName":"dsDescriptionValue","multiple":false,"typeClass":"primitive","value":"d"}}]},
{"typeName":"subject","multiple":true,"typeClass":"controlledVocabulary","value":["Earth and Environmental Sciences"]},
{"typeName":"otherId","multiple":true,"typeClass":"compound","value":[{"otherIdAgency":{"typeName":"otherIdAgency","multiple":false,"typeClass":"primitive","value":"deposit"},"otherIdValue":{"typeName":"otherIdValue","multiple":false,"typeClass":"primitive","value":"` + marker + `"}}]}
]}}}}`
}

// dvBody decodes a Dataverse answer.
func dvBody(t testing.TB, a answer) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m), string(a.body))
	return m
}

// dvRefusal checks an error answer: its status and Dataverse's envelope.
func dvRefusal(t testing.TB, status int, message string, a answer) {
	t.Helper()
	require.Equal(t, status, a.status, string(a.body))
	require.Equal(t, map[string]any{"status": "ERROR", "message": message}, dvBody(t, a))
}

// dvCreate creates a dataset and returns its persistent identifier.
func dvCreate(t testing.TB, s *DataverseServer, marker string) string {
	t.Helper()
	a := mustSend(t, s.Client(), http.MethodPost, s.URL+"/api/dataverses/root/datasets", dvDatasetJSON(marker), "X-Dataverse-key", dvToken)
	require.Equal(t, http.StatusCreated, a.status, string(a.body))
	return dvBody(t, a)["data"].(map[string]any)["persistentId"].(string)
}

// dvAddBody is a multipart add of one file; jsonData is left out when "".
func dvAddBody(t testing.TB, name, content, jsonData string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if jsonData != "" {
		require.NoError(t, mw.WriteField("jsonData", jsonData))
	}
	if name != "" {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, name))
		part, err := mw.CreatePart(h)
		require.NoError(t, err)
		_, err = part.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, mw.Close())
	return buf.String(), mw.FormDataContentType()
}

// dvAdd adds a file to the dataset pid with the given key ("" for none).
func dvAdd(t testing.TB, s *DataverseServer, pid, key, name, content, jsonData string) answer {
	t.Helper()
	body, ct := dvAddBody(t, name, content, jsonData)
	hdr := []string{"Content-Type", ct}
	if key != "" {
		hdr = append(hdr, "X-Dataverse-key", key)
	}
	return mustSend(t, s.Client(), http.MethodPost, s.URL+"/api/datasets/:persistentId/add?persistentId="+url.QueryEscape(pid), body, hdr...)
}

// dvGet reads path (with its query) as the user and decodes the data.
func dvGet(t testing.TB, s *DataverseServer, pathQuery string) any {
	t.Helper()
	a := mustSend(t, s.Client(), http.MethodGet, s.URL+pathQuery, "", "X-Dataverse-key", dvToken)
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	return dvBody(t, a)["data"]
}

func dvPublish(t testing.TB, s *DataverseServer, pid string) answer {
	t.Helper()
	return mustSend(t, s.Client(), http.MethodPost, s.URL+"/api/datasets/:persistentId/actions/:publish?type=major&persistentId="+url.QueryEscape(pid), "", "X-Dataverse-key", dvToken)
}

func TestDataverseCreateMintsItsOwnDOIAndKeepsTheMarker(t *testing.T) {
	s := startDataverse(t, DataverseConfig{})
	a := mustSend(t, s.Client(), http.MethodPost, s.URL+"/api/dataverses/root/datasets", dvDatasetJSON("deposit:k1"), "X-Dataverse-key", dvToken)
	require.Equal(t, http.StatusCreated, a.status, string(a.body))
	body := dvBody(t, a)
	require.Equal(t, "OK", body["status"])
	data := body["data"].(map[string]any)
	require.Equal(t, float64(1), data["id"])
	pid := data["persistentId"].(string)
	require.Regexp(t, `^doi:10\.5072/FK2/[A-Z0-9]{6}$`, pid, "the server chooses the PID, not the client")
	require.Equal(t, "/datasets/1", a.header.Get("Location"))

	second := dvCreate(t, s, "deposit:k1")
	require.NotEqual(t, pid, second, "the same body again is a second dataset")
	ds := s.Datasets()
	require.Len(t, ds, 2)
	require.Equal(t, []string{"deposit:k1"}, ds[0].OtherIDs)
	require.Equal(t, "DRAFT", ds[0].VersionState)
	st := s.Stats()
	require.Equal(t, int64(2), st.Datasets)
	require.Equal(t, int64(2), st.Drafts)
	require.Equal(t, int64(1), st.DuplicateMarkers)

	v := dvGet(t, s, "/api/datasets/:persistentId/?persistentId="+url.QueryEscape(pid)).(map[string]any)
	require.Equal(t, "10.5072", v["authority"])
	require.Equal(t, "DRAFT", v["latestVersion"].(map[string]any)["versionState"])
}

func TestDataverseCreateRefusesInvalidMetadata(t *testing.T) {
	s := startDataverse(t, DataverseConfig{})
	c := s.Client()
	noSubject := strings.Replace(dvDatasetJSON("m"), `"value":["Earth and Environmental Sciences"]`, `"value":[]`, 1)
	a := mustSend(t, c, http.MethodPost, s.URL+"/api/dataverses/root/datasets", noSubject, "X-Dataverse-key", dvToken)
	require.Equal(t, http.StatusForbidden, a.status, "validation failures are 403, not 400")
	msg := dvBody(t, a)["message"].(string)
	require.True(t, strings.HasPrefix(msg, "Validation Failed: Subject is required. (Invalid value:"), msg)
	require.Contains(t, msg, ".java.util.stream.ReferencePipeline$3@", "the stray stream of Dataverse 5.11 and later")

	badSubject := strings.Replace(dvDatasetJSON("m"), "Earth and Environmental Sciences", "Geology", 1)
	a = mustSend(t, c, http.MethodPost, s.URL+"/api/dataverses/root/datasets", badSubject, "X-Dataverse-key", dvToken)
	dvRefusal(t, http.StatusBadRequest, "Error parsing Json: Value 'Geology' does not exist in type 'subject'", a)

	a = mustSend(t, c, http.MethodPost, s.URL+"/api/dataverses/nowhere/datasets", dvDatasetJSON("m"), "X-Dataverse-key", dvToken)
	dvRefusal(t, http.StatusNotFound, "Can't find dataverse with identifier='nowhere'", a)
	require.Zero(t, s.Stats().Datasets)
}

func TestDataverseTokensAreCheckedPerEndpoint(t *testing.T) {
	s := startDataverse(t, DataverseConfig{})
	c := s.Client()
	pid := dvCreate(t, s, "m")
	create := s.URL + "/api/dataverses/root/datasets"
	publish := s.URL + "/api/datasets/:persistentId/actions/:publish?type=major&persistentId=" + url.QueryEscape(pid)

	dvRefusal(t, http.StatusUnauthorized, "Bad API key", mustSend(t, c, http.MethodPost, create, dvDatasetJSON("m"), "X-Dataverse-key", "wrong"))
	dvRefusal(t, http.StatusUnauthorized, "Bad API key", dvAdd(t, s, pid, "wrong", "a.txt", "x", ""))
	dvRefusal(t, http.StatusUnauthorized, "Bad API key", mustSend(t, c, http.MethodPost, publish, "", "X-Dataverse-key", "wrong"))

	dvRefusal(t, http.StatusUnauthorized, "cause was null! User :guest is not permitted to perform requested action.",
		mustSend(t, c, http.MethodPost, create, dvDatasetJSON("m")))
	dvRefusal(t, http.StatusForbidden, "You do not have permission to edit this dataset.", dvAdd(t, s, pid, "", "a.txt", "x", ""))
	dvRefusal(t, http.StatusUnauthorized, "Only authenticated users can perform the requested operation", mustSend(t, c, http.MethodPost, publish, ""))

	a := mustSend(t, c, http.MethodPost, create+"?key="+dvToken, dvDatasetJSON("m"))
	require.Equal(t, http.StatusCreated, a.status, "the token may come as ?key=")
	st := s.Stats()
	require.Equal(t, int64(2), st.Datasets)
	require.Zero(t, st.Files)
	require.Zero(t, st.Publishes)
}

func TestDataverseAddKeepsEveryCopyAndRenamesTakenNames(t *testing.T) {
	s := startDataverse(t, DataverseConfig{})
	pid := dvCreate(t, s, "m")

	a := dvAdd(t, s, pid, dvToken, "a.txt", "hello", `{"description":"first"}`)
	require.Equal(t, http.StatusOK, a.status, "an add answers 200 (the guide says 201)")
	body := dvBody(t, a)
	require.NotContains(t, body, "message")
	entry := body["data"].(map[string]any)["files"].([]any)[0].(map[string]any)
	require.Equal(t, "a.txt", entry["label"])
	require.Equal(t, map[string]any{"type": "MD5", "value": "5d41402abc4b2a76b9719d911017c592"}, entry["dataFile"].(map[string]any)["checksum"])

	a = dvAdd(t, s, pid, dvToken, "a.txt", "hello", "")
	require.Equal(t, http.StatusOK, a.status, "the same content again is added, not refused")
	body = dvBody(t, a)
	require.Equal(t, "This file has the same content as a.txt that is in the dataset. ", body["message"])
	require.Equal(t, "a-1.txt", body["data"].(map[string]any)["files"].([]any)[0].(map[string]any)["label"])

	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "other", "").status)
	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "third", `{"directoryLabel":"sub"}`).status)

	files := dvGet(t, s, "/api/datasets/:persistentId/versions/:draft/files?persistentId="+url.QueryEscape(pid)).([]any)
	var labels []string
	for _, f := range files {
		m := f.(map[string]any)
		labels = append(labels, fmt.Sprint(m["directoryLabel"], "/", m["label"]))
	}
	require.Equal(t, []string{"<nil>/a.txt", "<nil>/a-1.txt", "<nil>/a-2.txt", "sub/a.txt"}, labels)
	require.Equal(t, "5d41402abc4b2a76b9719d911017c592", files[1].(map[string]any)["dataFile"].(map[string]any)["md5"])
	st := s.Stats()
	require.Equal(t, int64(4), st.Files)
	require.Equal(t, int64(1), st.DuplicateFiles)
	require.Equal(t, int64(2), st.RenamedFiles)

	dvRefusal(t, http.StatusBadRequest, "You must upload a file or provide a valid storageidentifier, filename, and mimetype.",
		dvAdd(t, s, pid, dvToken, "", "", `{"description":"no file"}`))
	dvRefusal(t, http.StatusBadRequest, "Error in parsing provided json", dvAdd(t, s, pid, dvToken, "b.txt", "x", `{not json`))
	dvRefusal(t, http.StatusNotFound, "When accessing a dataset based on Persistent ID, a persistentId query parameter must be present.",
		dvAdd(t, s, "doi:10.5072/FK2/NOSUCH", dvToken, "b.txt", "x", ""))
}

func TestDataverseTabularIngestRenamesCSVUnderAnIngestLock(t *testing.T) {
	clk := newClock()
	s := startDataverse(t, DataverseConfig{IngestLag: time.Minute, now: clk.now})
	pid := dvCreate(t, s, "m")
	q := "?persistentId=" + url.QueryEscape(pid)

	a := dvAdd(t, s, pid, dvToken, "x.csv", "a,b\n1,2\n", "")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, "x.csv", dvBody(t, a)["data"].(map[string]any)["files"].([]any)[0].(map[string]any)["label"], "ingest runs after the answer")
	locks := dvGet(t, s, "/api/datasets/:persistentId/locks"+q).([]any)
	require.Len(t, locks, 1)
	require.Equal(t, "Ingest", locks[0].(map[string]any)["lockType"])

	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "y.csv", "c\n3\n", `{"tabIngest":false}`).status, "an Ingest lock does not block adds")
	dvRefusal(t, http.StatusForbidden, "This dataset is locked. Reason: Ingest. Please try publishing later.", dvPublish(t, s, pid))

	clk.advance(time.Minute)
	require.Empty(t, dvGet(t, s, "/api/datasets/:persistentId/locks"+q))
	files := dvGet(t, s, "/api/datasets/:persistentId/versions/:draft/files"+q).([]any)
	x, y := files[0].(map[string]any), files[1].(map[string]any)
	require.Equal(t, "x.tab", x["label"])
	require.Equal(t, "y.csv", y["label"], "tabIngest false keeps the name")
	df := x["dataFile"].(map[string]any)
	require.Equal(t, "text/csv", df["originalFileFormat"])
	require.Equal(t, md5Hex("a,b\n1,2\n"), df["checksum"].(map[string]any)["value"], "the checksum stays the original's")
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestDataversePublishFinishesUnderAFinalizeLock(t *testing.T) {
	clk := newClock()
	s := startDataverse(t, DataverseConfig{PublishLag: time.Minute, now: clk.now})
	pid := dvCreate(t, s, "m")
	q := "?persistentId=" + url.QueryEscape(pid)
	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "hello", "").status)

	a := mustSend(t, s.Client(), http.MethodPost, s.URL+"/api/datasets/:persistentId/actions/:publish"+q, "", "X-Dataverse-key", dvToken)
	dvRefusal(t, http.StatusBadRequest, "Missing 'type' parameter (either 'major','minor', or 'updatecurrent').", a)

	a = dvPublish(t, s, pid)
	require.Equal(t, http.StatusOK, a.status, "accepted, finished in the background")
	require.Equal(t, []any{"finalizePublication"}, dvBody(t, a)["data"].(map[string]any)["locks"])
	locks := dvGet(t, s, "/api/datasets/:persistentId/locks"+q).([]any)
	require.Len(t, locks, 1)
	require.Equal(t, "finalizePublication", locks[0].(map[string]any)["lockType"])
	v := dvGet(t, s, "/api/datasets/:persistentId/"+q).(map[string]any)["latestVersion"].(map[string]any)
	require.Equal(t, "DRAFT", v["versionState"], "still a draft while finalizing")
	require.Equal(t, float64(1), v["versionNumber"], "but already numbered")

	dvRefusal(t, http.StatusForbidden, "This dataset is locked. Reason: finalizePublication. Please try publishing later.", dvPublish(t, s, pid))
	dvRefusal(t, http.StatusBadRequest, "Failed to add file to dataset.", dvAdd(t, s, pid, dvToken, "b.txt", "b", ""))

	clk.advance(time.Minute)
	require.Empty(t, dvGet(t, s, "/api/datasets/:persistentId/locks"+q))
	a = mustSend(t, s.Client(), http.MethodGet, s.URL+"/api/datasets/:persistentId/versions/:draft/files"+q, "", "X-Dataverse-key", dvToken)
	dvRefusal(t, http.StatusNotFound, "Dataset version :draft of dataset 1 not found", a)
	require.Len(t, dvGet(t, s, "/api/datasets/:persistentId/versions/:latest/files"+q), 1)
	v = dvGet(t, s, "/api/datasets/:persistentId/"+q).(map[string]any)["latestVersion"].(map[string]any)
	require.Equal(t, "RELEASED", v["versionState"])
	identifier := strings.TrimPrefix(pid, "doi:10.5072/")
	dvRefusal(t, http.StatusForbidden, "Latest version of dataset "+identifier+" is already released. Only draft versions can be released.", dvPublish(t, s, pid))

	st := s.Stats()
	require.Equal(t, int64(1), st.Publishes)
	require.Equal(t, int64(1), st.Released)
	require.Equal(t, int64(2), st.PublishRefused)
	require.Zero(t, st.Drafts)
	require.Equal(t, int64(1), st.Files, "the add refused under the lock added nothing")
}

func TestDataverseSearchLagsWhileContentsReadsTheDatabase(t *testing.T) {
	clk := newClock()
	s := startDataverse(t, DataverseConfig{IndexLag: time.Second, now: clk.now})
	pid := dvCreate(t, s, "deposit:abc-123")
	search := "/api/search?type=dataset&subtree=root&metadata_fields=citation:otherId&show_entity_ids=true&q=" +
		url.QueryEscape(`otherIdValue:"deposit:abc-123"`)

	data := dvGet(t, s, search).(map[string]any)
	require.Equal(t, float64(0), data["total_count"], "not indexed yet: a miss proves nothing")
	contents := dvGet(t, s, "/api/dataverses/root/contents").([]any)
	require.Len(t, contents, 1, "the contents listing reads the database at once")
	require.Equal(t, strings.TrimPrefix(pid, "doi:10.5072/"), contents[0].(map[string]any)["identifier"])
	require.NotContains(t, contents[0], "latestVersion", "and carries no metadata")

	clk.advance(time.Second)
	dvCreate(t, s, "deposit:abc-123-x")
	clk.advance(time.Second)
	data = dvGet(t, s, search).(map[string]any)
	require.Equal(t, float64(2), data["total_count"], "a phrase query also matches a longer value")
	items := data["items"].([]any)
	first := items[0].(map[string]any)
	require.Equal(t, pid, first["global_id"])
	require.Equal(t, float64(1), first["entity_id"])
	require.Equal(t, "DRAFT", first["versionState"])
	otherID := first["metadataBlocks"].(map[string]any)["citation"].(map[string]any)["fields"].([]any)[0].(map[string]any)
	require.Equal(t, "otherId", otherID["typeName"])

	guest := mustSend(t, s.Client(), http.MethodGet, s.URL+search, "")
	require.Equal(t, float64(0), dvBody(t, guest)["data"].(map[string]any)["total_count"], "a guest sees no drafts")

	require.Equal(t, http.StatusOK, dvPublish(t, s, pid).status)
	data = dvGet(t, s, search).(map[string]any)
	require.Equal(t, "RELEASED", data["items"].([]any)[0].(map[string]any)["versionState"], "the state comes from the row, not the index")
	guest = mustSend(t, s.Client(), http.MethodGet, s.URL+search, "")
	require.Equal(t, float64(0), dvBody(t, guest)["data"].(map[string]any)["total_count"], "the index still holds the draft")
	clk.advance(time.Second)
	guest = mustSend(t, s.Client(), http.MethodGet, s.URL+search, "")
	require.Equal(t, float64(1), dvBody(t, guest)["data"].(map[string]any)["total_count"])
	require.Equal(t, int64(6), s.Stats().Searches)
}

// The contents listing has Dataverse's own shape (api/Dataverses.java,
// listContent; util/json/JsonPrinter.java, json(Dataset)): child
// collections first, then each dataset by id with its identifier parts,
// datasetType, locks and, once released, publicationDate; the guest sees
// released datasets only. A version is read alone, with datasetId and
// datasetPersistentId, its files left out on excludeFiles=true.
func TestDataverseContentsListsChildrenThenDatasetsAsDataverseDoes(t *testing.T) {
	clk := newClock()
	s := startDataverse(t, DataverseConfig{Subcollections: []string{"Field notes"}, PublishLag: time.Second, now: clk.now})
	first := dvCreate(t, s, "deposit:one")
	second := dvCreate(t, s, "deposit:two")
	require.Equal(t, http.StatusOK, dvAdd(t, s, first, dvToken, "a.txt", "alpha", "").status)
	require.Equal(t, http.StatusOK, dvPublish(t, s, first).status)

	contents := dvGet(t, s, "/api/dataverses/root/contents").([]any)
	require.Len(t, contents, 3)
	require.Equal(t, map[string]any{"type": "dataverse", "id": float64(1), "title": "Field notes"}, contents[0])
	ds := contents[1].(map[string]any)
	require.Equal(t, "dataset", ds["type"])
	require.Equal(t, float64(2), ds["id"], "collections and datasets share one id space")
	require.Equal(t, strings.TrimPrefix(first, "doi:10.5072/"), ds["identifier"])
	for _, k := range []string{"persistentUrl", "protocol", "authority", "separator", "publisher", "storageIdentifier", "datasetType"} {
		require.Contains(t, ds, k)
	}
	require.Equal(t, []any{"finalizePublication"}, ds["locks"])
	require.NotContains(t, ds, "publicationDate", "not released yet")
	clk.advance(time.Second)
	ds = dvGet(t, s, "/api/dataverses/root/contents").([]any)[1].(map[string]any)
	require.Equal(t, []any{}, ds["locks"])
	require.Equal(t, clk.now().UTC().Format(time.DateOnly), ds["publicationDate"])
	guest := mustSend(t, s.Client(), http.MethodGet, s.URL+"/api/dataverses/root/contents", "")
	require.Len(t, dvBody(t, guest)["data"], 2, "the guest: the collection and the released dataset")

	v := dvGet(t, s, "/api/datasets/2/versions/:latest").(map[string]any)
	require.Equal(t, first, v["datasetPersistentId"])
	require.Equal(t, float64(2), v["datasetId"])
	require.Equal(t, "RELEASED", v["versionState"])
	require.Len(t, v["files"], 1)
	v = dvGet(t, s, "/api/datasets/2/versions/:latest?excludeFiles=true").(map[string]any)
	require.NotContains(t, v, "files")
	require.Contains(t, v["metadataBlocks"], "citation")
	v = dvGet(t, s, "/api/datasets/:persistentId/versions/:draft?persistentId="+url.QueryEscape(second)).(map[string]any)
	require.Equal(t, "DRAFT", v["versionState"])
	a := mustSend(t, s.Client(), http.MethodGet, s.URL+"/api/datasets/2/versions/:draft", "", "X-Dataverse-key", dvToken)
	// getDatasetVersionOrDie answers before getVersion's own "Dataset
	// version not found" is reached.
	dvRefusal(t, http.StatusNotFound, "Dataset version :draft of dataset 2 not found", a)
}

// With Unindexed, a share of the datasets never shows in search, however
// long one waits, while the contents listing and a read of each still
// show them; a version's createTime is the second it was created.
func TestDataverseSearchNeverShowsTheUnindexedShare(t *testing.T) {
	clk := newClock()
	s := startDataverse(t, DataverseConfig{Unindexed: 0.5, Seed: 7, now: clk.now})
	const n = 40
	for i := range n {
		dvCreate(t, s, fmt.Sprint("deposit:m", i))
	}
	clk.advance(time.Hour)
	data := dvGet(t, s, "/api/search?q=*&type=dataset&per_page=1000").(map[string]any)
	shown := int(data["total_count"].(float64))
	require.Greater(t, shown, 0)
	require.Less(t, shown, n, "some never indexed")
	require.Len(t, dvGet(t, s, "/api/dataverses/root/contents").([]any), n, "the listing shows every one")

	newest := dvGet(t, s, "/api/search?q=*&type=dataset&sort=date&order=desc&per_page=1&show_entity_ids=true").(map[string]any)
	items := newest["items"].([]any)
	require.Len(t, items, 1)
	all := s.Datasets()
	for i := len(all) - 1; i >= 0; i-- {
		if data := dvGet(t, s, "/api/search?type=dataset&q="+url.QueryEscape(`otherIdValue:"`+all[i].OtherIDs[0]+`"`)).(map[string]any); data["total_count"].(float64) > 0 {
			require.Equal(t, all[i].PersistentID, items[0].(map[string]any)["global_id"], "sort=date&order=desc: the newest indexed first")
			break
		}
	}

	ds := dvGet(t, s, "/api/datasets/1").(map[string]any)
	created := ds["latestVersion"].(map[string]any)["createTime"].(string)
	require.Equal(t, clk.now().Add(-time.Hour).UTC().Format("2006-01-02T15:04:05Z"), created)
}

func TestDataverseRateLimitsAnswer429Or400OnAnAddWithoutRetryAfter(t *testing.T) {
	clk := newClock()
	s := startDataverse(t, DataverseConfig{Limit: 1, Window: time.Hour, now: clk.now})
	c := s.Client()
	pid := dvCreate(t, s, "m")
	a := mustSend(t, c, http.MethodPost, s.URL+"/api/dataverses/root/datasets", dvDatasetJSON("m2"), "X-Dataverse-key", dvToken)
	dvRefusal(t, http.StatusTooManyRequests, "cause was null! CreateNewDatasetCommand failed: Rate limited due to too many requests.", a)
	require.Empty(t, a.header.Get("Retry-After"))

	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "a", "").status, "each command has its own bucket")
	a = dvAdd(t, s, pid, dvToken, "b.txt", "b", "")
	dvRefusal(t, http.StatusBadRequest, "There was an error when trying to add the new file. CreateNewDataFilesCommand failed: Rate limited due to too many requests.", a)
	require.Equal(t, http.StatusOK, dvPublish(t, s, pid).status)
	dvRefusal(t, http.StatusTooManyRequests, "PublishDatasetCommand failed: Rate limited due to too many requests.", dvPublish(t, s, pid))

	clk.advance(time.Hour)
	require.NotEmpty(t, dvCreate(t, s, "m3"), "the bucket refills within the window")
	st := s.Stats()
	require.Equal(t, int64(3), st.RateLimited)
	require.Equal(t, int64(2), st.Datasets, "a limited command did nothing")
	require.Equal(t, int64(1), st.Files)
}

func TestDataverseFaultsStrikeBeforeOrAfterTheCommit(t *testing.T) {
	for _, kind := range []string{"500", "503"} {
		t.Run(kind+" before the create commits", func(t *testing.T) {
			s := startDataverse(t, DataverseConfig{Faults: "nth=1:" + kind})
			a := mustSend(t, s.Client(), http.MethodPost, s.URL+"/api/dataverses/root/datasets", dvDatasetJSON("m"), "X-Dataverse-key", dvToken)
			require.Equal(t, kind, fmt.Sprint(a.status))
			require.Zero(t, s.Stats().Datasets)
			require.Equal(t, int64(1), s.Stats().FaultsByKind[kind])
		})
	}
	t.Run("a dropped create and a dropped add have committed", func(t *testing.T) {
		s := startDataverse(t, DataverseConfig{Faults: "nth=1:drop"})
		_, err := send(s.Client(), http.MethodPost, s.URL+"/api/dataverses/root/datasets", dvDatasetJSON("m"), "X-Dataverse-key", dvToken)
		require.Error(t, err, "the connection was closed without an answer")
		pid := s.Datasets()[0].PersistentID
		dvCreate(t, s, "m")
		body, ct := dvAddBody(t, "a.txt", "hello", "")
		_, err = send(s.Client(), http.MethodPost, s.URL+"/api/datasets/:persistentId/add?persistentId="+url.QueryEscape(pid), body, "Content-Type", ct, "X-Dataverse-key", dvToken)
		require.Error(t, err)
		require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "hello", "").status)
		st := s.Stats()
		require.Equal(t, int64(2), st.Datasets, "a blind retry of a create makes a second dataset")
		require.Equal(t, int64(1), st.DuplicateMarkers)
		require.Equal(t, int64(2), st.Files, "and of an add a second file")
		require.Equal(t, int64(1), st.DuplicateFiles)
		require.Equal(t, int64(2), st.FaultsByKind["drop"])
	})
	t.Run("a 504 after a publish has published", func(t *testing.T) {
		s := startDataverse(t, DataverseConfig{Faults: "nth=2:504"})
		pid := dvCreate(t, s, "m")
		require.Equal(t, http.StatusOK, dvPublish(t, s, pid).status, "the first publish of a key draws no fault")
		pid = dvCreate(t, s, "m2")
		a := dvPublish(t, s, pid)
		require.Equal(t, http.StatusOK, a.status, "each dataset numbers its own attempts")
		require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "a", "").status)
		a = dvPublish(t, s, pid)
		require.Equal(t, http.StatusGatewayTimeout, a.status)
		st := s.Stats()
		require.Equal(t, int64(3), st.Publishes, "the gateway timed out, the publish went through")
		require.Equal(t, "RELEASED", s.Datasets()[1].VersionState)
	})
}

func TestDataverseRefusesBadConfig(t *testing.T) {
	_, err := NewDataverse(DataverseConfig{PublishLag: -time.Second})
	require.ErrorIs(t, err, ErrConfig)
	_, err = NewDataverse(DataverseConfig{Faults: "drop=2"})
	require.ErrorIs(t, err, ErrConfig)
}

func TestDataverseConcurrentWritesAreAllKept(t *testing.T) {
	s := startDataverse(t, DataverseConfig{})
	pid := dvCreate(t, s, "same")
	const n = 8
	body, ct := dvAddBody(t, "data.bin", "same bytes", "")
	statuses := make(chan int, 2*n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			a, err := send(s.Client(), http.MethodPost, s.URL+"/api/dataverses/root/datasets", dvDatasetJSON("same"), "X-Dataverse-key", dvToken)
			if err == nil {
				statuses <- a.status
			}
		})
		wg.Go(func() {
			a, err := send(s.Client(), http.MethodPost, s.URL+"/api/datasets/:persistentId/add?persistentId="+url.QueryEscape(pid), body, "Content-Type", ct, "X-Dataverse-key", dvToken)
			if err == nil {
				statuses <- a.status
			}
		})
	}
	wg.Wait()
	close(statuses)
	counts := map[int]int{}
	for st := range statuses {
		counts[st]++
	}
	require.Equal(t, map[int]int{http.StatusCreated: n, http.StatusOK: n}, counts)
	st := s.Stats()
	require.Equal(t, int64(n+1), st.Datasets)
	require.Equal(t, int64(n), st.DuplicateMarkers)
	require.Equal(t, int64(n-1), st.DuplicateFiles)
	require.Equal(t, int64(n-1), st.RenamedFiles)
	labels := map[string]bool{}
	for _, f := range s.Datasets()[0].Files {
		labels[f.Label] = true
		require.Equal(t, md5Hex("same bytes"), f.MD5)
	}
	require.Len(t, labels, n, "every copy has a name of its own")
}

// dvSend sends method to pathQuery as the user with body (JSON when it is
// not multipart).
func dvSend(t testing.TB, s *DataverseServer, method, pathQuery, body string, hdr ...string) answer {
	t.Helper()
	return mustSend(t, s.Client(), method, s.URL+pathQuery, body, append([]string{"X-Dataverse-key", dvToken}, hdr...)...)
}

// dvVersionJSON is the version (not wrapped) of dvDatasetJSON, titled title.
func dvVersionJSON(t testing.TB, marker, title string) string {
	t.Helper()
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.Replace(dvDatasetJSON(marker), "Rainfall in Utrecht", title, 1)), &doc))
	b, err := json.Marshal(doc["datasetVersion"])
	require.NoError(t, err)
	return string(b)
}

// A released dataset's next version: PUT .../versions/:draft makes the
// draft (a copy of the release's files) or overwrites it; a replace is a
// new file id and refuses the same content; minor is refused for a first
// release and for any change of the files, and numbers N.m+1, major
// (N+1).0; :latest-published shows the release while the draft is open;
// deleting the draft brings the release back as the latest.
func TestDataverseDraftVersionsReplaceDeleteAndMinorMajor(t *testing.T) {
	s := startDataverse(t, DataverseConfig{})
	pid := dvCreate(t, s, "m")
	q := "?persistentId=" + url.QueryEscape(pid)
	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "a.txt", "one", "").status)
	require.Equal(t, http.StatusOK, dvAdd(t, s, pid, dvToken, "b.txt", "two", "").status)
	publish := func(typ string) answer {
		return dvSend(t, s, http.MethodPost, "/api/datasets/:persistentId/actions/:publish"+q+"&type="+typ, "")
	}
	dvRefusal(t, http.StatusForbidden, "Cannot publish as minor version. Re-try as major release.", publish("minor"))
	require.Equal(t, http.StatusOK, publish("major").status)
	dvRefusal(t, http.StatusNotFound, "Dataset version :draft of dataset 1 not found", dvSend(t, s, http.MethodGet, "/api/datasets/:persistentId/versions/:draft"+q, ""))

	// Metadata only: minor, 1.1.
	a := dvSend(t, s, http.MethodPut, "/api/datasets/:persistentId/versions/:draft"+q, dvVersionJSON(t, "m", "Rain, corrected"), "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	draft := dvBody(t, a)["data"].(map[string]any)
	require.Equal(t, "DRAFT", draft["versionState"])
	require.NotContains(t, draft, "versionNumber", "a draft has no number")
	require.Len(t, draft["files"], 2, "the draft copies the release's files")
	pub := dvGet(t, s, "/api/datasets/:persistentId/versions/:latest-published"+q).(map[string]any)
	require.Equal(t, float64(1), pub["versionNumber"])
	require.Equal(t, "Rainfall in Utrecht", fieldString(pub, "title"), "the release is as it was")
	a = dvSend(t, s, http.MethodPut, "/api/datasets/:persistentId/versions/:draft"+q, `{"files":[{"label":"x"}]}`, "Content-Type", "application/json")
	dvRefusal(t, http.StatusBadRequest, "You may not add files via this api.", a)
	require.Equal(t, http.StatusOK, publish("minor").status)
	require.Equal(t, []string{"1.0", "1.1"}, s.Datasets()[0].Versions)
	require.Equal(t, "Rain, corrected", s.Datasets()[0].Title)

	// A file replaced: a new id; the same content is refused; minor is
	// refused; major is 2.0.
	files := dvGet(t, s, "/api/datasets/:persistentId/versions/:latest-published/files"+q).([]any)
	aID := fmt.Sprint(files[0].(map[string]any)["dataFile"].(map[string]any)["id"])
	bID := fmt.Sprint(files[1].(map[string]any)["dataFile"].(map[string]any)["id"])
	body, ct := dvAddBody(t, "a.txt", "one", `{"forceReplace":true}`)
	dvRefusal(t, http.StatusBadRequest, "Error! You may not replace a file with a file that has duplicate content.",
		dvSend(t, s, http.MethodPost, "/api/files/"+aID+"/replace", body, "Content-Type", ct))
	body, ct = dvAddBody(t, "a.txt", "one, again", `{"forceReplace":true}`)
	a = dvSend(t, s, http.MethodPost, "/api/files/"+aID+"/replace", body, "Content-Type", ct)
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	added := dvBody(t, a)["data"].(map[string]any)["files"].([]any)[0].(map[string]any)["dataFile"].(map[string]any)
	require.NotEqual(t, aID, fmt.Sprint(added["id"]), "a replacement is a new file")
	dvRefusal(t, http.StatusForbidden, "Cannot release as minor version. Re-try as major release.", publish("minor"))
	a = dvSend(t, s, http.MethodDelete, "/api/files/"+bID, "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	require.Equal(t, false, dvBody(t, a)["data"], "a released file stays in the releases")
	a = dvSend(t, s, http.MethodDelete, "/api/files/"+bID, "")
	require.Equal(t, http.StatusBadRequest, a.status, "not in the draft any more")
	require.Equal(t, http.StatusOK, publish("major").status)
	ds := s.Datasets()[0]
	require.Equal(t, []string{"1.0", "1.1", "2.0"}, ds.Versions)
	require.Len(t, ds.Files, 1)
	require.Equal(t, md5Hex("one, again"), ds.Files[0].MD5)

	// A draft deleted: the release is the latest again; no draft, no delete.
	require.Equal(t, http.StatusOK, dvSend(t, s, http.MethodPut, "/api/datasets/:persistentId/versions/:draft"+q, dvVersionJSON(t, "m", "Scrap"), "Content-Type", "application/json").status)
	require.Equal(t, http.StatusOK, dvSend(t, s, http.MethodDelete, "/api/datasets/:persistentId/versions/:draft"+q, "").status)
	dvRefusal(t, http.StatusUnauthorized, "This is NOT a DRAFT version", dvSend(t, s, http.MethodDelete, "/api/datasets/:persistentId/versions/:draft"+q, ""))
	ds = s.Datasets()[0]
	require.Equal(t, "RELEASED", ds.VersionState)
	require.Equal(t, "Rain, corrected", ds.Title)
	st := s.Stats()
	require.Equal(t, int64(1), st.Minor)
	require.Equal(t, int64(1), st.Major)
	require.Equal(t, int64(1), st.Replaced)
	require.Equal(t, int64(1), st.Deleted)
	require.Equal(t, int64(1), st.Discarded)
}
