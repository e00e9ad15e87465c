package osf

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/depositkit/deposit/driver"
)

// stepKind is which request an answer is for: a 404 means another thing
// for each.
type stepKind int

const (
	createStep stepKind = iota
	uploadStep
	publicStep
	doiStep
	readStep
)

// detail is the error of an answer: the details of a JSON:API error
// document ({"errors":[{"detail":...}]}, the API's) or the message of
// WaterButler's ({"code":N,"message":...}); "" when the body is neither.
func detail(body []byte) string {
	var doc struct {
		Errors []struct {
			Detail json.RawMessage `json:"detail"`
		} `json:"errors"`
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return ""
	}
	var parts []string
	for _, e := range doc.Errors {
		var s string
		if json.Unmarshal(e.Detail, &s) != nil {
			s = string(e.Detail)
		}
		parts = append(parts, s)
	}
	if len(doc.Message) > 0 {
		var s string
		if json.Unmarshal(doc.Message, &s) != nil {
			s = string(doc.Message)
		}
		parts = append(parts, s)
	}
	return driver.OneLine(strings.Join(parts, "; "))
}

// judge classifies an answer of OSF's API or WaterButler for a step of
// kind by its status. Success is left to the caller: judge returns
// driver.Created for 200 and 201. 429 is the throttle of either (with
// Retry-After in seconds: Django REST framework's, and WaterButler's
// ratelimiting.py, a Redis key's TTL), retried after it.
func judge(a driver.Answer, kind stepKind) driver.Verdict {
	if a.Err != nil || a.Status < 400 {
		return driver.Verdict{Class: driver.Classify(a)}
	}
	m := detail(a.Body)
	v := driver.Verdict{Problem: m}
	switch s := a.Status; {
	case s == http.StatusTooManyRequests:
		v.Class, v.Problem = driver.Retry, "throttled by OSF: "+m
	case s >= 500 || s == http.StatusServiceUnavailable:
		v.Class = driver.Classify(a)
	case s == http.StatusUnauthorized:
		v.Class, v.Problem = driver.Stop, "OSF refused the personal access token: "+m
	case s == http.StatusForbidden:
		v.Class, v.Problem = driver.Stop, "OSF refused the request for want of a permission (a token without the osf.full_write scope, or no write access to the parent node): "+m
	case s == http.StatusNotFound && kind == createStep:
		v.Class, v.Problem = driver.Stop, "no such parent node, or not an OSF API v2 (check the endpoint): "+m
	case s == http.StatusNotFound && kind == readStep:
		v.Class = driver.Stop
	case s == http.StatusNotFound || s == http.StatusGone:
		v.Class, v.Problem = driver.Terminal, "the node is gone (deleted?): "+m
	case s == http.StatusConflict:
		v.Class = driver.Conflict
	default:
		v.Class = driver.Terminal
		if s == http.StatusBadRequest {
			v.Problem = "refused as invalid: " + m
		}
	}
	return v
}

// unknown is the finding of an answer that settles nothing.
func unknown(a driver.Answer) driver.Finding {
	v := judge(a, readStep)
	if v.Class == driver.Created {
		v.Class = driver.Ambiguous // a 2xx whose body could not be read
	}
	return driver.Finding{Kind: driver.Unknown, Class: v.Class, Problem: v.Problem}
}
