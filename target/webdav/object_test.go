package webdav

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
)

// send sends a driver's request and returns the answer the engine would
// judge (its body read whole).
func send(t *testing.T, req driver.Request) driver.Answer {
	t.Helper()
	hreq, err := http.NewRequest(req.Method, req.URL, bytes.NewReader(req.Body))
	require.NoError(t, err)
	hreq.Header = req.Header.Clone()
	if hreq.Header == nil {
		hreq.Header = http.Header{}
	}
	resp, err := http.DefaultClient.Do(hreq)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return driver.Answer{URL: req.URL, Status: resp.StatusCode, Header: resp.Header, Body: body}
}

func updater(t *testing.T, endpoint string) (driver.Driver, driver.Updater) {
	t.Helper()
	d, err := Target{Endpoint: endpoint}.Driver()
	require.NoError(t, err)
	u, ok := d.(driver.Updater)
	require.True(t, ok, "the webdav driver is not a driver.Updater")
	return d, u
}

// object is version body of the object named obj, as the engine hands it
// to Update and ReadObject.
func object(obj, body string) canonical.Keyed {
	return canonical.Keyed{Key: canonical.Key([]byte(body)), Object: obj, Body: []byte(body)}
}

// create makes the object's record as the engine does: the driver's
// ordinary step, for a Keyed whose Key is the object key.
func create(t *testing.T, d driver.Driver, obj, body string) driver.Verdict {
	t.Helper()
	steps, err := d.Steps(canonical.Keyed{Key: obj, Object: obj, Body: []byte(body)}, "")
	require.NoError(t, err)
	require.Len(t, steps, 1)
	req, err := steps[0].Build(nil)
	require.NoError(t, err)
	return steps[0].Judge(send(t, req))
}

// readStrong reads the object until the server gives a strong ETag:
// Apache's is weak for a second after a write, which JudgeRead retries.
func readStrong(t *testing.T, u driver.Updater, k canonical.Keyed) driver.ObjectState {
	t.Helper()
	for range 600 {
		req, err := u.ReadObject(k)
		require.NoError(t, err)
		st, f := u.JudgeRead(send(t, req))
		if f.Kind == driver.Unknown && f.Class == driver.Retry {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		require.Equal(t, driver.Present, f.Kind, "%+v", f)
		require.NotEmpty(t, st.Tag)
		return st
	}
	t.Fatal("the ETag never became strong")
	return driver.ObjectState{}
}

func update(t *testing.T, u driver.Updater, k canonical.Keyed, tag string) driver.Verdict {
	t.Helper()
	req, err := u.Update(k, tag)
	require.NoError(t, err)
	return u.JudgeUpdate(send(t, req))
}

// Against Apache mod_dav: the create names no tag, a read right after it
// is retried until the ETag is strong, an update on that tag replaces the
// record, one on an old tag is refused as a conflict, and a read gives the
// latest bytes and tag.
func TestObjectUpdatesOnApache(t *testing.T) {
	base := peertest.Apache(t)
	d, u := updater(t, base)
	obj := canonical.Key([]byte(`["reef-1"]`))
	v1, v2, v3 := `{"id":"reef-1","v":1}`, `{"id":"reef-1","v":2}`, `{"id":"reef-1","v":3}`

	c := create(t, d, obj, v1)
	require.Equal(t, driver.Created, c.Class)
	require.Empty(t, c.Tag, "Apache names no ETag in its answer to a PUT")

	req, err := u.ReadObject(object(obj, v1))
	require.NoError(t, err)
	require.Equal(t, base+"/"+obj, req.URL)
	a := send(t, req)
	if justWritten(a.Header) { // unless this machine stalled for a second
		require.True(t, isWeak(a.Header.Get("ETag")), "Apache's ETag in the second of a write: %q", a.Header.Get("ETag"))
		_, f := u.JudgeRead(a)
		require.Equal(t, driver.Finding{Kind: driver.Unknown, Class: driver.Retry, Problem: f.Problem}, f)
	}

	st := readStrong(t, u, object(obj, v1))
	require.Equal(t, v1, string(st.Body))
	tag1 := st.Tag

	v := update(t, u, object(obj, v2), tag1)
	require.Equal(t, driver.Created, v.Class, "%+v", v)
	require.Empty(t, v.Warn)

	v = update(t, u, object(obj, v3), tag1)
	require.Equal(t, driver.Conflict, v.Class, "an update on the tag of a replaced version")

	st = readStrong(t, u, object(obj, v3))
	require.Equal(t, v2, string(st.Body), "the refused update changed nothing")
	require.NotEqual(t, tag1, st.Tag)

	require.Equal(t, driver.Created, update(t, u, object(obj, v3), st.Tag).Class)
	require.Equal(t, v3, string(readStrong(t, u, object(obj, v3)).Body))
}

// A record that is not there reads as absent, and an update of it is a
// conflict (Apache answers 412 to If-Match on a missing resource), which
// the engine settles by that read.
func TestMissingObjectOnApache(t *testing.T) {
	base := peertest.Apache(t)
	_, u := updater(t, base)
	k := object(canonical.Key([]byte(`["never"]`)), `{"id":"never"}`)

	req, err := u.ReadObject(k)
	require.NoError(t, err)
	_, f := u.JudgeRead(send(t, req))
	require.Equal(t, driver.Absent, f.Kind)

	require.Equal(t, driver.Conflict, update(t, u, k, `"7-661c44dc3ecd8"`).Class)

	res, err := http.Get(base + "/" + k.Object)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode, "the refused update created nothing")
}

// nginx's dav module does not check If-Match: an update on a tag the
// server never gave replaces the record, and one of a missing record
// creates it, which is warned about. This is the limit the page states.
func TestNginxIgnoresIfMatch(t *testing.T) {
	base := peertest.Nginx(t)
	d, u := updater(t, base)
	obj := canonical.Key([]byte(`["reef-2"]`))
	require.Equal(t, driver.Created, create(t, d, obj, `{"v":1}`).Class)

	v := update(t, u, object(obj, `{"v":2}`), `"not-the-tag"`)
	require.Equal(t, driver.Created, v.Class)
	require.Equal(t, `{"v":2}`, string(readStrong(t, u, object(obj, `{"v":2}`)).Body))

	v = update(t, u, object(canonical.Key([]byte(`["gone"]`)), `{"v":1}`), `"not-the-tag"`)
	require.Equal(t, driver.Created, v.Class)
	require.Equal(t, ignoredIfMatchWarning, v.Warn)
}

func TestJudgeUpdate(t *testing.T) {
	_, u := updater(t, "http://repo.example/dav")
	etag := func(tag string) http.Header { return http.Header{"Etag": {tag}} }
	for _, tc := range []struct {
		status int
		header http.Header
		want   driver.Verdict
	}{
		{http.StatusNoContent, etag(`"abc"`), driver.Verdict{Class: driver.Created, Tag: `"abc"`}},
		{http.StatusOK, etag(`W/"abc"`), driver.Verdict{Class: driver.Created}},
		{http.StatusNoContent, nil, driver.Verdict{Class: driver.Created}},
		{http.StatusPreconditionFailed, nil, driver.Verdict{Class: driver.Conflict}},
		{http.StatusNotFound, nil, driver.Verdict{Class: driver.Terminal, Problem: "the record is gone"}},
		{http.StatusLocked, nil, driver.Verdict{Class: driver.Retry}},
		{http.StatusConflict, nil, driver.Verdict{Class: driver.Stop, Problem: "the collection http://repo.example/dav/ does not exist"}},
		{http.StatusBadGateway, nil, driver.Verdict{Class: driver.Ambiguous}},
	} {
		a := driver.Answer{URL: "http://repo.example/dav/obj", Status: tc.status, Header: tc.header}
		require.Equal(t, tc.want, u.JudgeUpdate(a), "status %d", tc.status)
	}
}

// The create names the tag of a 201 that carries a strong ETag.
func TestCreateTag(t *testing.T) {
	d, _ := updater(t, "http://repo.example/dav")
	steps, err := d.Steps(canonical.Keyed{Key: "obj", Object: "obj", Body: []byte(`{}`)}, "")
	require.NoError(t, err)
	v := steps[0].Judge(driver.Answer{Status: http.StatusCreated, Header: http.Header{"Etag": {`"t1"`}}})
	require.Equal(t, driver.Verdict{Class: driver.Created, Tag: `"t1"`}, v)
	v = steps[0].Judge(driver.Answer{Status: http.StatusCreated, Header: http.Header{"Etag": {`W/"t1"`}}})
	require.Equal(t, driver.Verdict{Class: driver.Created}, v)
}

// A weak ETag dated in the second of the write is retried; one that stays
// weak, or none, is a record present with no usable tag.
func TestJudgeReadWeakTags(t *testing.T) {
	_, u := updater(t, "http://repo.example/dav")
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	answer := func(tag string, modified time.Time) driver.Answer {
		h := http.Header{"Date": {now.Format(http.TimeFormat)}, "Last-Modified": {modified.Format(http.TimeFormat)}}
		if tag != "" {
			h.Set("ETag", tag)
		}
		return driver.Answer{URL: "http://repo.example/dav/obj?token=s", Status: http.StatusOK, Header: h, Body: []byte(`{"v":1}`)}
	}
	_, f := u.JudgeRead(answer(`W/"7-1"`, now.Add(-time.Second)))
	require.Equal(t, driver.Finding{Kind: driver.Unknown, Class: driver.Retry, Problem: f.Problem}, f)
	require.NotEmpty(t, f.Problem)

	st, f := u.JudgeRead(answer(`W/"7-1"`, now.Add(-2*time.Second)))
	require.Equal(t, driver.Present, f.Kind)
	require.Equal(t, driver.ObjectState{Body: []byte(`{"v":1}`)}, st)

	st, f = u.JudgeRead(answer(`"7-1"`, now))
	require.Equal(t, driver.Present, f.Kind)
	require.Equal(t, `"7-1"`, st.Tag)

	st, f = u.JudgeRead(answer("", now.Add(-time.Hour)))
	require.Equal(t, driver.Present, f.Kind)
	require.Empty(t, st.Tag)

	_, f = u.JudgeRead(driver.Answer{Status: http.StatusServiceUnavailable})
	require.Equal(t, driver.Finding{Kind: driver.Unknown, Class: driver.Retry}, f)
}
