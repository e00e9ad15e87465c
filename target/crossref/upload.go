package crossref

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/driver"
)

// upload is one work's upload and the looks that settle it.
type upload struct {
	d        crossrefDriver
	w        work
	key      string
	fileName string
}

// build is the deposit: a multipart form with operation=doMDUpload, the
// login, and the XML as the file part fname. Its bytes depend only on the
// work, the login and the file name.
func (u upload) build([]string) (driver.Request, error) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if err := mw.SetBoundary(boundary(u.fileName)); err != nil {
		return driver.Request{}, err
	}
	for _, f := range [][2]string{{"operation", "doMDUpload"}, {"login_id", u.d.t.Login}, {"login_passwd", u.d.t.Password}} {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			return driver.Request{}, err
		}
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="fname"; filename="`+u.fileName+`"`)
	h.Set("Content-Type", "application/xml")
	part, err := mw.CreatePart(h)
	if err != nil {
		return driver.Request{}, err
	}
	if _, err := part.Write([]byte(u.w.XML)); err != nil {
		return driver.Request{}, err
	}
	if err := mw.Close(); err != nil {
		return driver.Request{}, err
	}
	hd := http.Header{}
	hd.Set("Content-Type", mw.FormDataContentType())
	return driver.Request{Method: http.MethodPost, URL: u.d.deposit, Header: hd, Body: b.Bytes(), Full: true}, nil
}

// judgeUpload reads the deposit's answer: a 200 page saying the batch was
// "successfully received" means queued, no more (CDLUC3/ezid's
// proc-crossref.py tests for that sentence); a 200 page that asks for a
// password is the login page, the answer to a wrong login, which stops
// the run as a 401 does (nothing was queued); any other 200 confirms
// nothing. Other statuses are the shared table's.
func judgeUpload(a driver.Answer) driver.Verdict {
	if a.Err != nil || a.Status != http.StatusOK {
		return driver.Verdict{Class: driver.Classify(a)}
	}
	if bytes.Contains(a.Body, []byte("SUCCESS")) && bytes.Contains(bytes.ToLower(a.Body), []byte("successfully received")) {
		return driver.Verdict{Class: driver.Accepted}
	}
	if passwordField.Match(a.Body) {
		return driver.Verdict{Class: driver.Stop, Problem: "Crossref answered with " + loginPage}
	}
	return driver.Verdict{Class: driver.Ambiguous, Problem: "Crossref answered 200 without saying the batch was received: " + snippet(a.Body)}
}

// passwordField matches an HTML form's password input: a page with one is
// a login page.
var passwordField = regexp.MustCompile(`(?i)<input\b[^>]*\btype\s*=\s*["']?password\b`)

// loginPage is what a login page is.
const loginPage = "its login page, its answer to a wrong login or password"

// rootOf reads the name of body's root element, as far as it goes: ok is
// false when the body ends, or stops being markup, before any element
// (a body cut short: look again); name is "" for a body of text.
// HTML is read leniently, so that a login page is named by its root.
func rootOf(body []byte) (name string, ok bool) {
	dec := xml.NewDecoder(bytes.NewReader(body))
	dec.Strict, dec.AutoClose, dec.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	dec.CharsetReader = func(_ string, r io.Reader) (io.Reader, error) { return r, nil }
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch t := tok.(type) {
		case xml.StartElement:
			return t.Name.Local, true
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return "", true
			}
		}
	}
}

// notTheAnswer judges an answer of status 200 whose root is not want: a
// login page (HTML, or any document other than want) stops the run, as a
// 401 does, for it concerns every item; one cut short before its root is
// looked at again.
func notTheAnswer(what, want string, body []byte) driver.Finding {
	root, ok := rootOf(body)
	if !ok {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: what + " is not a " + want + ": " + snippet(body)}
	}
	got := "text"
	if root != "" {
		got = "<" + root + ">"
	}
	return driver.Finding{Kind: driver.Unknown, Class: driver.Stop, Problem: fmt.Sprintf("%s is %s, not a %s: taken for Crossref's %s", what, got, want, strings.TrimPrefix(loginPage, "its "))}
}

// result looks up the upload's result by its file name.
func (u upload) result([]string) (driver.Request, error) {
	q := url.Values{"usr": {u.d.t.Login}, "pwd": {u.d.t.Password}, "file_name": {u.fileName}, "type": {"result"}}
	return driver.Request{Method: http.MethodGet, URL: u.d.download + "?" + q.Encode(), Full: true}, nil
}

// diagnostic is the result download's document.
type diagnostic struct {
	Status  string `xml:"status,attr"`
	Records []struct {
		Status     string   `xml:"status,attr"`
		DOI        string   `xml:"doi"`
		Msg        string   `xml:"msg"`
		ConflictID string   `xml:"conflict_id"`
		InConflict []string `xml:"dois_in_conflict>doi"`
	} `xml:"record_diagnostic"`
}

// staleVersion begins the Failure Crossref gives a timestamp not greater
// than the registered one; logs end it with "(DOI match)" or the stored
// number, so only the prefix is matched.
const staleVersion = "Record not processed because submitted version"

// judgeResult reads the result download: queued and in process are
// pending, unknown_submission absent, completed carries this DOI's result.
func (u upload) judgeResult(a driver.Answer) driver.Finding {
	if a.Err != nil || a.Status != http.StatusOK {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	if root, _ := rootOf(a.Body); root != "doi_batch_diagnostic" {
		return notTheAnswer("the result download", "doi_batch_diagnostic", a.Body)
	}
	var d diagnostic
	if err := xml.Unmarshal(a.Body, &d); err != nil {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the result download is not a doi_batch_diagnostic: " + snippet(a.Body)}
	}
	switch d.Status {
	case "unknown_submission":
		return driver.Finding{Kind: driver.Absent}
	case "completed":
	default: // queued, in_process, and any state Crossref may add
		return driver.Finding{Kind: driver.Pending, Problem: "queued at Crossref (" + d.Status + ")"}
	}
	for _, r := range d.Records {
		doi := strings.TrimSpace(r.DOI)
		msg := strings.TrimSpace(r.Msg)
		switch {
		case doi == "" && r.Status == "Failure":
			return driver.Finding{Kind: driver.Foreign, Problem: "Crossref refused the deposit XML of " + u.w.DOI + ": " + msg}
		case !strings.EqualFold(doi, u.w.DOI):
			continue
		case r.Status == "Success":
			return driver.Finding{Kind: driver.Present, ID: u.w.DOI}
		case r.Status == "Warning" && strings.Contains(msg, "with conflict"):
			return driver.Finding{Kind: driver.Present, ID: u.w.DOI, Warn: fmt.Sprintf(
				"crossref: %s: %s (conflict_id %s), in conflict with %s", u.w.DOI, msg, r.ConflictID, strings.Join(r.InConflict, ", "))}
		case r.Status == "Failure" && strings.HasPrefix(msg, staleVersion):
			return driver.Finding{Kind: driver.Absent, Then: &driver.Check{Build: u.lookup, Judge: u.judgeLookup}}
		default:
			return driver.Finding{Kind: driver.Foreign, Problem: "Crossref: " + r.Status + " for " + u.w.DOI + ": " + msg}
		}
	}
	return driver.Finding{Kind: driver.Foreign, Problem: "Crossref's result for " + u.fileName + " names no record of " + u.w.DOI}
}

// lookup reads the DOI's record at the XML query API.
func (u upload) lookup([]string) (driver.Request, error) {
	q := url.Values{"pid": {u.d.t.Login + ":" + u.d.t.Password}, "format": {"unixsd"}, "id": {u.w.DOI}}
	return driver.Request{Method: http.MethodGet, URL: u.d.query + "?" + q.Encode(), Full: true}, nil
}

// judgeLookup compares the registered deposit-timestamp with ours, after
// Crossref refused ours as not newer: equal is our version registered (by
// an earlier upload of the same bytes, a store lost meanwhile); greater is
// a newer deposit made since, which this one must not roll back (the
// engine reads the DOI again and reports the file stale).
func (u upload) judgeLookup(a driver.Answer) driver.Finding {
	q, f := readQuery(a)
	if f != nil {
		return *f
	}
	n, ok := q.timestamp()
	if q.Status != "resolved" || !ok {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: fmt.Sprintf(
			"Crossref refused %s's timestamp %d as not newer, and its query shows no deposit-timestamp", u.w.DOI, u.w.Timestamp)}
	}
	switch {
	case n == u.w.Timestamp:
		return driver.Finding{Kind: driver.Present, ID: u.w.DOI}
	case n > u.w.Timestamp:
		return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
			"superseded by a newer deposit: Crossref refused this file by its timestamp rule, as not newer than the version it holds: %s is registered with timestamp %d, this file's is %d; not sent again",
			u.w.DOI, n, u.w.Timestamp)}
	default:
		return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
			"Crossref refused %s's timestamp %d as not newer, yet shows %d registered", u.w.DOI, u.w.Timestamp, n)}
	}
}

// snippet is the start of a body, on one line, for an error.
func snippet(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return strconv.Quote(s)
}
