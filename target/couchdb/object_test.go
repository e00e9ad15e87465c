package couchdb_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/target/couchdb"
)

// send sends a driver's request as the engine would and gives its answer.
func send(t *testing.T, r driver.Request) driver.Answer {
	t.Helper()
	req, err := http.NewRequest(r.Method, r.URL, bytes.NewReader(r.Body))
	require.NoError(t, err)
	for name, vs := range r.Header {
		req.Header[name] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return driver.Answer{URL: r.URL, Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// version keys payload as the version of the object named id.
func version(t *testing.T, id, payload string) canonical.Keyed {
	t.Helper()
	keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(t, err)
	k, err := keyer.Key([]byte(payload))
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(`["` + id + `"]`))
	k.Object = hex.EncodeToString(sum[:])
	return k
}

// keyOf is the content key of a body read back.
func keyOf(t *testing.T, body []byte) string {
	t.Helper()
	keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(t, err)
	k, err := keyer.Key(body)
	require.NoError(t, err)
	return k.Key
}

// An object's document is created by the create step, replaced only on
// the revision the store recorded, and read back as the payload with its
// revision, on a real PouchDB Server.
func TestObjectUpdatesAreConditionalOnTheRevision(t *testing.T) {
	t.Parallel()
	db := peertest.PouchDB(t)
	d, err := couchdb.Target{Endpoint: db}.Driver()
	require.NoError(t, err)
	u, ok := d.(driver.Updater)
	require.True(t, ok, "the couchdb driver is a driver.Updater")

	v1 := version(t, "reef-1", `{"id":"reef-1","title":"Reef temperature"}`)
	v2 := version(t, "reef-1", `{"id":"reef-1","title":"Reef temperature, corrected","note":"<a & b>"}`)
	v3 := version(t, "reef-1", `{"id":"reef-1","title":"Reef temperature, third"}`)

	// The create: the engine passes the object key as the key.
	steps, err := d.Steps(canonical.Keyed{Key: v1.Object, Body: v1.Body, Object: v1.Object}, "")
	require.NoError(t, err)
	require.Len(t, steps, 1)
	req, err := steps[0].Build(nil)
	require.NoError(t, err)
	require.Equal(t, db+"/"+v1.Object, req.URL)
	created := steps[0].Judge(send(t, req))
	require.Equal(t, driver.Created, created.Class)
	rev1 := created.Tag
	require.True(t, strings.HasPrefix(rev1, "1-"), "the create's tag is the first revision: %q", rev1)

	// The update on that revision replaces the document, with the payload's
	// bytes as they are.
	req, err = u.Update(v2, rev1)
	require.NoError(t, err)
	require.Equal(t, v2.Body, req.Body)
	updated := u.JudgeUpdate(send(t, req))
	require.Equal(t, driver.Created, updated.Class, updated.Problem)
	rev2 := updated.Tag
	require.True(t, strings.HasPrefix(rev2, "2-"), "the update's tag is the second revision: %q", rev2)

	// An update on the old revision is refused: 409, a conflict.
	req, err = u.Update(v3, rev1)
	require.NoError(t, err)
	stale := send(t, req)
	require.Equal(t, http.StatusConflict, stale.Status)
	require.Equal(t, driver.Conflict, u.JudgeUpdate(stale).Class)

	// The read gives the latest payload, whose key is v2's, and its
	// revision.
	req, err = u.ReadObject(v3)
	require.NoError(t, err)
	state, found := u.JudgeRead(send(t, req))
	require.Equal(t, driver.Present, found.Kind, found.Problem)
	require.Equal(t, rev2, state.Tag)
	require.Equal(t, v2.Key, keyOf(t, state.Body), "read back: %s", state.Body)
	require.NotContains(t, string(state.Body), `"_id"`)
	require.NotContains(t, string(state.Body), `"_rev"`)

	// Another writer attaches a file: the document read is no version of
	// the object (its _attachments stay in the body).
	att, err := http.NewRequest(http.MethodPut, db+"/"+v1.Object+"/extra.txt?rev="+rev2, strings.NewReader("extra"))
	require.NoError(t, err)
	att.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(att)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	req, err = u.ReadObject(v3)
	require.NoError(t, err)
	state, found = u.JudgeRead(send(t, req))
	require.Equal(t, driver.Present, found.Kind, found.Problem)
	require.True(t, strings.HasPrefix(state.Tag, "3-"), state.Tag)
	require.NotEqual(t, v2.Key, keyOf(t, state.Body))
	require.Contains(t, string(state.Body), `"_attachments"`)

	// Deleted, the document reads as absent, and an update on its last
	// revision is a conflict.
	del, err := http.NewRequest(http.MethodDelete, db+"/"+v1.Object+"?rev="+state.Tag, nil)
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(del)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	req, err = u.ReadObject(v3)
	require.NoError(t, err)
	_, found = u.JudgeRead(send(t, req))
	require.Equal(t, driver.Absent, found.Kind)
	req, err = u.Update(v3, state.Tag)
	require.NoError(t, err)
	require.Equal(t, driver.Conflict, u.JudgeUpdate(send(t, req)).Class)
}

// An object never created reads as absent; an update of it is a
// conflict (the server knows no revision of it), and a database that is
// not there stops the run.
func TestObjectMissingOnPouchDB(t *testing.T) {
	t.Parallel()
	db := peertest.PouchDB(t)
	d, err := couchdb.Target{Endpoint: db}.Driver()
	require.NoError(t, err)
	u, ok := d.(driver.Updater)
	require.True(t, ok, "the couchdb driver is a driver.Updater")
	k := version(t, "never", `{"id":"never"}`)

	req, err := u.ReadObject(k)
	require.NoError(t, err)
	_, found := u.JudgeRead(send(t, req))
	require.Equal(t, driver.Absent, found.Kind)

	req, err = u.Update(k, "1-0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	require.Equal(t, driver.Conflict, u.JudgeUpdate(send(t, req)).Class)

	gone, err := couchdb.Target{Endpoint: db + "-gone"}.Driver()
	require.NoError(t, err)
	req, err = gone.(driver.Updater).Update(k, "1-0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	a := send(t, req)
	require.Equal(t, http.StatusNotFound, a.Status)
	require.Equal(t, driver.Stop, u.JudgeUpdate(a).Class)
}

// The create's tag is the answer's rev, or its ETag when the body names
// none (a strong one: PouchDB Server sets weak ones that are no revision).
func TestCreateTagFromTheAnswer(t *testing.T) {
	d, err := couchdb.Target{Endpoint: "http://127.0.0.1:5984/db"}.Driver()
	require.NoError(t, err)
	k := version(t, "x", `{"id":"x"}`)
	steps, err := d.Steps(canonical.Keyed{Key: k.Object, Body: k.Body, Object: k.Object}, "")
	require.NoError(t, err)
	for _, c := range []struct {
		status int
		etag   string
		body   string
		tag    string
	}{
		{201, `"1-abc"`, `{"ok":true,"id":"x","rev":"1-abc"}`, "1-abc"},
		{202, `"1-abc"`, ``, "1-abc"},
		{202, `W/"39-c0aD2M"`, ``, ""},
		{409, `"1-abc"`, `{"error":"conflict"}`, ""},
	} {
		h := http.Header{}
		h.Set("ETag", c.etag)
		v := steps[0].Judge(driver.Answer{Status: c.status, Header: h, Body: []byte(c.body)})
		require.Equal(t, c.tag, v.Tag, "%d %s %s", c.status, c.etag, c.body)
	}
}

// A dataset with an identity is refused by Update: its files are
// attachments, which an update would have to send again.
func TestDatasetUpdateRefused(t *testing.T) {
	d, err := couchdb.Target{Endpoint: "http://127.0.0.1:5984/db"}.Driver()
	require.NoError(t, err)
	k := version(t, "x", `{"metadata":{"id":"x"},"files":[]}`)
	k.MD5 = map[string]string{}
	_, err = d.(driver.Updater).Update(k, "1-abc")
	require.ErrorContains(t, err, "dataset")
}
