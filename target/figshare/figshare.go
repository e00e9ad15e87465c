// Package figshare provides a deposit target for Figshare's API v2: an
// article, its files through Figshare's upload service in parts, and its
// publication, each exactly once, on a server that arbitrates none of them.
//
// Figshare makes a new private article for every POST /account/articles
// and a new file for every upload initiated, and a publish makes a new
// public version; nothing is refused the second time. So every deposit
// carries a marker, a tag "deposit-sha256-" and its key (tags are a field
// every account has, and :tag: is an exact-match search key:
// figshare/user_documentation docs/Search/search.md), and is guarded step
// by step (see [Target]).
//
// Give a [Target] to client.New as Config.Target. A line is an article's
// create body ({"title":...,"description":...,"defined_type":...}), or
// under datasets ({"metadata":M,"files":[...]}) with M that body.
package figshare

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// Protocol is the protocol name that begins the store targets of this
// target.
const Protocol = "figshare"

// Defaults.
const (
	// Rate is the default request rate: Figshare limits nothing
	// automatically but asks clients to stay under one request per second
	// (figshare/user_documentation docs/api/index.md, Rate limiting).
	Rate = 1.0
	// DefaultSettleTime is the default Target.SettleTime: Figshare does
	// not document how long its search takes to show a private article,
	// and a later run searches again for an article created after a miss.
	DefaultSettleTime = 10 * time.Second
	// DefaultMinPartSize is the default Target.MinPartSize: the upload
	// service pipes each part to S3 as one part of a multipart upload
	// (docs/api/file_uploader.md), and S3 takes no part under 5 MiB but the
	// last.
	DefaultMinPartSize = 5 << 20
	// MaxFiles is the most files a deposit may have here: each takes a
	// few steps, and a file's parts one each.
	MaxFiles = 500
)

// markerPrefix begins every marker.
const markerPrefix = "deposit-sha256-"

// Marker returns the tag a deposit with key carries. It has no ":" or
// space, which the search syntax reads as operators.
func Marker(key string) string { return markerPrefix + key }

// Target is a Figshare account through API v2. Each deposit is these
// steps, each guarded in the store:
//
//  1. article: POST /account/articles with the payload, the marker
//     appended to its tags (201, with the article's location). After an
//     ambiguous answer the account's private articles are searched for the
//     marker (POST /account/articles/search, ":tag: MARKER") before it is
//     sent again; a miss is trusted only after SettleTime, and the next run
//     searches again for an article created after a miss (the search lags
//     by an undocumented time). Two articles with one marker are a
//     conflict, reported and never resolved by picking one.
//  2. for each file, initiate: POST /account/articles/{id}/files with its
//     name, size and MD5 (201, the file's location); after an ambiguous
//     answer the article's files are listed and the file matched by name,
//     size and MD5 before it is sent again.
//  3. the file's upload_url (GET .../files/{file_id}) and its upload
//     status (GET upload_url: the parts, each PENDING or COMPLETE), read
//     afresh by every run until the file is complete.
//  4. each part not COMPLETE: PUT upload_url/{partNo} with its byte range
//     (a part sent twice holds the same bytes). The steps are one per
//     MinPartSize of the file; a layout of more parts fails the file.
//  5. complete: POST .../files/{file_id} (202); after an ambiguous answer
//     the upload status says whether it is COMPLETED.
//  6. publish: POST /account/articles/{id}/publish (201), taken as
//     accepted: the article is read until it is public with a DOI, which is
//     the deposit's identifier (Result.RecordID is the article id).
//
// A store that has never scanned the account scans it once before its
// first deposit (driver.ChainSeeder): the private articles' listing, read
// from the database, and a read of each article for its tags. The zero
// value is not usable: Endpoint is required. A Target is a value; its
// Driver is safe for concurrent use.
type Target struct {
	// Endpoint is the API root, such as https://api.figshare.com/v2.
	// Required.
	Endpoint string
	// Token is the personal token, sent as "Authorization: token <Token>";
	// it is never stored, and is not part of any store target.
	Token string
	// SettleTime is how long after an ambiguous create the search for it
	// is repeated before "not found" is trusted, and how long a new store
	// waits before it scans the account; default DefaultSettleTime.
	SettleTime time.Duration
	// MinPartSize is the smallest part the upload service makes but the
	// last, which sets how many part steps a file has; default
	// DefaultMinPartSize.
	MinPartSize int64
}

// fs is the driver of a Target.
type fs struct {
	endpoint, token string
	settle          time.Duration
	minPart         int64
}

// Driver checks the target's fields and returns its driver.
func (t Target) Driver() (driver.Driver, error) {
	if u, err := url.Parse(strings.TrimSpace(t.Endpoint)); err == nil && (u.User != nil || u.RawQuery != "") {
		return nil, errors.New("figshare: Target.Endpoint must have no user info or query (the token goes in Target.Token)")
	}
	ep, err := driver.Endpoint("figshare: Target.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	if t.SettleTime < 0 || t.MinPartSize < 0 {
		return nil, errors.New("figshare: Target.SettleTime and MinPartSize must not be negative")
	}
	d := &fs{endpoint: ep, token: strings.TrimSpace(t.Token), settle: t.SettleTime, minPart: t.MinPartSize}
	if d.settle == 0 {
		d.settle = DefaultSettleTime
	}
	if d.minPart == 0 {
		d.minPart = DefaultMinPartSize
	}
	return d, nil
}

// target is the store target of a step ("" for the deposit's own).
func (d *fs) target(step string) string {
	proto := Protocol
	if step != "" {
		proto += "-" + step
	}
	return driver.TargetName(proto, d.endpoint)
}

func (d *fs) Name() string { return d.target("") }
func (d *fs) StepTargets() []string {
	return []string{d.target("article"), d.target("file"), d.target("complete"), d.target("recheck")}
}
func (d *fs) SecretFingerprint() string { return "" }
func (d *fs) DefaultRate() float64      { return Rate }
func (d *fs) WantsFileMD5() bool        { return true }

// Guards reserves Authorization, which carries the token.
func (d *fs) Guards(name string) bool {
	return driver.Guarded(name) || http.CanonicalHeaderKey(name) == "Authorization"
}

// api is the URL of an API path under the endpoint.
func (d *fs) api(path string) string { return d.endpoint + "/" + path }

// header is a request's header: the token, and Accept.
func (d *fs) header() http.Header {
	h := http.Header{}
	h.Set("Accept", "application/json")
	if d.token != "" {
		h.Set("Authorization", "token "+d.token)
	}
	return h
}

func (d *fs) get(u string) driver.Request {
	return driver.Request{Method: http.MethodGet, URL: u, Header: d.header(), Full: true}
}

func (d *fs) post(u string, body []byte) driver.Request {
	h := d.header()
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	return driver.Request{Method: http.MethodPost, URL: u, Header: h, Body: body, Full: true}
}

func (d *fs) articleURL(id, sub string) string {
	u := d.api("account/articles/" + url.PathEscape(id))
	if sub != "" {
		u += "/" + sub
	}
	return u
}

// Steps are the article, five kinds per file (see Target), the publish.
func (d *fs) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	payload := k.Body
	var files []driver.DatasetFile
	if dir != "" || k.MD5 != nil {
		var doc struct {
			Dataset  []driver.DatasetFile `json:"dataset"`
			Metadata json.RawMessage      `json:"metadata"`
		}
		if err := json.Unmarshal(k.Body, &doc); err != nil || len(doc.Dataset) == 0 {
			return nil, errors.New("figshare: not a dataset document")
		}
		files, payload = doc.Dataset, doc.Metadata
		if len(files) > MaxFiles {
			return nil, fmt.Errorf("figshare: %d files, at most %d per deposit", len(files), MaxFiles)
		}
	}
	marker := Marker(k.Key)
	body, err := createBody(payload, marker)
	if err != nil {
		return nil, err
	}
	steps := []driver.Step{d.articleStep(k.Key, marker, body)}
	names := map[string]string{}
	for _, f := range files {
		name := path.Base(f.Path)
		if other, taken := names[name]; taken {
			return nil, fmt.Errorf("figshare: files %q and %q have one name, %q: an article's files have names only, no folders", other, f.Path, name)
		}
		names[name] = f.Path
		md5 := k.MD5[f.Path]
		if md5 == "" {
			return nil, fmt.Errorf("figshare: no MD5 for file %q (the keyer must be made WithFileMD5)", f.Path)
		}
		fl := &fileSteps{d: d, key: k.Key, f: f, name: name, md5: md5, at: len(steps), local: filepath.Join(dir, filepath.FromSlash(f.Path))}
		steps = append(steps, fl.steps()...)
	}
	return append(steps, d.publishStep(k.Key)), nil
}

// createBody is the payload with the marker appended to its tags (or to
// keywords, when it names keywords and no tags), never replacing them. A
// payload that holds another deposit's marker is refused.
func createBody(payload []byte, marker string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, errors.New("figshare: the payload must be a JSON object, an article's create body ({\"title\":...})")
	}
	field := "tags"
	if _, ok := doc["tags"]; !ok {
		if _, ok := doc["keywords"]; ok {
			field = "keywords"
		}
	}
	var tags []any
	if v, present := doc[field]; present {
		var ok bool
		if tags, ok = v.([]any); !ok {
			return nil, fmt.Errorf("figshare: %s must be an array of strings", field)
		}
	}
	for _, t := range tags {
		if s, _ := t.(string); strings.HasPrefix(s, markerPrefix) && s != marker {
			return nil, fmt.Errorf("figshare: %s already holds the deposit marker %s, not this payload's %s", field, s, marker)
		}
	}
	if !slices.Contains(tags, any(marker)) {
		tags = append(tags, marker)
	}
	doc[field] = tags
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("figshare: create body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// articleStep creates the private article; its identifier is the
// article id, the last segment of the answer's location.
func (d *fs) articleStep(key, marker string, body []byte) driver.Step {
	return driver.Step{
		Label: "article", Target: d.target("article"), Key: key, Durable: true, RecordID: true,
		Recheck: d.target("recheck"),
		Build:   func([]string) (driver.Request, error) { return d.post(d.api("account/articles"), body), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, false)
			if v.Class == driver.Created {
				if v.ID = locationID(a.Body); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the create answer names no article location"
				}
			}
			return v
		},
		Check: d.markerCheck(marker),
	}
}

// locationID is the last path segment of the answer's location
// ({"location":".../account/articles/42"}), "" when there is none; an
// entity_id, which Figshare also sends, is taken when it is given.
func locationID(body []byte) string {
	if id, ok := driver.StringAt(body, []string{"/entity_id"}); ok {
		return id
	}
	loc, _ := driver.StringAt(body, []string{"/location"})
	loc = strings.TrimRight(loc, "/")
	if i := strings.LastIndexByte(loc, '/'); i >= 0 {
		if _, err := strconv.ParseInt(loc[i+1:], 10, 64); err == nil {
			return loc[i+1:]
		}
	}
	return ""
}

// markerCheck searches the account's private articles for marker.
func (d *fs) markerCheck(marker string) *driver.Check {
	body, _ := json.Marshal(map[string]any{"search_for": ":tag: " + marker, "page_size": 10})
	return &driver.Check{
		Settle: d.settle,
		Build:  func([]string) (driver.Request, error) { return d.post(d.api("account/articles/search"), body), nil },
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			var hits []struct {
				ID json.Number `json:"id"`
			}
			if json.Unmarshal(a.Body, &hits) != nil || hits == nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the search answer is not a list of articles"}
			}
			var ids []string
			for _, h := range hits {
				if id := h.ID.String(); id != "" && !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
			switch len(ids) {
			case 0:
				return driver.Finding{Kind: driver.Absent}
			case 1:
				return driver.Finding{Kind: driver.Present, ID: ids[0]}
			}
			return driver.Finding{Kind: driver.Foreign, Problem: duplicates(marker, ids)}
		},
	}
}

// duplicates is the problem of several articles with one marker.
func duplicates(marker string, ids []string) string {
	return fmt.Sprintf("%d articles carry the marker %s: %s; keep one, delete the other drafts, then run again with --retry-failed",
		len(ids), marker, strings.Join(ids, ", "))
}

// publishStep publishes the article: accepted, then read until it is
// public with its DOI.
func (d *fs) publishStep(key string) driver.Step {
	return driver.Step{
		Label: "publish", Target: d.target(""), Key: key, Primary: true, Durable: true, Accepts: true,
		Build: func(prior []string) (driver.Request, error) {
			return d.post(d.articleURL(prior[0], "publish"), nil), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, true)
			if v.Class == driver.Created {
				v.Class = driver.Accepted // the DOI is read from the article
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) { return d.get(d.articleURL(prior[0], "")), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				art, ok := readArticle(a.Body)
				switch {
				case !ok:
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the article answer cannot be read"}
				case art.public() && art.DOI != "":
					return driver.Finding{Kind: driver.Present, ID: art.DOI}
				case art.public():
					return driver.Finding{Kind: driver.Pending, Problem: "article " + art.ID.String() + " is public but has no DOI yet"}
				}
				return driver.Finding{Kind: driver.Absent}
			},
		},
	}
}

// article is the part of GET /account/articles/{id} the checks read.
type article struct {
	ID       json.Number `json:"id"`
	DOI      string      `json:"doi"`
	Status   string      `json:"status"`
	IsPublic bool        `json:"is_public"`
	Tags     []string    `json:"tags"`
	Keywords []string    `json:"keywords"`
}

func readArticle(body []byte) (article, bool) {
	var a article
	return a, json.Unmarshal(body, &a) == nil && a.ID != ""
}

// public reports whether the article has a public version.
func (a article) public() bool { return a.IsPublic || a.Status == "public" }

// markers are the deposit markers among the article's tags.
func (a article) markers() []string {
	var out []string
	for _, t := range append(slices.Clone(a.Tags), a.Keywords...) {
		if strings.HasPrefix(t, markerPrefix) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// fileSteps builds the steps of one file.
type fileSteps struct {
	d     *fs
	key   string
	f     driver.DatasetFile
	name  string // on Figshare: the path's last element
	md5   string
	at    int // index of the initiate step; the article's is 0
	local string
}

// The indexes of a file's steps from at: initiate, upload_url, status,
// the parts, complete.
func (fl *fileSteps) slots() int {
	return int(max(1, (fl.f.Size+fl.d.minPart-1)/fl.d.minPart))
}

func (fl *fileSteps) label(what string) string {
	l := "file " + strconv.Quote(fl.f.Path)
	if what != "" {
		l += " " + what
	}
	return l
}

func (fl *fileSteps) steps() []driver.Step {
	out := []driver.Step{fl.initiate(), fl.uploadURL(), fl.status()}
	for n := 1; n <= fl.slots(); n++ {
		out = append(out, fl.part(n))
	}
	return append(out, fl.complete())
}

// fileID, uploadURL and layout are the identifiers of the earlier steps.
func (fl *fileSteps) fileID(prior []string) string      { return prior[fl.at] }
func (fl *fileSteps) uploadURLOf(prior []string) string { return prior[fl.at+1] }
func (fl *fileSteps) layout(prior []string) uploadLayout {
	var l uploadLayout
	_ = json.Unmarshal([]byte(prior[fl.at+2]), &l)
	return l
}

// initiate starts the file's upload.
func (fl *fileSteps) initiate() driver.Step {
	body, _ := json.Marshal(map[string]any{"name": fl.name, "size": fl.f.Size, "md5": fl.md5})
	return driver.Step{
		Label: fl.label(""), Target: fl.d.target("file"), Key: fl.key + " " + fl.f.Path, Durable: true,
		Build: func(prior []string) (driver.Request, error) {
			return fl.d.post(fl.d.articleURL(prior[0], "files"), body), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, true)
			if v.Class == driver.Created {
				if v.ID = locationID(a.Body); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the initiate answer names no file location"
				}
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) { return fl.d.get(fl.d.articleURL(prior[0], "files")), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				var list []struct {
					ID          json.Number `json:"id"`
					Name        string      `json:"name"`
					Size        int64       `json:"size"`
					SuppliedMD5 string      `json:"supplied_md5"`
				}
				if json.Unmarshal(a.Body, &list) != nil || list == nil {
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the file list cannot be read"}
				}
				var ids []string
				for _, e := range list {
					if e.Name == fl.name && e.Size == fl.f.Size && strings.EqualFold(e.SuppliedMD5, fl.md5) {
						ids = append(ids, e.ID.String())
					}
				}
				switch len(ids) {
				case 0:
					return driver.Finding{Kind: driver.Absent}
				case 1:
					return driver.Finding{Kind: driver.Present, ID: ids[0]}
				}
				return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
					"%s was initiated %d times on the article (files %s): delete all but one, then run again with --retry-failed",
					fl.label(""), len(ids), strings.Join(ids, ", "))}
			},
		},
	}
}

// uploadURL reads the file's upload_url; a read, sent again by every run
// until the file is complete.
func (fl *fileSteps) uploadURL() driver.Step {
	return driver.Step{
		Label: fl.label("upload url"), Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			return fl.d.get(fl.d.articleURL(prior[0], "files/"+url.PathEscape(fl.fileID(prior)))), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, true)
			if v.Class == driver.Created {
				u, _ := driver.StringAt(a.Body, []string{"/upload_url"})
				if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
					return driver.Verdict{Class: driver.Ambiguous, Problem: "the file answer names no upload_url"}
				}
				v.ID = u
			}
			return v
		},
	}
}

// uploadLayout is a status step's identifier: the upload's parts and
// whether it is completed.
type uploadLayout struct {
	Completed bool         `json:"completed,omitempty"`
	Parts     []uploadPart `json:"parts,omitempty"`
}

type uploadPart struct {
	No    int   `json:"no"`
	Start int64 `json:"start"`
	End   int64 `json:"end"` // inclusive
	Done  bool  `json:"done,omitempty"`
}

// uploadInfo is GET upload_url's answer (docs/api/file_uploader.md).
type uploadInfo struct {
	Status string `json:"status"`
	Size   *int64 `json:"size"`
	Parts  []struct {
		PartNo      int    `json:"partNo"`
		StartOffset int64  `json:"startOffset"`
		EndOffset   int64  `json:"endOffset"`
		Status      string `json:"status"`
	} `json:"parts"`
}

func readUpload(body []byte) (uploadInfo, bool) {
	var u uploadInfo
	return u, json.Unmarshal(body, &u) == nil && u.Status != ""
}

// status reads the upload's parts and their status.
func (fl *fileSteps) status() driver.Step {
	return driver.Step{
		Label: fl.label("upload status"), Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) { return fl.d.get(fl.uploadURLOf(prior)), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, true)
			if v.Class != driver.Created {
				return v
			}
			u, ok := readUpload(a.Body)
			if !ok {
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the upload status cannot be read"}
			}
			var l uploadLayout
			switch u.Status {
			case "COMPLETED":
				l.Completed = true
			case "PENDING":
				if problem := fl.checkParts(u); problem != "" {
					return driver.Verdict{Class: driver.Terminal, Problem: problem}
				}
				for _, p := range u.Parts {
					l.Parts = append(l.Parts, uploadPart{No: p.PartNo, Start: p.StartOffset, End: p.EndOffset, Done: p.Status == "COMPLETE"})
				}
			default:
				return driver.Verdict{Class: driver.Terminal, Problem: fmt.Sprintf(
					"the upload of %s is %s: delete the file from the article, then run again with --retry-failed", fl.label(""), u.Status)}
			}
			id, _ := json.Marshal(l)
			v.ID = string(id)
			return v
		},
	}
}

// checkParts says what is wrong with a pending upload's layout: parts
// that do not cover the file in order, or more than the steps.
func (fl *fileSteps) checkParts(u uploadInfo) string {
	if u.Size != nil && *u.Size != fl.f.Size {
		return fmt.Sprintf("the upload of %s is for %d bytes, not %d", fl.label(""), *u.Size, fl.f.Size)
	}
	if len(u.Parts) > fl.slots() {
		return fmt.Sprintf("the upload service split %s into %d parts, more than its size allows at the least part size of %d bytes (Target.MinPartSize)",
			fl.label(""), len(u.Parts), fl.d.minPart)
	}
	next := int64(0)
	for i, p := range u.Parts {
		if p.PartNo != i+1 || p.StartOffset != next || p.EndOffset < p.StartOffset {
			return fmt.Sprintf("the parts of %s's upload do not cover its bytes in order", fl.label(""))
		}
		next = p.EndOffset + 1
	}
	if next != fl.f.Size {
		return fmt.Sprintf("the parts of %s's upload cover %d bytes, not %d", fl.label(""), next, fl.f.Size)
	}
	return ""
}

// part sends part n's bytes, unless the status showed it complete (or
// there is no part n). A part sent again holds the same bytes; a part
// locked by an upload in flight (409) is sent again after it.
func (fl *fileSteps) part(n int) driver.Step {
	return driver.Step{
		Label: fl.label("part " + strconv.Itoa(n)), Arbitrated: true,
		Settled: func(prior []string) (string, bool) {
			l := fl.layout(prior)
			if l.Completed || n > len(l.Parts) || l.Parts[n-1].Done {
				return "part " + strconv.Itoa(n), true
			}
			return "", false
		},
		Build: func(prior []string) (driver.Request, error) {
			p := fl.layout(prior).Parts[n-1]
			size := p.End - p.Start + 1
			h := fl.d.header()
			h.Set("Content-Type", "application/octet-stream")
			local := fl.local
			open := func() (io.Reader, error) {
				fh, err := os.Open(local)
				if err != nil {
					return nil, err
				}
				return &partReader{Reader: io.NewSectionReader(fh, p.Start, size), file: fh, size: size}, nil
			}
			return driver.Request{Method: http.MethodPut, URL: fl.uploadURLOf(prior) + "/" + strconv.Itoa(p.No), Header: h, Open: open, Size: size}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusConflict {
				return driver.Verdict{Class: driver.Retry, InFlight: partLockWait, Problem: "part " + strconv.Itoa(n) + " is locked by an upload in flight"}
			}
			v := judge(a, true)
			if v.Class == driver.Created {
				v.ID = "part " + strconv.Itoa(n)
			}
			return v
		},
	}
}

// partLockWait is the least wait before a part locked by another request
// is sent again.
const partLockWait = time.Second

// partReader is a part's bytes, with their file, closed with it.
type partReader struct {
	io.Reader
	file *os.File
	size int64
}

func (r *partReader) Close() error { return r.file.Close() }
func (r *partReader) Len() int     { return int(r.size) }

// complete completes the upload; after an ambiguous answer the upload
// status says whether it is completed.
func (fl *fileSteps) complete() driver.Step {
	return driver.Step{
		Label: fl.label("complete"), Target: fl.d.target("complete"), Key: fl.key + " " + fl.f.Path, Durable: true,
		Settled: func(prior []string) (string, bool) { return fl.fileID(prior), fl.layout(prior).Completed },
		Build: func(prior []string) (driver.Request, error) {
			return fl.d.post(fl.d.articleURL(prior[0], "files/"+url.PathEscape(fl.fileID(prior))), nil), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, true)
			if a.Err == nil && a.Status == http.StatusAccepted {
				v = driver.Verdict{Class: driver.Created}
			}
			if v.Class == driver.Created {
				v.ID = locationID(a.Body)
			}
			return v
		},
		FallbackFrom: func(prior []string) string { return fl.fileID(prior) },
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) {
				return fl.d.get(fl.uploadURLOf(prior) + fileFragment + fl.fileID(prior)), nil
			},
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				u, ok := readUpload(a.Body)
				_, id, _ := strings.Cut(a.URL, fileFragment)
				switch {
				case !ok:
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the upload status cannot be read"}
				case u.Status == "COMPLETED":
					return driver.Finding{Kind: driver.Present, ID: id}
				case u.Status == "PENDING":
					return driver.Finding{Kind: driver.Absent}
				}
				return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("the upload of %s is %s", fl.label(""), u.Status)}
			},
		},
	}
}

// fileFragment carries the file id from the complete's check's Build to
// its Judge, which sees only the answer: a URL fragment is never sent.
const fileFragment = "#file="
