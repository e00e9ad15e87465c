package couchdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// An object's document is the one whose id is the object key: the engine
// creates it with Steps, and each later content replaces it in a PUT on
// the condition that the document is still at the revision the store
// recorded. CouchDB checks that condition itself, and answers 409 when
// the revision is not the latest (PUT /{db}/{docid} in the CouchDB API
// reference, https://docs.couchdb.org/en/stable/api/document/common.html;
// src/docs/src/api/document/common.rst in apache/couchdb).
//
// The revision goes in the rev query parameter. The reference allows the
// If-Match header or a _rev member too, but PouchDB Server ignores the
// header on a PUT (it reads _rev from the body or rev from the query:
// lib/routes/documents.js of the npm package express-pouchdb 4.2.0, from
// pouchdb/pouchdb-server) and answers 409 as if no revision were given;
// a _rev member would change the payload's bytes.
//
// Plain payloads only: a dataset's files are attachments of its document,
// which an update would have to send again; a dataset with an identity is
// refused.

// Update is PUT {endpoint}/{object key}?rev={tag} with the payload as it
// is.
func (d couchdbDriver) Update(k canonical.Keyed, tag string) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errors.New("couchdb: an update needs the payload's object key")
	}
	if tag == "" {
		return driver.Request{}, errors.New("couchdb: an update needs the document's revision")
	}
	if k.MD5 != nil {
		return driver.Request{}, errors.New("couchdb: a dataset cannot be updated (its files are attachments of its document): datasets with an identity are not supported")
	}
	if err := checkCouchDocument(k.Body); err != nil {
		return driver.Request{}, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return driver.Request{Method: http.MethodPut, URL: withRev(driver.RecordURL(d.endpoint, k.Object), tag), Header: h, Body: k.Body}, nil
}

// withRev is u with the query parameter rev=tag added.
func withRev(u, tag string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + "rev=" + url.QueryEscape(tag)
}

// JudgeUpdate: 201 and 202 replaced the document, with the new revision
// as the tag; 409 is a revision that is not the latest (the document was
// changed since, or deleted: CouchDB and PouchDB Server answer a PUT with
// a revision to a missing or deleted document 409 too); 404 is a
// database that is not there, which stops the run as in a create; the
// rest as in a create.
func (d couchdbDriver) JudgeUpdate(a driver.Answer) driver.Verdict {
	if a.Err == nil && a.Status == http.StatusConflict {
		return driver.Verdict{Class: driver.Conflict, Problem: "the document is not at the revision the store recorded: it was changed or deleted since"}
	}
	return judgeCouchDB(a)
}

// ReadObject is GET {endpoint}/{object key}: the latest revision.
func (d couchdbDriver) ReadObject(k canonical.Keyed) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errors.New("couchdb: a read of an object needs its object key")
	}
	h := http.Header{}
	h.Set("Accept", "application/json")
	return driver.Request{Method: http.MethodGet, URL: driver.RecordURL(d.endpoint, k.Object), Header: h, Full: true}, nil
}

// JudgeRead: 200 is the document, whose _rev is the tag and whose other
// members are the payload; 404 is no document (a deleted one answers 404
// too); anything else settles nothing.
//
// Only _id and _rev are taken out, the two members every document read
// has. A payload holds no member starting with "_" (checkCouchDocument),
// so any other (_attachments: someone attached a file) is another
// writer's change and stays in the body, where it makes the content no
// version of the object, which the engine never overwrites.
func (d couchdbDriver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	if a.Err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	switch a.Status {
	case http.StatusOK:
	case http.StatusNotFound:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	default:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(a.Body, &doc); err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the document read is not a JSON object"}
	}
	var rev string
	if json.Unmarshal(doc["_rev"], &rev) != nil || rev == "" {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the document read has no _rev"}
	}
	if deleted := doc["_deleted"]; deleted != nil && string(deleted) == "true" {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	}
	delete(doc, "_id")
	delete(doc, "_rev")
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: fmt.Sprintf("the document read cannot be encoded again: %v", err)}
	}
	return driver.ObjectState{Body: bytes.TrimSuffix(body.Bytes(), []byte("\n")), Tag: rev}, driver.Finding{Kind: driver.Present}
}

// answerRev is the revision a 201 or 202 answer to a PUT names: its body's
// rev, else its ETag, which CouchDB sets to the quoted revision. A weak
// ETag is not one (PouchDB Server's framework sets W/"..." on answers
// that name no revision); "" when there is none.
func answerRev(a driver.Answer) string {
	var body struct {
		Rev string `json:"rev"`
	}
	if json.Unmarshal(a.Body, &body) == nil && body.Rev != "" {
		return body.Rev
	}
	etag := a.Header.Get("ETag")
	if strings.HasPrefix(etag, "W/") || len(etag) < 3 || etag[0] != '"' || etag[len(etag)-1] != '"' {
		return ""
	}
	return etag[1 : len(etag)-1]
}
