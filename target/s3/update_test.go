package s3

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
)

// versityDriver is the s3 driver for the bucket of a fresh versitygw, and
// a client whose transport signs as the engine's does.
func versityDriver(t *testing.T, secret string) (driver.Driver, *http.Client) {
	t.Helper()
	s := peertest.Versity(t)
	if secret == "" {
		secret = s.SecretAccessKey
	}
	d, err := Target{
		Endpoint: s.Endpoint + "/" + s.Bucket,
		AWS:      Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: secret, Region: s.Region},
	}.Driver()
	require.NoError(t, err)
	return d, &http.Client{Transport: d.(driver.TransportWrapper).WrapTransport(http.DefaultTransport)}
}

// send sends req as the engine would and returns its answer.
func send(t *testing.T, c *http.Client, req driver.Request) driver.Answer {
	t.Helper()
	r, err := http.NewRequest(req.Method, req.URL, bytes.NewReader(req.Body))
	require.NoError(t, err)
	for name, vs := range req.Header {
		r.Header[name] = vs
	}
	resp, err := c.Do(r)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return driver.Answer{URL: req.URL, Status: resp.StatusCode, Header: resp.Header, Body: body}
}

// objectKeyed is a version of one object: the engine creates it with Key
// set to the object key, and updates it with the content key as Key.
func objectKeyed(object, body string, create bool) canonical.Keyed {
	key := object
	if !create {
		sum := sha256.Sum256([]byte(body))
		key = hex.EncodeToString(sum[:])
	}
	return canonical.Keyed{Key: key, Object: object, Body: []byte(body)}
}

func TestObjectUpdatesOnVersity(t *testing.T) {
	t.Parallel()
	d, c := versityDriver(t, "")
	u, ok := d.(driver.Updater)
	require.True(t, ok, "the s3 driver is an Updater")
	object := "9f2c4e1a7b3d5f60818293a4b5c6d7e8f9a0b1c2d3e4f5061728394a5b6c7d8e"

	create := func(body string) driver.Verdict {
		steps, err := d.Steps(objectKeyed(object, body, true), "")
		require.NoError(t, err)
		require.Len(t, steps, 1)
		req, err := steps[0].Build(nil)
		require.NoError(t, err)
		require.Equal(t, d.(s3Driver).objectURL(object), req.URL)
		return steps[0].Judge(send(t, c, req))
	}
	update := func(body, tag string) driver.Verdict {
		req, err := u.Update(objectKeyed(object, body, false), tag)
		require.NoError(t, err)
		require.Equal(t, tag, req.Header.Get("If-Match"))
		return u.JudgeUpdate(send(t, c, req))
	}
	read := func(object string) (driver.ObjectState, driver.Finding) {
		req, err := u.ReadObject(canonical.Keyed{Object: object})
		require.NoError(t, err)
		return u.JudgeRead(send(t, c, req))
	}

	v1 := create(`{"id":"reef","title":"Reef"}`)
	require.Equal(t, driver.Created, v1.Class)
	require.NotEmpty(t, v1.Tag, "the create's answer names the ETag")
	require.Equal(t, driver.Exists, create(`{"id":"reef","title":"Reef"}`).Class)

	v2 := update(`{"id":"reef","title":"Reef, corrected"}`, v1.Tag)
	require.Equal(t, driver.Created, v2.Class, v2.Problem)
	require.NotEmpty(t, v2.Tag)
	require.NotEqual(t, v1.Tag, v2.Tag)

	stale := update(`{"id":"reef","title":"Reef, by another hand"}`, v1.Tag)
	require.Equal(t, driver.Conflict, stale.Class, "an update on a tag the object no longer has is refused (412)")

	state, f := read(object)
	require.Equal(t, driver.Present, f.Kind)
	require.Equal(t, `{"id":"reef","title":"Reef, corrected"}`, string(state.Body), "the stale update changed nothing")
	require.Equal(t, v2.Tag, state.Tag, "the read names the tag the update answered")

	v3 := update(`{"id":"reef","title":"Reef, third"}`, state.Tag)
	require.Equal(t, driver.Created, v3.Class, v3.Problem)
	state, f = read(object)
	require.Equal(t, driver.Present, f.Kind)
	require.Equal(t, `{"id":"reef","title":"Reef, third"}`, string(state.Body))
	require.Equal(t, v3.Tag, state.Tag)

	missing := "0000000000000000000000000000000000000000000000000000000000000000"
	_, f = read(missing)
	require.Equal(t, driver.Absent, f.Kind)

	req, err := u.Update(canonical.Keyed{Key: object, Object: missing, Body: []byte(`{}`)}, v3.Tag)
	require.NoError(t, err)
	gone := u.JudgeUpdate(send(t, c, req))
	require.Equal(t, driver.Terminal, gone.Class, "an update cannot bring back an object that was deleted")
	require.Contains(t, gone.Problem, "gone")
}

func TestObjectReadWithWrongCredentialsStops(t *testing.T) {
	t.Parallel()
	d, c := versityDriver(t, "not-the-secret")
	u, ok := d.(driver.Updater)
	require.True(t, ok, "the s3 driver is an Updater")
	req, err := u.ReadObject(canonical.Keyed{Object: "0123"})
	require.NoError(t, err)
	_, f := u.JudgeRead(send(t, c, req))
	require.Equal(t, driver.Unknown, f.Kind)
	require.Equal(t, driver.Stop, f.Class)
}

// The answers versitygw does not give on demand, judged as AWS documents
// them.
func TestJudgeUpdate(t *testing.T) {
	u, ok := driver.Driver(s3Driver{}).(driver.Updater)
	require.True(t, ok, "the s3 driver is an Updater")
	s3err := func(status int, code string) driver.Answer {
		return driver.Answer{Status: status, Body: []byte("<Error><Code>" + code + "</Code><Message>m</Message></Error>")}
	}
	tests := []struct {
		name string
		a    driver.Answer
		want driver.Class
	}{
		{"a concurrent conditional write is asked again", s3err(http.StatusConflict, "ConditionalRequestConflict"), driver.Retry},
		{"a mismatched ETag is a conflict", s3err(http.StatusPreconditionFailed, "PreconditionFailed"), driver.Conflict},
		{"a deleted object is terminal", s3err(http.StatusNotFound, "NoSuchKey"), driver.Terminal},
		{"a missing bucket stops the run", s3err(http.StatusNotFound, "NoSuchBucket"), driver.Stop},
		{"a refused signature stops the run", s3err(http.StatusForbidden, "SignatureDoesNotMatch"), driver.Stop},
		{"a lost answer is ambiguous", driver.Answer{Err: io.ErrUnexpectedEOF}, driver.Ambiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, u.JudgeUpdate(tt.a).Class)
		})
	}
	done := u.JudgeUpdate(driver.Answer{Status: http.StatusOK, Header: http.Header{"Etag": {`"abc"`}}})
	require.Equal(t, driver.Verdict{Class: driver.Created, Tag: `"abc"`}, done)
}
