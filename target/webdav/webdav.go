// Package webdav provides the webdav target: a WebDAV collection, written
// to with a conditional create and, for an object named by an identity,
// updated with a conditional replace. It stores what it is given and mints
// nothing: a record's identifier is its URL.
package webdav

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/internal/record"
)

// Target is a WebDAV collection (Apache mod_dav, nginx's dav module, ...):
// a conditional PUT {Endpoint}/{key} with If-None-Match: *. Unlike the put target, a
// 409 means the parent collection does not exist (RFC 4918 section 9.7.1),
// which concerns every item, so the run stops.
type Target struct {
	// Endpoint is the collection URL. Required.
	Endpoint string
}

type webdavDriver struct{ endpoint string }

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("webdav.Target.Endpoint", t.Endpoint)
	return webdavDriver{ep}, err
}

func (d webdavDriver) Name() string              { return driver.TargetName(protocol.WebDAV, d.endpoint) }
func (d webdavDriver) StepTargets() []string     { return nil }
func (d webdavDriver) SecretFingerprint() string { return "" }
func (d webdavDriver) Guards(name string) bool   { return driver.Guarded(name) }

func (d webdavDriver) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	url := driver.RecordURL(d.endpoint, k.Key)
	return []driver.Step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: record.ConditionalPut(url, k.Body),
		Judge: func(a driver.Answer) driver.Verdict {
			v := judgeWrite(url, a)
			switch {
			case a.Err == nil && a.Status == http.StatusPreconditionFailed:
				return driver.Verdict{Class: driver.Exists}
			case v.Class == driver.Created && a.Status != http.StatusCreated:
				v.Warn = record.IgnoredConditionWarning
			}
			return v
		},
		Fallback: credential.Strip(url),
	}}, nil
}

// judgeWrite is what an answer to a PUT at url means but for its 412,
// which the create and the update read differently.
func judgeWrite(url string, a driver.Answer) driver.Verdict {
	if a.Err == nil && a.Status == http.StatusConflict {
		return driver.Verdict{Class: driver.Stop, Problem: "the collection " + parentCollection(url) + " does not exist"}
	}
	v := driver.Verdict{Class: driver.Classify(a)}
	if v.Class == driver.Created {
		v.Tag = strongTag(a.Header)
	}
	return v
}

// parentCollection is the URL of the collection a record URL is in.
func parentCollection(record string) string {
	dir, _, _ := strings.Cut(record, "?")
	return driver.RedactURL(dir[:strings.LastIndex(dir, "/")+1])
}

// ProbeRemoval removes a probe record (driver.Prober).
func (d webdavDriver) ProbeRemoval(created driver.Answer) (driver.Request, error) {
	return record.Delete(created)
}

// The driver is a [driver.Updater] for plain payloads: the record of an
// object is {Endpoint}/{object key}, its bytes the payload, and an update
// is a PUT with If-Match on the resource's ETag. Datasets are out of scope:
// under WebDAV only a dataset's document is stored, and its update is not
// covered.
//
// Apache mod_dav names no ETag in its answer to a PUT, so the engine reads
// the resource before each update; and for a second after a write it gives
// the resource a weak ETag, which If-Match, compared strongly, never
// matches: such a read is retried until the ETag is strong. nginx's dav
// module ignores If-Match, so there an update is not conditional; the
// driver cannot tell the servers apart. See docs/targets/webdav.md.

var errNoObject = errors.New("webdav: an update or read of an object needs its object key")

// Update replaces the object's resource on the condition that it is still
// the version tagged tag: PUT with If-Match.
func (d webdavDriver) Update(k canonical.Keyed, tag string) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errNoObject
	}
	h := http.Header{}
	h.Set("If-Match", tag)
	h.Set("Content-Type", "application/json")
	return driver.Request{Method: http.MethodPut, URL: driver.RecordURL(d.endpoint, k.Object), Header: h, Body: k.Body}, nil
}

// JudgeUpdate classifies an answer to Update: a 412 is another version on
// the server (or none: Apache answers 412 to If-Match on a missing
// resource, RFC 9110 section 13.1.1), a 423 a lock another client holds.
func (webdavDriver) JudgeUpdate(a driver.Answer) driver.Verdict {
	if a.Err == nil {
		switch a.Status {
		case http.StatusPreconditionFailed:
			return driver.Verdict{Class: driver.Conflict}
		case http.StatusNotFound:
			return driver.Verdict{Class: driver.Terminal, Problem: "the record is gone"}
		case http.StatusLocked:
			return driver.Verdict{Class: driver.Retry}
		case http.StatusCreated:
			// If-Match on a resource that does not exist is false (RFC
			// 9110 section 13.1.1): a server that created one ignored it.
			return driver.Verdict{Class: driver.Created, Tag: strongTag(a.Header), Warn: ignoredIfMatchWarning}
		}
	}
	return judgeWrite(a.URL, a)
}

const ignoredIfMatchWarning = "the server answered a conditional update by creating the record: it ignores If-Match, and then cannot refuse to overwrite another writer's change"

// ReadObject reads the object's resource: GET, past any cache.
func (d webdavDriver) ReadObject(k canonical.Keyed) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errNoObject
	}
	h := http.Header{}
	h.Set("Accept", "application/json")
	h.Set("Cache-Control", "no-cache")
	return driver.Request{Method: http.MethodGet, URL: driver.RecordURL(d.endpoint, k.Object), Header: h, Full: true}, nil
}

// JudgeRead reads the answer to ReadObject. A weak ETag given within a
// second of the resource's Last-Modified is Apache's for a file written in
// that second (it compares its current ETag strongly, so If-Match fails
// until the second has passed): the read is retried. A weak ETag that
// stays weak, or none, is no condition an update can be sent on: the
// record is present with no tag.
func (webdavDriver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	if a.Err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	switch a.Status {
	case http.StatusOK:
		if isWeak(a.Header.Get("ETag")) && justWritten(a.Header) {
			return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Retry,
				Problem: "the server's ETag of the record is weak: it was written within the last second"}
		}
		return driver.ObjectState{Body: a.Body, Tag: strongTag(a.Header)}, driver.Finding{Kind: driver.Present, ID: credential.Strip(a.URL)}
	case http.StatusNotFound:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	}
	return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
}

// strongTag is an answer's ETag when it is strong, else "": If-Match uses
// the strong comparison (RFC 9110 section 13.1.1), which a weak tag never
// passes.
func strongTag(h http.Header) string {
	if tag := h.Get("ETag"); strings.HasPrefix(tag, `"`) {
		return tag
	}
	return ""
}

func isWeak(tag string) bool { return strings.HasPrefix(tag, "W/") }

// justWritten reports whether an answer's Last-Modified is within a second
// of its Date: Apache marks an ETag weak when the file's mtime is less
// than a second before the request (ap_make_etag_ex in apache/httpd
// modules/http/http_etag.c), and dates it with the request's time.
func justWritten(h http.Header) bool {
	date, err := http.ParseTime(h.Get("Date"))
	if err != nil {
		return false
	}
	modified, err := http.ParseTime(h.Get("Last-Modified"))
	return err == nil && date.Sub(modified) <= time.Second
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var (
	_ driver.Prober  = webdavDriver{}
	_ driver.Updater = webdavDriver{}
)
