// Package record provides the requests and checks the built-in targets
// share for a record at a URL of its own: a conditional create and a
// read-back.
package record

import (
	"net/http"

	"github.com/depositkit/deposit/driver"
)

// ConditionalPut builds the conditional create of body at url: PUT with
// If-None-Match: *.
func ConditionalPut(url string, body []byte) func([]string) (driver.Request, error) {
	return func([]string) (driver.Request, error) {
		h := http.Header{}
		h.Set("If-None-Match", "*")
		h.Set("Content-Type", "application/json")
		return driver.Request{Method: http.MethodPut, URL: url, Header: h, Body: body, Full: true}, nil
	}
}

// IgnoredConditionWarning is logged once when a conditional create is
// answered with a success other than 201.
const IgnoredConditionWarning = "the server answered a conditional create with a status other than 201; it may ignore If-None-Match, and then cannot prevent duplicates"

// ReadBack is the check that reads a record back at url. ours, when set,
// refuses a record that is not this deposit's (a foreign record at our
// name). A read the server refuses (403, 404, 405, 410) finds nothing. A
// record userPointer (the pointer the user chose, if any) names nothing in
// is warned about.
func ReadBack(url string, pointers []string, userPointer string, ours func(body []byte) error) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) {
			h := http.Header{}
			h.Set("Accept", "application/json")
			return driver.Request{Method: http.MethodGet, URL: url, Header: h, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
			}
			switch a.Status {
			case http.StatusOK, http.StatusNoContent:
				if ours != nil {
					if err := ours(a.Body); err != nil {
						return driver.Finding{Kind: driver.Foreign, Problem: err.Error()}
					}
				}
				// A read-back that merely echoes the stored payload mints
				// nothing: no identifier, so the step's fallback (the
				// record URL) it is.
				id, _ := driver.StringAt(a.Body, pointers)
				return driver.Finding{Kind: driver.Present, ID: id, Warn: driver.MissedPointer(userPointer, a.Body)}
			case http.StatusNotFound, http.StatusGone, http.StatusForbidden, http.StatusMethodNotAllowed:
				return driver.Finding{Kind: driver.Absent, Warn: "the server refused to read a record back; using record URLs as identifiers"}
			}
			return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
		},
	}
}

// Delete is the request that removes the record a conditional create
// made, for a driver.Prober: DELETE at the URL it was written to.
func Delete(created driver.Answer) (driver.Request, error) {
	return driver.Request{Method: http.MethodDelete, URL: created.URL}, nil
}
