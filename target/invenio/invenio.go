// Package invenio provides the invenio target: an InvenioRDM repository
// (Zenodo, its sandbox, institutional instances) through its REST API. It
// dedups nothing, so each deposit is guarded step by step, and a lost
// store is recovered by scanning the account's records for the markers
// the deposits carry (driver.Seeder).
package invenio

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
)

// Target is an InvenioRDM repository through its REST API: Zenodo, its
// sandbox, and institutional instances. InvenioRDM dedups nothing (every
// POST /records makes a new draft), so a deposit is guarded step by step:
//
//  1. The draft: POST {Endpoint}/records with the payload and a marker, an
//     alternate identifier {"scheme":"urn","identifier":Marker(key)}
//     appended to metadata.identifiers. Its id is durable in the store
//     before the next request. After an ambiguous answer the client
//     searches the user's own records and drafts (GET
//     {Endpoint}/user/records?q=metadata.identifiers.identifier:"MARKER")
//     before it ever creates again, and trusts a miss only after
//     SettleTime. Two records with one marker are a conflict, reported and
//     never resolved by picking one.
//  2. With a dataset, for each file P: start the upload (POST
//     .../draft/files [{"key":P}]), send the bytes (PUT
//     .../draft/files/P/content), commit (POST .../draft/files/P/commit),
//     each step durable. After an interruption the file's entry is read
//     (GET .../draft/files/P): committed with the MD5 of the bytes keyed is
//     done; a pending one gets its bytes again. A committed file with other
//     bytes, or a commit whose checksum differs from the keyed bytes (the
//     file changed since), fails the deposit.
//  3. Unless NoPublish: POST .../draft/actions/publish (202). After an
//     ambiguous answer (a 504 from a proxy while the publish goes on) the
//     record is read (GET {Endpoint}/records/{id}) before it is sent again.
//
// The identifier is the DOI the record was published with (its record id
// when the instance mints none, or under NoPublish); Result.RecordID is the
// record id. When the store has no record of having scanned the endpoint
// (a new store, a lost one, or one written before this was kept), the
// first deposit the store knows nothing of waits SettleTime, then scans the
// user's records and drafts once, every version, paged, and the store keeps
// every record found with a marker together with a "scanned" mark, in one
// transaction; each deposit it knows nothing of then takes its rows from
// what was found with its marker, so every batch and shard run again after
// its store was lost creates nothing new. InvenioRDM's search answers the
// first 10,000 hits only: an account holding more stops the run
// (ErrStopRun) before anything is created. A draft that carries another
// deposit's marker is never adopted. A draft created after a search had
// found nothing is searched for again by the next run, which reports a
// duplicate the index lag hid.
//
// A payload may carry the reserved member "deposit", part of its key and
// removed before it is sent: {"new_version_of":ID} makes the deposit a new
// version of the published record ID (the latest version resolved through
// GET .../versions/latest, the draft POST .../versions opens re-marked with
// this deposit's marker in place of the inherited one, the previous files
// imported unless the deposit has files of its own, then the publish); new
// versions naming one ID run one at a time (driver.Serializer).
// {"community":ID} submits the record to that community for review
// instead of publishing it (PUT .../draft/review, then the accepted step
// POST .../draft/actions/submit-review), done once the request is
// submitted; its identifier is the record id.
//
// The payload is the draft's body ({"metadata":{...},"access":{...},...})
// or, when it has no member "metadata", the metadata object alone. The
// client sets files.enabled (true exactly when the dataset has files) and
// adds the marker; a payload that disagrees is invalid. Credentials go in
// Config.Header: "Authorization: Bearer <token>".
type Target struct {
	// Endpoint is the API root, such as https://zenodo.org/api. Required.
	Endpoint string
	// KeySecret, when set, makes the marker an HMAC-SHA256 of the content
	// key under it, so the public marker does not reveal which content a
	// record holds to someone who can guess the content.
	KeySecret []byte
	// NoPublish stops at drafts: the deposit is done once its draft and
	// files are. A later run without NoPublish publishes them.
	NoPublish bool
	// SettleTime is how long a search must have had to show a draft before
	// "not found" is trusted; default SettleTime.
	SettleTime time.Duration
	// MaxFiles is the most files a record may have; a dataset with more is
	// invalid before any request. Default MaxFiles.
	MaxFiles int
	// SearchRate limits searches per second, on a budget of their own,
	// within Config.Rate; default SearchRate, negative unlimited.
	SearchRate float64
	// OnChange is what a changed object (the client's Config.Identity)
	// becomes: OnChangeEdit ("", the default) edits the published record
	// in place, OnChangeVersion makes a new version of it (see object.go).
	OnChange string
}

// InvenioRDM defaults.
const (
	// Rate is the default Config.Rate under Invenio, in requests per
	// second: 90 a minute, inside Zenodo's 100 per minute (and 5,000 per
	// hour) for an authenticated user.
	Rate = 1.5
	// SearchRate is the default Target.SearchRate: 27 a minute,
	// inside Zenodo's 30 per minute for search.
	SearchRate = 0.45
	// SettleTime is the default Target.SettleTime. InvenioRDM
	// indexes a draft when its request commits but does not refresh the
	// search index for creates, updates or publishes (only for deleting a
	// draft), so a draft shows in search at the index's next periodic
	// refresh: every second by default in OpenSearch and Elasticsearch.
	// Five refresh intervals leave room for a loaded cluster.
	SettleTime = 5 * time.Second
	// MaxFiles is the default Target.MaxFiles: InvenioRDM's
	// RDM_RECORDS_MAX_FILES_COUNT, Zenodo's 100 files per record.
	MaxFiles = 100
)

// invenioMarkerPrefix starts every marker; the rest names how it was made.
const invenioMarkerPrefix = "urn:deposit:"

// Marker returns the marker a deposit with key (lowercase hex
// SHA-256) carries as an alternate identifier: "urn:deposit:sha256:" + key,
// or with a key secret "urn:deposit:hmac-sha256:" + the lowercase hex
// HMAC-SHA256 of the key under the secret. The scheme is URN because every
// InvenioRDM instance accepts it (its validator checks only the URN syntax)
// and DataCite exports it as such; alternate identifiers are public once a
// record is published.
func Marker(key string, secret []byte) string {
	if len(secret) == 0 {
		return invenioMarkerPrefix + "sha256:" + key
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(key))
	return invenioMarkerPrefix + "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

type invenioDriver struct {
	endpoint   string
	secret     []byte
	publish    bool
	settle     time.Duration
	maxFiles   int
	searchRate float64
	version    bool // a changed object is a new version, not an edit
}

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("invenio.Target.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	if t.SettleTime < 0 || t.MaxFiles < 0 {
		return nil, errors.New("invenio.Target.SettleTime and invenio.Target.MaxFiles must not be negative")
	}
	if t.OnChange != "" && t.OnChange != OnChangeEdit && t.OnChange != OnChangeVersion {
		return nil, fmt.Errorf("invenio.Target.OnChange is %q: want %q or %q", t.OnChange, OnChangeEdit, OnChangeVersion)
	}
	d := invenioDriver{endpoint: ep, secret: append([]byte(nil), t.KeySecret...), publish: !t.NoPublish,
		settle: t.SettleTime, maxFiles: t.MaxFiles, searchRate: t.SearchRate, version: t.OnChange == OnChangeVersion}
	if d.settle == 0 {
		d.settle = SettleTime
	}
	if d.maxFiles == 0 {
		d.maxFiles = MaxFiles
	}
	if d.searchRate == 0 {
		d.searchRate = SearchRate
	}
	return d, nil
}

// The store targets: the published deposit, its draft, its files, and the
// drafts to look for again, each named by driver.TargetName so that a token in
// the endpoint's query is not stored.
func (d invenioDriver) publishTarget() string { return driver.TargetName(protocol.Invenio, d.endpoint) }
func (d invenioDriver) draftTarget() string {
	return driver.TargetName(protocol.Invenio+"-draft", d.endpoint)
}
func (d invenioDriver) fileTarget() string {
	return driver.TargetName(protocol.Invenio+"-file", d.endpoint)
}
func (d invenioDriver) recheckTarget() string {
	return driver.TargetName(protocol.Invenio+protocol.RecheckSuffix, d.endpoint)
}

// scanTarget names the scan of the user's records (dedup's scan tables),
// one per endpoint whatever the steps.
func (d invenioDriver) ScanTarget() string {
	return driver.TargetName(protocol.Invenio+"-scan", d.endpoint)
}

// Name is the primary step's target: the publish, or under NoPublish the
// draft, so that a later run that publishes finds its drafts done.
func (d invenioDriver) Name() string {
	if d.publish {
		return d.publishTarget()
	}
	return d.draftTarget()
}

func (d invenioDriver) StepTargets() []string {
	t := []string{d.fileTarget(), d.recheckTarget(), d.markTarget(), d.reviewTarget(), d.editTarget(), d.updateTarget()}
	if d.publish {
		t = append(t, d.draftTarget())
	}
	return t
}

func (d invenioDriver) SecretFingerprint() string { return driver.SecretFingerprint(d.secret) }
func (d invenioDriver) Guards(name string) bool   { return driver.Guarded(name) }
func (d invenioDriver) DefaultRate() float64      { return Rate }
func (d invenioDriver) WantsFileMD5() bool        { return true }

func (d invenioDriver) WrapTransport(next http.RoundTripper) http.RoundTripper {
	return &invenioTransport{next: next}
}

// pacer holds searches to SearchRate, on a budget of their own.
func (d invenioDriver) Pacer() func(*http.Request) *backoff.Limiter {
	search := backoff.NewLimiter(max(d.searchRate, 0))
	return func(req *http.Request) *backoff.Limiter {
		if strings.HasSuffix(req.URL.Path, "/user/records") {
			return search
		}
		return nil
	}
}

// url is {endpoint}/{path}, the endpoint's query kept.
func (d invenioDriver) url(path string, query url.Values) string {
	base, q, found := strings.Cut(d.endpoint, "?")
	u := base + "/" + path
	extra := query.Encode()
	switch {
	case found && extra != "":
		u += "?" + q + "&" + extra
	case found:
		u += "?" + q
	case extra != "":
		u += "?" + extra
	}
	return u
}

// fileURL is the URL of file key of draft id, with a suffix ("/content",
// "/commit", or ""). Keys may hold "/": each segment is escaped apart.
func (d invenioDriver) fileURL(id, key, suffix string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return d.url("records/"+url.PathEscape(id)+"/draft/files/"+strings.Join(parts, "/")+suffix, nil)
}

func (d invenioDriver) Marker(k canonical.Keyed) string { return Marker(k.Key, d.secret) }

// Steps are the draft, three per file, and the publish.
func (d invenioDriver) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	steps, _, err := d.layout(k, dir)
	return steps, err
}

// layout returns the steps of a deposit and, for each, the identifier it
// has once the record is published (for seeding from a scan). A dataset is
// keyed with file digests (k.MD5); dir is where its files are read from.
func (d invenioDriver) layout(k canonical.Keyed, dir string) ([]driver.Step, []string, error) {
	payload := k.Body
	var files []driver.DatasetFile
	if dir != "" || k.MD5 != nil {
		var doc struct {
			Dataset  []driver.DatasetFile `json:"dataset"`
			Metadata json.RawMessage      `json:"metadata"`
		}
		if err := json.Unmarshal(k.Body, &doc); err != nil || len(doc.Dataset) == 0 {
			return nil, nil, errors.New("invenio: not a dataset document")
		}
		files, payload = doc.Dataset, doc.Metadata
		if len(files) > d.maxFiles {
			return nil, nil, fmt.Errorf("invenio: %d files, but a record may have at most %d (Target.MaxFiles)", len(files), d.maxFiles)
		}
	}
	opts, payload, err := splitOptions(payload)
	if err != nil {
		return nil, nil, err
	}
	object := k.Version != ""
	if object {
		if err := d.objectLine(opts); err != nil {
			return nil, nil, err
		}
	}
	marker := d.Marker(k)
	switch {
	case opts.NewVersionOf != "":
		return d.versionLayout(k, dir, files, payload, opts.NewVersionOf, marker)
	case opts.Community != "" && !d.publish:
		return nil, nil, errors.New("invenio: a community submission is how the record gets published: a line naming a community needs publishing on")
	}
	body, err := invenioDraftBody(payload, marker, len(files) > 0, k.Version)
	if err != nil {
		return nil, nil, err
	}

	draft := driver.Step{
		Label: "draft", Target: d.draftTarget(), Key: k.Key, Durable: true, RecordID: true,
		Recheck: d.recheckTarget(),
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url("records", nil), Header: jsonHeader(), Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			if v.Class == driver.Created {
				if v.ID = stringMember(a.Body, "id"); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the create answer names no draft id"
				}
				if bytes.Contains(a.Body, []byte(`"errors"`)) {
					// InvenioRDM keeps a draft with invalid or missing fields
					// and says so here; only its publish refuses it.
					v.Warn = "InvenioRDM created drafts with validation errors (the fields it dropped are in the create answer); publishing them will be refused"
				}
			}
			return v
		},
		Check: d.markerCheck(marker),
	}
	if !d.publish {
		draft.Label, draft.Primary = "", true
	}
	if object {
		// An object's later lines are answered from its row in the store,
		// never by these steps, so no later run would look again.
		draft.Recheck = ""
	}
	steps, seeds := []driver.Step{draft}, []string{""}
	for _, f := range files {
		md5 := k.MD5[f.Path]
		if md5 == "" {
			return nil, nil, fmt.Errorf("invenio: no MD5 for file %q (the keyer must be made WithFileMD5)", f.Path)
		}
		fs := d.fileSteps(k.Key, dir, f, md5, len(steps), 0)
		steps = append(steps, fs...)
		seeds = append(seeds, "completed", "md5:"+md5, "md5:"+md5)
	}
	switch {
	case opts.Community != "":
		steps = append(steps, d.reviewStep(k.Key, opts.Community, 0), d.submitStep(k.Key, 0, len(steps)))
		seeds = append(seeds, "review", "")
	case d.publish:
		steps = append(steps, d.publishStep(k.Key, marker, 0, nil, object))
		seeds = append(seeds, "")
	}
	return steps, seeds, nil
}

// invenioDraftBody is the create body: the payload as the draft's body,
// files.enabled set, the marker appended to metadata.identifiers, and for
// an object the marker of its version (the content key version; "" for
// none).
func invenioDraftBody(payload []byte, marker string, hasFiles bool, version string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, errors.New("invenio: the payload must be a JSON object: the draft's body, or its metadata")
	}
	if _, isBody := doc["metadata"]; !isBody {
		doc = map[string]any{"metadata": doc}
	}
	md, ok := doc["metadata"].(map[string]any)
	if !ok {
		return nil, errors.New("invenio: metadata must be an object")
	}
	files := map[string]any{}
	if v, present := doc["files"]; present {
		if files, ok = v.(map[string]any); !ok {
			return nil, errors.New("invenio: files must be an object of files options")
		}
	}
	if v, present := files["enabled"]; present && v != hasFiles {
		return nil, fmt.Errorf("invenio: files.enabled is %v, but the deposit has %s (leave it out: the client sets it)", v, map[bool]string{true: "files", false: "no files"}[hasFiles])
	}
	files["enabled"] = hasFiles
	doc["files"] = files

	var ids []any
	if v, present := md["identifiers"]; present {
		if ids, ok = v.([]any); !ok {
			return nil, errors.New("invenio: metadata.identifiers must be an array")
		}
	}
	for _, item := range ids {
		m, _ := item.(map[string]any)
		id, _ := m["identifier"].(string)
		if strings.HasPrefix(id, invenioMarkerPrefix) && id != marker {
			return nil, fmt.Errorf("invenio: metadata.identifiers already holds the deposit marker %s, not this payload's %s", id, marker)
		}
		if strings.HasPrefix(id, versionMarkerPrefix) {
			return nil, fmt.Errorf("invenio: metadata.identifiers holds the version marker %s (leave it out: the client sets it)", id)
		}
	}
	ids = append(ids, map[string]any{"identifier": marker, "scheme": "urn"})
	if version != "" {
		ids = append(ids, map[string]any{"identifier": versionMarker(version), "scheme": "urn"})
	}
	md["identifiers"] = ids

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("invenio: draft body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// markerCheck searches the user's records and drafts for marker: one
// record holding it exactly is the draft; two or more are a conflict.
func (d invenioDriver) markerCheck(marker string) *driver.Check {
	q := url.Values{"q": {`metadata.identifiers.identifier:"` + marker + `"`}, "size": {"25"}, "allversions": {"true"}}
	return &driver.Check{
		Settle: d.settle,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: d.url("user/records", q), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
			}
			hits, _, ok := invenioHits(a.Body)
			if !ok {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the search answer is not a page of hits"}
			}
			// The identifier field is text: a phrase query also matches
			// longer identifiers, so only exact values count.
			var ids []string
			for _, h := range hits {
				if h.adoptable(marker) {
					ids = append(ids, h.ID)
				}
			}
			switch len(ids) {
			case 0:
				return driver.Finding{Kind: driver.Absent}
			case 1:
				return driver.Finding{Kind: driver.Present, ID: ids[0]}
			}
			return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
				"%d records carry the marker %s: %s; keep one, delete the surplus drafts (DELETE /api/records/{id}/draft), then run again with --retry-failed",
				len(ids), marker, strings.Join(ids, ", "))}
		},
	}
}

// fileSteps are the three steps of one file; at is the index of the
// first, draftAt that of the step whose identifier is the draft's id.
func (d invenioDriver) fileSteps(key, dir string, f driver.DatasetFile, md5 string, at, draftAt int) []driver.Step {
	fs := fileSteps{d: d, f: f, key: key, at: at, draftAt: draftAt, want: "md5:" + md5,
		label: "file " + strconv.Quote(f.Path), path: filepath.Join(dir, filepath.FromSlash(f.Path))}
	return []driver.Step{fs.initStep(), fs.uploadStep(), fs.commitStep()}
}

// fileSteps builds the steps of one file of a dataset: start its entry on
// the draft, upload its bytes, commit it.
type fileSteps struct {
	d           invenioDriver
	f           driver.DatasetFile
	key         string
	at          int    // the index of the first of the three steps
	draftAt     int    // the index of the step whose identifier is the draft id
	want        string // the checksum the entry must have: "md5:" + the keyed MD5
	label, path string
}

// row is the store key of the step of this file in phase.
func (fs fileSteps) row(phase string) string { return fs.key + " " + phase + " " + fs.f.Path }

// committed settles the upload and the commit when the entry was found
// committed with the keyed bytes.
func (fs fileSteps) committed(prior []string) (string, bool) {
	return fs.want, prior[fs.at] == "completed"
}

// entry reads the file's entry: absent, pending, or committed with the
// keyed bytes ("completed"); committed with other bytes is foreign.
func (fs fileSteps) entry(done func(status string) driver.Finding) *driver.Check {
	return &driver.Check{
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: fs.d.fileURL(prior[fs.draftAt], fs.f.Path, ""), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err == nil && a.Status == http.StatusNotFound {
				return driver.Finding{Kind: driver.Absent}
			}
			if a.Err != nil || a.Status != http.StatusOK {
				return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
			}
			status, sum := stringMember(a.Body, "status"), stringMember(a.Body, "checksum")
			if status == "completed" && sum != fs.want {
				return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
					"%s on the draft is committed with %s, not the %s of the bytes keyed: delete it (DELETE .../draft/files/{key}) and run again with --retry-failed",
					fs.label, sum, fs.want)}
			}
			return done(status)
		},
	}
}

// initStep starts the file's entry on the draft.
func (fs fileSteps) initStep() driver.Step {
	return driver.Step{
		Label: fs.label, Target: fs.d.fileTarget(), Key: fs.row("init"), Durable: true,
		Build: func(prior []string) (driver.Request, error) {
			body, _ := json.Marshal([]map[string]string{{"key": fs.f.Path}})
			return driver.Request{Method: http.MethodPost, URL: fs.d.url("records/"+url.PathEscape(prior[fs.draftAt])+"/draft/files", nil), Header: jsonHeader(), Body: body}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			switch {
			case v.Class == driver.Created:
				v.ID = "pending"
			case a.Err == nil && a.Status == http.StatusBadRequest && strings.Contains(invenioProblem(a.Body), "already exists"):
				v.Class = driver.Conflict // started before: its entry says how far
			}
			return v
		},
		Check: fs.entry(func(status string) driver.Finding {
			if status == "completed" {
				return driver.Finding{Kind: driver.Present, ID: "completed"}
			}
			return driver.Finding{Kind: driver.Present, ID: "pending"}
		}),
	}
}

// uploadStep sends the file's bytes, streamed from the file.
func (fs fileSteps) uploadStep() driver.Step {
	return driver.Step{
		Label: fs.label + " upload", Target: fs.d.fileTarget(), Key: fs.row("content"), Durable: true,
		Settled: fs.committed,
		Build: func(prior []string) (driver.Request, error) {
			h := http.Header{}
			h.Set("Content-Type", "application/octet-stream")
			open := func() (io.Reader, error) {
				fh, err := os.Open(fs.path)
				if err != nil {
					return nil, err
				}
				return driver.SizedFile{File: fh, Size: fs.f.Size}, nil
			}
			return driver.Request{Method: http.MethodPut, URL: fs.d.fileURL(prior[fs.draftAt], fs.f.Path, "/content"), Header: h, Open: open, Size: fs.f.Size}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			switch {
			case v.Class == driver.Created && bytes.Contains(a.Body, []byte(`"errors"`)):
				// Older InvenioRDM answers 200 with errors to an upload to a
				// committed file, having deleted it.
				v.Class, v.Problem = driver.Terminal, "the upload was refused: "+invenioProblem(a.Body)
			case v.Class == driver.Created:
				v.ID = "uploaded"
			case a.Err == nil && a.Status == http.StatusBadRequest && strings.Contains(invenioProblem(a.Body), "already committed"):
				// Committed before: the commit step checks its checksum.
				v.Class, v.ID = driver.Exists, "committed"
			}
			return v
		},
		Check: fs.entry(func(status string) driver.Finding {
			if status == "completed" {
				return driver.Finding{Kind: driver.Present, ID: fs.want}
			}
			return driver.Finding{Kind: driver.Absent} // pending: send the bytes again
		}),
	}
}

// commitStep commits the file, checking the checksum the server computed
// against the one keyed.
func (fs fileSteps) commitStep() driver.Step {
	return driver.Step{
		Label: fs.label + " commit", Target: fs.d.fileTarget(), Key: fs.row("commit"), Durable: true,
		Settled: fs.committed,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: fs.d.fileURL(prior[fs.draftAt], fs.f.Path, "/commit"), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			if v.Class != driver.Created {
				return v
			}
			switch sum := stringMember(a.Body, "checksum"); sum {
			case fs.want:
				v.ID = fs.want
			case "":
				v.Class, v.Problem = driver.Ambiguous, "the commit answer has no checksum"
			default:
				v.Class, v.Problem = driver.Terminal, fmt.Sprintf("%s was committed with %s, but its bytes were keyed with %s: the file changed since its key was computed", fs.label, sum, fs.want)
			}
			return v
		},
		Check: fs.entry(func(status string) driver.Finding {
			if status == "completed" {
				return driver.Finding{Kind: driver.Present, ID: fs.want}
			}
			return driver.Finding{Kind: driver.Absent}
		}),
	}
}

// publishStep publishes the draft whose id is the identifier of step
// draftAt. Its identifier is the DOI the record was published with, else
// the record id; the record id always for an object's record (byID),
// which is read and edited by it. check, when set, replaces the read-back
// of the record.
func (d invenioDriver) publishStep(key, marker string, draftAt int, check *driver.Check, byID bool) driver.Step {
	if check == nil {
		check = d.readBack(draftAt, byID)
	}
	return driver.Step{
		Label: "publish", Target: d.publishTarget(), Key: key, Primary: true, Durable: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url("records/"+url.PathEscape(prior[draftAt])+"/draft/actions/publish", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			switch {
			case a.Err == nil && a.Status == http.StatusAccepted:
				v.Class = driver.Created
			case a.Err == nil && a.Status == http.StatusNotFound:
				// No draft: published already (by another process sharing
				// the store), or deleted. The read-back tells which.
				v.Class, v.Problem = driver.Conflict, "the draft is gone and the record is not published (deleted?)"
			case v.Class == driver.Terminal:
				v.Problem = "publish refused, the draft stays (delete it before depositing a changed payload, which gets a draft of its own): " + v.Problem
			}
			if v.Class == driver.Created {
				v.ID = recordID(a.Body, stringMember(a.Body, "id"), byID)
				if ms := hitOf(a.Body).markers(); len(ms) > 0 && !slices.Contains(ms, marker) {
					// Another line's deposit took this draft over (two new
					// versions of one record at once): not ours to claim.
					v.Class, v.ID = driver.Terminal, ""
					v.Problem = fmt.Sprintf("the draft published carries the marker %s, not this line's %s: another deposit shared the draft", strings.Join(ms, ", "), marker)
				}
			}
			return v
		},
		Check: check,
	}
}

// recordID is publishedID, or id itself when byID.
func recordID(body []byte, id string, byID bool) string {
	if byID {
		return id
	}
	return publishedID(body, id)
}

// publishedID is the identifier of a published record: its DOI, else its
// id.
func publishedID(body []byte, id string) string {
	if doi, ok := driver.StringAt(body, []string{"/pids/doi/identifier"}); ok {
		return doi
	}
	return id
}

// readBack reads the record of the draft whose id is the identifier of
// step draftAt: published is present, named as recordID names it.
func (d invenioDriver) readBack(draftAt int, byID bool) *driver.Check {
	return &driver.Check{
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(prior[draftAt]), nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			switch {
			case a.Err == nil && a.Status == http.StatusOK:
				var r struct {
					ID        string `json:"id"`
					Published bool   `json:"is_published"`
				}
				if json.Unmarshal(a.Body, &r) != nil || !r.Published {
					return driver.Finding{Kind: driver.Absent}
				}
				return driver.Finding{Kind: driver.Present, ID: recordID(a.Body, r.ID, byID)}
			case a.Err == nil && a.Status == http.StatusNotFound:
				return driver.Finding{Kind: driver.Absent} // "not registered": never published
			}
			return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
		},
	}
}

// Seeding from a scan of the user's records (seed.go).

// invenioScanSize is the page size of the scan; invenioScanWindow the most
// hits InvenioRDM's search answers (the search engine's
// index.max_result_window, 10,000 by default): page*size beyond it is a 400.
const (
	invenioScanSize   = 100
	invenioScanWindow = 10000
)

func (d invenioDriver) ScanSettle() time.Duration      { return d.settle }
func (d invenioDriver) ScanWindow() int                { return invenioScanWindow }
func (d invenioDriver) ScanProblem(body []byte) string { return invenioProblem(body) }

// ScanPage asks for every version (allversions): a record the user made a
// new version of still carries its marker in the version deposited, which
// a search of latest versions would not show.
func (d invenioDriver) ScanPage(page int) driver.Request {
	q := url.Values{"sort": {"newest"}, "size": {strconv.Itoa(invenioScanSize)}, "page": {strconv.Itoa(page)}, "allversions": {"true"}}
	return driver.Request{Method: http.MethodGet, URL: d.url("user/records", q), Header: acceptJSON(), Full: true}
}

func (d invenioDriver) ReadScan(a driver.Answer) ([]driver.Found, int, int, bool) {
	if a.Err != nil || a.Status != http.StatusOK {
		return nil, 0, 0, false
	}
	hits, total, ok := invenioHits(a.Body)
	if !ok {
		return nil, 0, 0, false
	}
	var found []driver.Found
	for _, h := range hits {
		for _, m := range h.markers() {
			if h.adoptable(m) {
				found = append(found, driver.Found{Marker: m, ID: h.ID, PID: h.Pids.DOI.Identifier, Published: h.Published})
			}
		}
	}
	return found, len(hits), total, true
}

// SeedRows seeds a deposit found once: a published record settles every
// step; a draft settles the draft step and leaves the later steps pending,
// so that each looks before it is sent. Found twice or more, only the
// draft step is left pending: its search reports the conflict.
func (d invenioDriver) SeedRows(k canonical.Keyed, steps []driver.Step, found []driver.Found) []driver.SeedRow {
	if len(found) > 1 {
		return []driver.SeedRow{{Step: 0}}
	}
	f := found[0]
	_, seeds, err := d.layout(k, "")
	if err != nil || len(seeds) != len(steps) {
		return []driver.SeedRow{{Step: 0}}
	}
	// The step that names the record id is done with it; a step before it
	// (a new version's resolve and open) has no row, and every later one
	// is done with the record published, else pending, to look first.
	var rows []driver.SeedRow
	for i, s := range steps {
		id, done := seeds[i], f.Published
		switch {
		case s.RecordID:
			id, done = f.ID, true
		case s.Primary && k.Version != "":
			id = f.ID // an object's record is named by its id
		case s.Primary:
			id = cmp.Or(f.PID, f.ID)
		case id == "":
			continue
		}
		rows = append(rows, driver.SeedRow{Step: i, ID: id, Done: done})
	}
	return rows
}

// Answers.

// invenioHit is the part of a search hit the client reads.
type invenioHit struct {
	ID        string `json:"id"`
	Published bool   `json:"is_published"`
	Metadata  struct {
		Identifiers []struct {
			Identifier string `json:"identifier"`
			Scheme     string `json:"scheme"`
		} `json:"identifiers"`
	} `json:"metadata"`
	Pids struct {
		DOI struct {
			Identifier string `json:"identifier"`
		} `json:"doi"`
	} `json:"pids"`
	Files struct {
		Enabled bool `json:"enabled"`
	} `json:"files"`
	Versions struct {
		Index    int  `json:"index"`
		IsLatest bool `json:"is_latest"`
	} `json:"versions"`
}

// hitOf reads a record or draft answer as a hit; a body that is not one
// reads as a hit with nothing in it.
func hitOf(body []byte) invenioHit {
	var h invenioHit
	_ = json.Unmarshal(body, &h)
	return h
}

// markers are the deposit markers the hit carries, each once.
func (h invenioHit) markers() []string {
	var ms []string
	for _, id := range h.Metadata.Identifiers {
		if strings.HasPrefix(id.Identifier, invenioMarkerPrefix) && !slices.Contains(ms, id.Identifier) {
			ms = append(ms, id.Identifier)
		}
	}
	return ms
}

// versionMarkers are the object version markers the hit carries, each
// once: one on an object's record, none on any other.
func (h invenioHit) versionMarkers() []string {
	var ms []string
	for _, id := range h.Metadata.Identifiers {
		if strings.HasPrefix(id.Identifier, versionMarkerPrefix) && !slices.Contains(ms, id.Identifier) {
			ms = append(ms, id.Identifier)
		}
	}
	return ms
}

// adoptable reports whether the hit is a record of the deposit with
// marker: it carries marker exactly and, while a draft, no other deposit's
// marker (a draft the client made carries its own alone, so one with
// another is not ours to take over and publish). A published record that
// carries two markers is the record of both.
//
// An object's record (one with a version marker) carries its marker in
// every version: only its latest published version is it, or, before its
// first publish, its first draft; the drafts of its later versions (an
// update a killed run left) are not.
func (h invenioHit) adoptable(marker string) bool {
	ms := h.markers()
	if len(h.versionMarkers()) > 0 && !(h.Published && h.Versions.IsLatest || !h.Published && h.Versions.Index <= 1) {
		return false
	}
	return slices.Contains(ms, marker) && (h.Published || len(ms) == 1)
}

// invenioHits reads a search answer: {"hits":{"hits":[...],"total":N}}.
func invenioHits(body []byte) ([]invenioHit, int, bool) {
	var page struct {
		Hits *struct {
			Hits  []invenioHit    `json:"hits"`
			Total json.RawMessage `json:"total"`
		} `json:"hits"`
	}
	if json.Unmarshal(body, &page) != nil || page.Hits == nil {
		return nil, 0, false
	}
	// total is a number, or {"value":N,...} from newer search engines.
	var total int
	if json.Unmarshal(page.Hits.Total, &total) != nil {
		var t struct {
			Value int `json:"value"`
		}
		_ = json.Unmarshal(page.Hits.Total, &t)
		total = t.Value
	}
	return page.Hits.Hits, total, true
}

// invenioVerdict classifies an answer per the protocol table, with
// InvenioRDM's error body as the problem.
func invenioVerdict(a driver.Answer) driver.Verdict {
	v := driver.Verdict{Class: driver.Classify(a)}
	if a.Err == nil && a.Status >= 400 {
		v.Problem = invenioProblem(a.Body)
	}
	return v
}

// invenioFileVerdict is invenioVerdict for a request to a draft that
// exists: a 404 means that draft or file is gone (deleted by hand), which
// fails this deposit and stops no other.
func invenioFileVerdict(a driver.Answer) driver.Verdict {
	v := invenioVerdict(a)
	if a.Err == nil && a.Status == http.StatusNotFound {
		v.Class = driver.Terminal
		v.Problem = "the draft or file is gone (deleted?): " + v.Problem
	}
	return v
}

// invenioProblem summarises an InvenioRDM error body, {"status":N,
// "message":M,"errors":[{"field":F,"messages":[...]}]}, in one line; ""
// when the body is not one.
func invenioProblem(body []byte) string {
	var e struct {
		Message string `json:"message"`
		Errors  []struct {
			Field    string   `json:"field"`
			Messages []string `json:"messages"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || e.Message == "" {
		return ""
	}
	parts := []string{e.Message}
	for _, fe := range e.Errors {
		parts = append(parts, fe.Field+": "+strings.Join(fe.Messages, " "))
	}
	return driver.OneLine(strings.Join(parts, "; "))
}

// stringMember is the string member name of a JSON object body, or "".
func stringMember(body []byte, name string) string {
	s, _ := driver.StringAt(body, []string{"/" + name})
	return s
}

func jsonHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json") // exactly: InvenioRDM refuses parameters
	h.Set("Accept", "application/json")
	return h
}

func acceptJSON() http.Header {
	h := http.Header{}
	h.Set("Accept", "application/json")
	return h
}

// invenioTransport turns Zenodo's X-RateLimit-Reset (Unix seconds) on a
// 429 into the Retry-After the retry policy honours (capped like any
// wait).
type invenioTransport struct {
	next http.RoundTripper
}

func (t *invenioTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" {
		return resp, err
	}
	if reset, perr := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64); perr == nil {
		wait := math.Ceil(time.Until(time.Unix(reset, 0)).Seconds())
		resp.Header.Set("Retry-After", strconv.Itoa(int(max(wait, 1))))
	}
	return resp, nil
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var (
	_ driver.RateSetter       = invenioDriver{}
	_ driver.TransportWrapper = invenioDriver{}
	_ driver.RequestPacer     = invenioDriver{}
	_ driver.Seeder           = invenioDriver{}
	_ driver.FileMD5er        = invenioDriver{}
	_ driver.Serializer       = invenioDriver{}
	_ driver.StepUpdater      = invenioDriver{}
	_ driver.RecordReader     = invenioDriver{}
)
