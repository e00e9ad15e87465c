package record

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/depositkit/deposit/driver"
)

// ConditionalUpdate is the request that replaces the record at url with
// body on the condition that the server holds the version tagged tag: PUT
// with If-Match (RFC 9110 section 13.1.1).
func ConditionalUpdate(url string, body []byte, tag string) driver.Request {
	h := http.Header{}
	h.Set("If-Match", tag)
	h.Set("Content-Type", "application/json")
	return driver.Request{Method: http.MethodPut, URL: url, Header: h, Body: body}
}

// JudgeUpdate judges the answer to a ConditionalUpdate: a 2xx replaced the
// record (its ETag the new version's tag), a 412 says the record holds
// another version (driver.Conflict: the engine reads it), a 404 that it is
// gone; anything else as driver.Classify.
func JudgeUpdate(a driver.Answer) driver.Verdict {
	if a.Err == nil {
		switch a.Status {
		case http.StatusPreconditionFailed:
			return driver.Verdict{Class: driver.Conflict}
		case http.StatusNotFound, http.StatusGone:
			return driver.Verdict{Class: driver.Terminal, Problem: "the object's record is no longer on the server"}
		}
	}
	v := driver.Verdict{Class: driver.Classify(a)}
	if v.Class == driver.Created {
		v.Tag = a.Header.Get("ETag")
	}
	return v
}

// ReadObject is the request that reads the record at url as it is now.
func ReadObject(url string) driver.Request {
	h := http.Header{}
	h.Set("Accept", "application/json")
	return driver.Request{Method: http.MethodGet, URL: url, Header: h, Full: true}
}

// JudgeRead reads the answer to ReadObject: the record's payload (the body,
// or its member "metadata" where the body is the reference server's
// envelope, which names the record's "key" beside it) and its ETag.
func JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	if a.Err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	switch a.Status {
	case http.StatusOK:
		return driver.ObjectState{Body: payloadOf(a.Body), Tag: a.Header.Get("ETag")}, driver.Finding{Kind: driver.Present}
	case http.StatusNotFound, http.StatusGone:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	}
	return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a), Problem: driver.Problem(a.Header, a.Body)}
}

// payloadOf is the payload a read answered: the envelope's metadata when
// the body is {"identifier", "key", "metadata", ...}, else the body.
func payloadOf(body []byte) []byte {
	t := bytes.TrimSpace(body)
	if len(t) == 0 || t[0] != '{' {
		return body
	}
	var env struct {
		Key      *string         `json:"key"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if json.Unmarshal(t, &env) != nil || env.Key == nil || len(env.Metadata) == 0 {
		return body
	}
	return env.Metadata
}
