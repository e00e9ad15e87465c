// Package couchdb provides the couchdb target: a CouchDB database (or
// PouchDB Server, Cloudant), whose PUT of a new document id is a
// conditional create by nature. It stores what it is given and mints
// nothing: a record's identifier is its URL.
package couchdb

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

// Target is a CouchDB database (or PouchDB Server, Cloudant): PUT
// {Endpoint}/{key}. A PUT without a revision creates the document or fails
// with 409, so it is a conditional create by nature; 201 and 202 are
// created, 409 exists. The payload must be a JSON object without top-level
// members starting with "_". A dataset is the dataset document with every
// file inline as an attachment named by its path, in that one PUT; a 409
// is confirmed by reading the document back and comparing each
// attachment's length and MD5 with the file's. With an identity, a plain
// payload's document is replaced on its revision (a driver.Updater,
// object.go); a dataset's is not.
type Target struct {
	// Endpoint is the database URL. Required.
	Endpoint string
}

type couchdbDriver struct{ endpoint string }

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("couchdb.Target.Endpoint", t.Endpoint)
	return couchdbDriver{ep}, err
}

func (d couchdbDriver) Name() string              { return driver.TargetName(protocol.CouchDB, d.endpoint) }
func (d couchdbDriver) StepTargets() []string     { return nil }
func (d couchdbDriver) SecretFingerprint() string { return "" }
func (d couchdbDriver) Guards(name string) bool   { return driver.Guarded(name) }

// WantsFileMD5: a dataset's files are checked against the MD5 digests
// CouchDB reports for attachments.
func (d couchdbDriver) WantsFileMD5() bool { return true }

// Steps is one PUT of the document; for a dataset, the dataset document
// with every file inline as an attachment (attachments.go).
func (d couchdbDriver) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	if err := checkCouchDocument(k.Body); err != nil {
		return nil, err
	}
	if dir != "" {
		s, err := d.couchDatasetStep(k, dir)
		if err != nil {
			return nil, err
		}
		return []driver.Step{s}, nil
	}
	url := driver.RecordURL(d.endpoint, k.Key)
	return []driver.Step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			return driver.Request{Method: http.MethodPut, URL: url, Header: h, Body: k.Body}, nil
		},
		Judge:    judgeCouchDB,
		Fallback: credential.Strip(url),
	}}, nil
}

// checkCouchDocument refuses what CouchDB cannot store as a document: a JSON
// value that is not an object, and top-level members starting with "_",
// which CouchDB reserves (_id, _rev, _attachments change what a PUT means;
// others are refused).
func checkCouchDocument(body []byte) error {
	if kind := driver.JSONKind(body); kind != "an object" {
		return fmt.Errorf("couchdb: a document must be a JSON object, not %s", kind)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("couchdb: %w", err)
	}
	for name := range doc {
		if strings.HasPrefix(name, "_") {
			return fmt.Errorf("couchdb: top-level member %q: names starting with _ are reserved by CouchDB", name)
		}
	}
	return nil
}

// ProbeRemoval removes a probe document (driver.Prober): CouchDB deletes a
// document by its revision, which the create answer carries as "rev" and
// a read of the document as "_rev" (the create answer lost).
func (d couchdbDriver) ProbeRemoval(created driver.Answer) (driver.Request, error) {
	var doc struct {
		Rev    string `json:"rev"`
		DocRev string `json:"_rev"`
	}
	if json.Unmarshal(created.Body, &doc) != nil || (doc.Rev == "" && doc.DocRev == "") {
		return driver.Request{}, errors.New("neither the create answer nor a read of the document carried a revision to delete")
	}
	rev := cmp.Or(doc.Rev, doc.DocRev)
	return driver.Request{Method: http.MethodDelete, URL: created.URL + "?rev=" + url.QueryEscape(rev)}, nil
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var (
	_ driver.FileMD5er = couchdbDriver{}
	_ driver.Prober    = couchdbDriver{}
	_ driver.Updater   = couchdbDriver{}
)
