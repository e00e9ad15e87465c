package dataverse

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/depositkit/deposit/driver"
)

// lockWait is the least wait before a write refused by a dataset lock (an
// ingest, another process's publication) is sent again.
const lockWait = time.Second

// message is the message of Dataverse's envelope,
// {"status":"ERROR","message":"..."} (or the warning of an "OK" one); ""
// when the body is not one.
func message(body []byte) string {
	var env struct {
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(body, &env) != nil || len(env.Message) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(env.Message, &s) == nil {
		return driver.OneLine(s)
	}
	return driver.OneLine(string(env.Message)) // some commands answer an object
}

// validationMessage is a "Validation Failed" message without the stray
// "java.util.stream.ReferencePipeline$3@..." Dataverse 5.11 and later
// append to it.
func validationMessage(m string) string {
	if i := strings.Index(m, "java.util.stream."); i > 0 {
		m = strings.TrimSpace(m[:i])
	}
	return m
}

// stepKind is which write an answer is for: the messages and the safest
// class of an unrecognised answer differ by step.
type stepKind int

const (
	createStep stepKind = iota
	addStep
	publishStep
	readStep
)

// Warnings, logged once per client.
const (
	warnUnrecognised = "Dataverse answered with a message this target does not recognise; it was taken as ambiguous (the step is looked for before it is sent again, never taken as done): please report the message"
)

// judge classifies a Dataverse answer for a step of kind by its status
// and message (403 is a validation failure, a lock or a permission; 400
// on an add is a lock or a rate limit). Success is left to the caller:
// judge returns driver.Created for 200 and 201.
func judge(a driver.Answer, kind stepKind) driver.Verdict {
	if a.Err != nil || a.Status < 400 {
		return driver.Verdict{Class: driver.Classify(a)}
	}
	m := message(a.Body)
	pid := pidOf(a.URL)
	v := driver.Verdict{Problem: m}
	switch {
	case a.Status == http.StatusServiceUnavailable || a.Status >= 500:
		v.Class = driver.Classify(a)
	case a.Status == http.StatusTooManyRequests || strings.Contains(m, "Rate limited"):
		// Checked before the command runs (a 400 on an add): nothing was
		// done. No Retry-After: the retry policy's backoff slows down.
		v.Class, v.Problem = driver.Retry, "rate limited by Dataverse: "+m
	case a.Status == http.StatusUnauthorized && strings.Contains(m, "Bad API key"):
		v.Class, v.Problem = driver.Stop, "Dataverse refused the API token (Bad API key): "+m
	case a.Status == http.StatusUnauthorized || strings.Contains(m, ":guest") ||
		strings.Contains(m, "do not have permission") || strings.Contains(m, "not permitted") ||
		strings.Contains(m, "Only authenticated users"):
		v.Class, v.Problem = driver.Stop, "Dataverse refused the request for want of a permission (no API token, or one without the right to add datasets to the collection): "+m
	case strings.HasPrefix(m, "Validation Failed"):
		v.Class, v.Problem = driver.Terminal, "invalid metadata: "+validationMessage(m)
	case strings.HasPrefix(m, "Error parsing Json") || strings.Contains(m, "provide initial version"):
		v.Class, v.Problem = driver.Terminal, "invalid metadata: "+m
	case strings.Contains(m, "locked") || strings.Contains(m, "dataset lock") ||
		(kind == addStep && a.Status == http.StatusBadRequest && strings.HasPrefix(m, "Failed to add file to dataset")):
		v.Class, v.InFlight = driver.Retry, lockWait
		v.Problem = "dataset " + pid + " is locked: " + m
	case strings.HasPrefix(m, "Can't find dataverse"):
		v.Class, v.Problem = driver.Stop, "no such collection (alias): "+m
	case strings.HasPrefix(m, "API endpoint does not exist"):
		v.Class, v.Problem = driver.Stop, "not a Dataverse native API (check the endpoint): "+m
	case a.Status == http.StatusNotFound && kind != createStep:
		v.Class, v.Problem = driver.Terminal, "dataset "+pid+" is gone (deleted?): "+m
	case a.Status == http.StatusRequestEntityTooLarge:
		v.Class = driver.Terminal
	default:
		v.Class, v.Warn = driver.Ambiguous, warnUnrecognised
		v.Problem = "unrecognised answer: " + m
	}
	return v
}

// pidOf is the persistentId query parameter of a request URL, or "".
func pidOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Query().Get("persistentId")
}
