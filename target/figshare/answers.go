package figshare

import (
	"encoding/json"
	"net/http"

	"github.com/depositkit/deposit/driver"
)

// message is the message of Figshare's error body, {"message":M,
// "code":C} (figshare/user_documentation docs/api/index.md, Errors), in
// one line; "" when the body is not one.
func message(body []byte) string {
	var e struct {
		Message string `json:"message"`
		Code    any    `json:"code"`
	}
	if json.Unmarshal(body, &e) != nil || e.Message == "" {
		return ""
	}
	return driver.OneLine(e.Message)
}

// judge classifies a Figshare answer. onRecord says the request names an
// article or file the deposit made, so that a 404 is that record gone (a
// failure of this deposit) rather than a wrong endpoint (which stops the
// run). A 429 is retried after its Retry-After, if any.
func judge(a driver.Answer, onRecord bool) driver.Verdict {
	v := driver.Verdict{Class: driver.Classify(a)}
	if a.Err != nil || a.Status < 400 {
		return v
	}
	m := message(a.Body)
	v.Problem = m
	switch {
	case a.Status == http.StatusUnauthorized || a.Status == http.StatusForbidden:
		v.Class, v.Problem = driver.Stop, "Figshare refused the personal token (check DEPOSIT_AUTHORIZATION): "+m
	case a.Status == http.StatusNotFound && onRecord:
		v.Class, v.Problem = driver.Terminal, "the article or file is gone (deleted?): "+m
	case a.Status == http.StatusTooManyRequests:
		v.Problem = "throttled by Figshare: " + m
	case a.Status == http.StatusBadRequest || a.Status == http.StatusUnprocessableEntity:
		v.Class, v.Problem = driver.Terminal, "refused by Figshare: "+m
	}
	return v
}

// unknown is the finding of an answer that settles nothing.
func unknown(a driver.Answer) driver.Finding {
	v := judge(a, true)
	if v.Class == driver.Created || v.Class == driver.Terminal {
		v.Class = driver.Ambiguous // a 2xx whose body could not be read, a record not readable now
	}
	return driver.Finding{Kind: driver.Unknown, Class: v.Class, Problem: v.Problem}
}
