package crossref

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// A Crossref work is an object of its own, without a client identity
// (driver.Identified): its DOI names it, and its deposits are its
// versions, ordered by the file's <timestamp>, which Crossref compares
// itself: a deposit whose timestamp is not greater than the registered
// one is refused ("less or equal to previously submitted version"), and
// a greater one replaces the record (it is the DOI's update). So the
// first deposit and every later version are one request, the upload; the
// engine reads the DOI's registered timestamp at the XML query API
// before each (driver.ReadBeforeCreate):
//
//   - this file's timestamp registered is this version (existing, or the
//     update of an earlier attempt that took effect);
//   - a greater one makes this file stale, and nothing is sent;
//   - a smaller one (or none) is followed by the upload, reported
//     updated when the DOI was registered already.
//
// A file the timestamp rule refuses anyway (another tool deposited a
// newer one between the read and the upload) is read again and reported
// stale. A content key covers the work without its timestamp and batch
// id (keyedXML), so the same file regenerated is replayed.

// Identity names a work's object by its DOI in lower case and orders its
// versions by its file's timestamp (both in the body Payload builds).
func (crossrefDriver) Identity() (pointers []string, version string) {
	return []string{"/object"}, "/timestamp"
}

// ReadsBeforeCreate: a deposit to a registered DOI is its next version.
func (crossrefDriver) ReadsBeforeCreate() bool { return true }

// objectDOI is the DOI that names a work's object: DOIs are
// case-insensitive, and Crossref matches them so ("DOIs are not case
// sensitive", https://www.crossref.org/documentation/member-setup/constructing-your-dois/).
func objectDOI(doi string) string { return strings.ToLower(doi) }

// updateTarget is the store target of the uploads of a work's later
// versions, one row per application (driver.ObjectUpdate.Key).
func (d crossrefDriver) updateTarget() string {
	return driver.StepTarget(d.Name(), "update")
}

// UpdateSteps is the upload of k's file, as a first deposit's, under a
// row of the update's own.
func (d crossrefDriver) UpdateSteps(k canonical.Keyed, u driver.ObjectUpdate) ([]driver.Step, error) {
	p, w, err := workOf(k)
	if err != nil {
		return nil, err
	}
	return []driver.Step{d.uploadStep(d.updateTarget(), u.Key, w, p.Upload)}, nil
}

// workOf reads the work of a payload's body.
func workOf(k canonical.Keyed) (payload, work, error) {
	var p payload
	if err := json.Unmarshal(k.Body, &p); err != nil || p.XML == "" {
		return p, work{}, errors.New("crossref: the payload's XML was not read: give the payload to the client, which reads it (driver.Payloader)")
	}
	w, err := checkWork(p.DOI, p.XML)
	return p, w, err
}

// ReadObject is the DOI's record at the XML query API, whose
// deposit-timestamp is the version registered.
func (d crossrefDriver) ReadObject(k canonical.Keyed) (driver.Request, error) {
	_, w, err := workOf(k)
	if err != nil {
		return driver.Request{}, err
	}
	return upload{d: d, w: w}.lookup(nil)
}

// JudgeRead: a resolved query with a deposit-timestamp is Present, its
// order that timestamp; an unresolved one is Absent (no DOI registered);
// a login page stops the run; anything else settles nothing.
func (crossrefDriver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	q, f := readQuery(a)
	if f != nil {
		return driver.ObjectState{}, *f
	}
	if q.Status == "unresolved" {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	}
	ts, ok := q.timestamp()
	if q.Status != "resolved" || !ok {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous,
			Problem: "the XML query answer names no deposit-timestamp for " + q.DOI}
	}
	return driver.ObjectState{Order: strconv.FormatUint(ts, 10)}, driver.Finding{Kind: driver.Present, ID: strings.TrimSpace(q.DOI)}
}

// crQuery is one query of a crossref_result.
type crQuery struct {
	Status string `xml:"status,attr"`
	DOI    string `xml:"doi"`
	Items  []struct {
		Name  string `xml:"name,attr"`
		Value string `xml:",chardata"`
	} `xml:"crm-item"`
}

// timestamp is the query's deposit-timestamp.
func (q crQuery) timestamp() (uint64, bool) {
	for _, it := range q.Items {
		if it.Name == "deposit-timestamp" {
			n, err := strconv.ParseUint(strings.TrimSpace(it.Value), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readQuery reads the first query of an XML query answer, or the finding
// of an answer that is not one.
func readQuery(a driver.Answer) (crQuery, *driver.Finding) {
	if a.Err != nil || a.Status != http.StatusOK {
		return crQuery{}, &driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	if root, _ := rootOf(a.Body); root != "crossref_result" {
		f := notTheAnswer("the XML query answer", "crossref_result", a.Body)
		return crQuery{}, &f
	}
	var r struct {
		Query []crQuery `xml:"query_result>body>query"`
	}
	if err := xml.Unmarshal(a.Body, &r); err != nil || len(r.Query) == 0 {
		return crQuery{}, &driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the XML query answer is not a crossref_result: " + snippet(a.Body)}
	}
	return r.Query[0], nil
}

// The driver's optional capabilities, checked when the package compiles.
var (
	_ driver.Payloader        = crossrefDriver{}
	_ driver.StepUpdater      = crossrefDriver{}
	_ driver.ReadBeforeCreate = crossrefDriver{}
	_ driver.Identified       = crossrefDriver{}
)
