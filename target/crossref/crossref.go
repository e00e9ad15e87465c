// Package crossref provides a deposit target for Crossref's deposit system:
// each work's DOI is registered once, with the version its file carries,
// and a queued deposit is polled, never sent again.
//
// A payload is one work: {"doi":D,"xml":X}, or {"doi":D,"xml_file":P} with
// P a path in [Target.Dir]; X is a complete deposit XML (doi_batch) with
// exactly one doi_data, whose doi is D. Its key covers the line with the
// XML inline and the content of its first doi_batch_id and timestamp
// elements removed, so that a file regenerated with a new clock and batch
// id is the same deposit. The payload first uploaded, with the file's own
// timestamp and a file name of its own, is kept with the deposit's intent
// before the upload (driver.Step.KeepBody), and every retry and re-run
// uploads those bytes under that file name: deposit never stamps a clock
// of its own, which could roll back a newer deposit made elsewhere.
//
// An upload (POST {Endpoint}, operation=doMDUpload) only queues the file.
// The step is accepted and polled by file name at the submission download
// (GET .../submissionDownload?type=result): queued and in_process are
// pending; unknown_submission is trusted only Settle after an upload;
// completed carries the DOI's result. Success is done; a Warning "Added
// with conflict" is done, and the DOIs in conflict are logged; a Failure
// "... is less or equal to previously submitted version" is looked up at
// the XML query API: done when the registered deposit-timestamp is ours,
// failed as superseded by a newer deposit when it is greater; any other
// Failure is failed with Crossref's message.
//
// A store that is lost is safe by construction: the re-run uploads the
// same timestamp again, which Crossref refuses as not newer, and the query
// tells an equal registered timestamp (done) from a greater one (failed,
// superseded). The re-upload has a file name of its own: Crossref answers
// a download by file name with the first upload of that name, which would
// be the lost store's, and its success is not this upload's result.
package crossref

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// Protocol is the target's protocol name, as store names begin.
const Protocol = "crossref"

// DefaultEndpoint is Crossref's test system: deposits there register
// nothing real.
const DefaultEndpoint = "https://test.crossref.org/servlet/deposit"

// DefaultSettle is the default [Target.Settle].
const DefaultSettle = 5 * time.Minute

// Target is a Crossref deposit endpoint and the login that deposits to it.
// The zero value deposits to [DefaultEndpoint] without credentials, which
// Crossref refuses; a Target is a value, safe to copy and to share.
type Target struct {
	// Endpoint is the deposit servlet (https://doi.crossref.org/servlet/deposit
	// for real DOIs); "" is DefaultEndpoint. The result download is the
	// submissionDownload servlet beside it.
	Endpoint string
	// QueryEndpoint is the XML query servlet; "" is the query servlet
	// beside Endpoint.
	QueryEndpoint string
	// Login and Password are the Crossref login (a role, or "user/role"
	// for personal credentials). The password goes in the deposit's form
	// and the download's and query's parameters only: it is never part of
	// a store name, an identifier, an error or a log.
	Login, Password string
	// Dir is the folder that xml_file paths are relative to; "" is the
	// working directory. A path that leads out of it is refused.
	Dir string
	// Settle is how long after an upload the download may still answer
	// unknown_submission for it (Crossref does, for a while): only a look
	// that long after an uncertain upload trusts it, counted for an upload
	// of an earlier run from when its intent was recorded
	// (driver.Check.SettleFromIntent): an upload sent again early is
	// refused by the timestamp rule. 0 is DefaultSettle.
	Settle time.Duration
	// Poll is how long one run polls a queued deposit before leaving it
	// unresolved, "queued at Crossref", for the next run to poll; 0 is the
	// client's retry policy's MaxElapsed.
	Poll time.Duration
}

// Driver checks the target and returns its driver.
func (t Target) Driver() (driver.Driver, error) {
	d := crossrefDriver{t: t}
	var err error
	if d.deposit, err = endpoint("Endpoint", cmpOr(t.Endpoint, DefaultEndpoint)); err != nil {
		return nil, err
	}
	if !strings.HasSuffix(d.deposit, "/deposit") {
		return nil, fmt.Errorf("crossref: Endpoint %q: want the deposit servlet, a URL ending in /servlet/deposit", d.deposit)
	}
	d.download = sibling(d.deposit, "submissionDownload")
	if d.query, err = endpoint("QueryEndpoint", cmpOr(t.QueryEndpoint, sibling(d.deposit, "query"))); err != nil {
		return nil, err
	}
	if t.Settle < 0 || t.Poll < 0 {
		return nil, errors.New("crossref: Settle and Poll must not be negative")
	}
	if d.t.Settle == 0 {
		d.t.Settle = DefaultSettle
	}
	return d, nil
}

func cmpOr(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// crossrefDriver is a checked Target.
type crossrefDriver struct {
	t                        Target
	deposit, download, query string // normalised URLs
}

func (d crossrefDriver) Name() string              { return driver.TargetName(Protocol, d.deposit) }
func (d crossrefDriver) StepTargets() []string     { return []string{d.updateTarget()} }
func (d crossrefDriver) SecretFingerprint() string { return "" }
func (d crossrefDriver) Guards(string) bool        { return false }

// Payload reads a line as one work: the body is the line with its XML
// inline and the part of its upload's file name drawn for it
// ({"doi","xml","upload"}), the key text the line with its XML inline and
// the XML's batch id and timestamp removed (see keyedXML).
func (d crossrefDriver) Payload(text []byte) (body, keyText []byte, err error) {
	l, err := parseLine(text)
	if err != nil {
		return nil, nil, err
	}
	x, err := readXML(l, d.t.Dir)
	if err != nil {
		return nil, nil, err
	}
	w, err := checkWork(l.DOI, x)
	if err != nil {
		return nil, nil, err
	}
	p := payload{DOI: l.DOI, XML: x, Upload: cmpOr(l.Upload, drawUpload()), Object: objectDOI(l.DOI), Timestamp: strconv.FormatUint(w.Timestamp, 10)}
	if body, err = json.Marshal(p); err != nil {
		return nil, nil, err
	}
	keyText, err = json.Marshal(line{DOI: l.DOI, XML: keyedXML(x)}) // the added members left out
	return body, keyText, err
}

// Steps is one step: the upload, accepted and polled by file name.
func (d crossrefDriver) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	if dir != "" {
		return nil, errors.New("crossref: a line is one work, not a dataset: leave out --datasets")
	}
	var p payload
	if err := json.Unmarshal(k.Body, &p); err != nil || p.XML == "" {
		return nil, errors.New("crossref: the payload's XML was not read: give the payload to the client, which reads it (driver.Payloader)")
	}
	w, err := checkWork(p.DOI, p.XML)
	if err != nil {
		return nil, err
	}
	return []driver.Step{d.uploadStep(d.Name(), k.Key, w, p.Upload)}, nil
}

// uploadStep is the upload of work w under the store row (target, key),
// accepted and polled by file name: a work's first deposit and each later
// version's are the same request.
func (d crossrefDriver) uploadStep(target, key string, w work, drawn string) driver.Step {
	up := upload{d: d, w: w, key: key, fileName: fileName(key, w.Timestamp, drawn)}
	return driver.Step{
		Target: target, Key: key, Primary: true, Durable: true, KeepBody: true, Accepts: true,
		Build: up.build, Judge: judgeUpload,
		Check: &driver.Check{Build: up.result, Judge: up.judgeResult, Settle: d.t.Settle, Poll: d.t.Poll, SettleFromIntent: true},
	}
}

// payload is a work as its steps receive it (Keyed.Body): the line with
// its XML inline, and Upload, the part of the upload's file name drawn for
// this deposit when the line was read. The intent keeps it with the rest
// (Step.KeepBody), so every attempt of one intent uploads under one name.
// A body an older deposit kept has none.
//
// Object and Timestamp name the work's object and order its versions
// (Identity): the DOI in lower case, for DOIs are case-insensitive, and
// the file's timestamp, as a string (it has more digits than a JSON
// number keeps exactly). A body an older deposit kept has neither.
type payload struct {
	DOI       string `json:"doi"`
	XML       string `json:"xml"`
	Upload    string `json:"upload,omitempty"`
	Object    string `json:"object,omitempty"`
	Timestamp string `json:"timestamp,omitempty"`
}

// drawUpload draws a payload's Upload: 64 random bits, in hex.
func drawUpload() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// fileName is the upload's file name, unique to the key (the work without
// its clock), the version (its timestamp) and the intent that keeps it
// (drawn, its random part): Crossref answers a result download by file
// name with the first upload of that name ("only the first match is
// returned", https://support.crossref.org/hc/en-us/articles/217515926), so
// one name must never carry two versions, nor two intents' uploads: after
// a lost store, the same file uploaded under the first name would be
// answered by the first upload's log, not its own. drawn "" (a body kept
// by an older deposit) is the name that deposit used.
func fileName(key string, timestamp uint64, drawn string) string {
	name := "deposit-" + key[:32] + "-" + strconv.FormatUint(timestamp, 10)
	if drawn != "" {
		name += "-" + drawn
	}
	return name + ".xml"
}

// boundary is the multipart boundary of an upload: derived from the file
// name, so that every attempt sends the same bytes.
func boundary(name string) string {
	sum := sha256.Sum256([]byte("crossref multipart " + name))
	return "deposit-" + hex.EncodeToString(sum[:16])
}
