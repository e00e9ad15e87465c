package repotest

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// InvenioConfig configures an InvenioRDM stub. The zero value asks for no
// token, lets search see every write at once, limits nothing and injects no
// faults. NewInvenio copies it; later changes have no effect.
type InvenioConfig struct {
	// Token, when set, is the personal access token every request must
	// carry as "Authorization: Bearer <Token>". A request without it, or
	// with another token, is anonymous, as InvenioRDM treats it: reading a
	// published record still works, everything else answers 403
	// {"status":403,"message":"Permission denied."}.
	Token string
	// IndexLag is how long a write takes to show in search: a draft or
	// record is searchable in the state of its last write only IndexLag
	// after that write. Deleting a draft refreshes the index at once (the
	// one write InvenioRDM refreshes for).
	IndexLag time.Duration
	// DOIPrefix is the prefix of the DOIs minted at publish; default
	// "10.5072" (DataCite's test prefix).
	DOIPrefix string
	// MaxFiles is the most files a draft may hold; default 100 (InvenioRDM's
	// RDM_RECORDS_MAX_FILES_COUNT, Zenodo's limit).
	MaxFiles int
	// Limit and SearchLimit, when set, are the requests allowed per Window:
	// searches (GET /api/user/records, /api/records and
	// /api/records/{id}/versions) count against SearchLimit only,
	// every other request against Limit. A request over its budget gets
	// 429 with X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (Unix seconds of the window's end, as Zenodo sends
	// them); every other answer carries the same headers.
	Limit, SearchLimit int
	// Window is the rate-limit window; default one minute.
	Window time.Duration
	// RetryAfter adds Retry-After (whole seconds, rounded up) to each 429.
	// Zenodo does not document it, so it is off by default.
	RetryAfter bool
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects
	// none. See Invenio for what each step numbers its attempts by.
	Faults string
	// Seed selects the fault sequence and the record ids.
	Seed int64
	// Latency delays every write before it commits.
	Latency time.Duration
	// Communities, when set, are the ids of the communities a review may
	// name; a review naming another gets 404 "Not found.", as InvenioRDM
	// answers for a community it cannot resolve. Nil accepts any id.
	Communities []string
}

// InvenioStats counts what an InvenioRDM stub did. All counts start at zero.
// Its JSON form names each field in snake_case.
type InvenioStats struct {
	Requests       int64 `json:"requests"`        // requests received, refused and faulted ones included
	Drafts         int64 `json:"drafts"`          // drafts created by POST /api/records
	Published      int64 `json:"published"`       // drafts published
	Discarded      int64 `json:"discarded"`       // drafts deleted
	FileInits      int64 `json:"file_inits"`      // file keys initialised
	Uploads        int64 `json:"uploads"`         // file contents received in full
	Commits        int64 `json:"commits"`         // file commits that took effect
	Searches       int64 `json:"searches"`        // searches answered
	Versions       int64 `json:"versions"`        // drafts of new versions opened by POST .../versions
	FileImports    int64 `json:"file_imports"`    // files-import actions that took effect
	Reviews        int64 `json:"reviews"`         // review requests created by PUT .../draft/review
	Submitted      int64 `json:"submitted"`       // review requests submitted
	Edits          int64 `json:"edits"`           // edit drafts of published records opened by POST .../draft
	EditsPublished int64 `json:"edits_published"` // edit drafts published into their records
	Mismatches     int64 `json:"mismatches"`      // 412 answers to an If-Match on a draft
	LockedRefusals int64 `json:"locked_refusals"` // file writes refused on an edit draft's locked files
	RateLimited    int64 `json:"rate_limited"`    // 429 answers of the rate limit (not injected faults)
	// FallbackQueries counts searches whose q was not a query the stub
	// parses (see Invenio): like InvenioRDM, it then matched any token.
	FallbackQueries int64 `json:"fallback_queries"`
	Faults          int64 `json:"faults"` // faults injected, all kinds
	// FaultsByKind counts injected faults by kind as written in the spec.
	// It is a copy.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// InvenioRecord is one record or draft the stub holds.
type InvenioRecord struct {
	ID        string
	Published bool
	DOI       string // pids.doi.identifier, once published
	// Identifiers are the values of metadata.identifiers, in order.
	Identifiers []string
	Files       []InvenioFile // in the order they were initialised
	Created     time.Time
	// Parent is parent.id, shared by every version of a record; Version
	// is versions.index, 1 for the first version.
	Parent  string
	Version int
	// Review is the status of the draft's community submission
	// ("created", "submitted", "declined"), "" when it has none; an
	// accepted review leaves the record, which is then published.
	Review string
	// Communities are the communities the record's versions belong to,
	// the default first.
	Communities []string
	// Title is metadata.title.
	Title string
	// EditOpen says that the published record has an edit draft open.
	EditOpen bool
	// Revision is the record's revision_id.
	Revision int
}

// InvenioFile is one file of a draft or record.
type InvenioFile struct {
	Key      string
	Status   string // "pending" until committed, then "completed"
	Checksum string // "md5:<hex>" once committed, else ""
	Size     int64
}

// Invenio is a stub of the InvenioRDM REST API (Zenodo runs InvenioRDM) as
// an http.Handler under /api, following the paths, bodies and status codes
// of InvenioRDM's documentation and source:
//
//   - POST /api/records creates a draft: 201 with the draft (id, links,
//     is_published false, pids {}, parent.id, versions.index 1). Every POST
//     makes a new draft: there is no conditional create and no server-side
//     dedup of any kind. Missing required metadata is not refused here: the
//     answer carries an "errors" array, and only publish refuses it.
//   - GET, PUT and DELETE /api/records/{id}/draft read (200), update (200)
//     and discard (204) a draft; after publishing the draft is gone (404).
//     A draft whose review is submitted cannot be discarded (400).
//   - POST /api/records/{id}/draft/files with [{"key":K},...] initialises
//     files (201 with the list); a key that exists is a 400 "File with key
//     K already exists."; more files than MaxFiles is a 400. Keys may hold
//     "/". PUT .../files/{K}/content takes the bytes (200, status still
//     pending, no checksum); to a committed file it is a 400 'File with
//     key "K" is already committed.'. POST .../files/{K}/commit commits
//     (200 with checksum "md5:<hex>", status completed); committing a file
//     whose content never arrived is a 500, committing again changes
//     nothing. GET .../draft/files lists the entries; DELETE
//     .../files/{K} removes one (204).
//   - POST /api/records/{id}/draft/actions/publish answers 202 with the
//     record, is_published true and pids.doi minted under DOIPrefix (a DOI
//     the draft names itself is kept). A draft missing title, creators,
//     publication_date or resource_type, one with files enabled but none
//     committed, or one with a file not committed, answers 400 {"status":
//     400,"message":"A validation error occurred.","errors":[{"field":...,
//     "messages":[...]}]}. A draft with a review not yet accepted or
//     declined answers 400 "You cannot publish a draft with an open review
//     request. ...".
//   - POST /api/records/{id}/draft opens the edit draft of a published
//     record, or answers the one open (201 either way); see
//     invenio_edits.go for its revisions, If-Match and locked files.
//   - GET /api/records/{id} answers a published record, or 404 "The
//     persistent identifier is not registered." for a draft never
//     published.
//   - POST /api/records/{id}/versions, {id} any published version, answers
//     201 with the draft of the next version: a new id, the same parent.id,
//     versions.index one more than the latest's, the latest version's
//     metadata (alternate identifiers and any marker among them included)
//     less metadata.version and with today's publication_date, its access
//     and files.enabled, no files, pids {}. While that draft is open the
//     same call answers 201 with it; once it is published or discarded the
//     call opens another. A draft's id gets 404 "The persistent identifier
//     is not registered.".
//   - POST /api/records/{id}/draft/actions/files-import links every file of
//     the latest published version into the draft (201 with the draft's
//     files, as GET .../draft/files answers them). A draft that holds any
//     file already answers 400 "A validation error occurred." with
//     {"field":"files.enabled","messages":["Please remove all files
//     first."]}, so a second import is refused; a first version's draft
//     has no version to import from (404).
//   - GET /api/records/{id}/versions/latest answers 301 with Location the
//     latest published version, resolved from the stub's state, never from
//     search; {id} may be any version or the parent's id. GET
//     /api/records/{id}/versions searches the published versions of {id}'s
//     parent, highest versions.index first ("sortBy":"version").
//   - PUT /api/records/{id}/draft/review with {"type":
//     "community-submission","receiver":{"community":C}} answers 200 with
//     a request in status "created", replacing one not yet submitted; a
//     submitted one is a 400 "An open review cannot be deleted.", and a new
//     version's draft a 400 (its parent's communities carry over). GET
//     reads it (200; 404 "Review for draft not found" when there is none),
//     DELETE removes it (204). POST .../draft/actions/submit-review submits
//     it: 202 with the request, status "submitted", is_open true; the
//     draft must validate as for a publish. A request not in status
//     "created" cannot be submitted again: InvenioRDM's records endpoint
//     then answers 500, its refusal having no handler there. GET
//     /api/requests/{id} reads a request whatever became of its draft.
//     AcceptReview and DeclineReview are the curator: accepting publishes
//     the draft and adds the community to parent.communities (the review
//     leaves the draft); declining leaves the draft with its declined
//     review.
//   - GET /api/user/records?q=&page=&size=&is_published=&allversions=
//     searches the user's records and drafts, one hit per record (the
//     draft until it is published) and, unless allversions is true, only
//     the latest draft of each record's versions (versions.is_latest_draft),
//     newest first: {"hits":{"hits":[...],"total":N},"aggregations":{},
//     "links":{...},"sortBy":"newest"}. GET /api/records?q=&allversions=
//     searches published records the same way, only the latest version of
//     each unless allversions is true. Searches see each record as it was
//     IndexLag after its last write. q may be empty (all) or
//     metadata.identifiers.identifier:"VALUE", a phrase query on a text
//     field, which matches every identifier that starts with VALUE. Any
//     other q is what InvenioRDM cannot parse into a field query: like
//     InvenioRDM, the stub then matches records holding any of its tokens
//     (counted in InvenioStats.FallbackQueries). A page or size below 1, or
//     a page beyond the 10,000th hit, is a 400.
//   - Request bodies must say Content-Type application/json exactly (415
//     otherwise, as flask-resources matches it verbatim); uploads
//     application/octet-stream or nothing.
//
// Faults (Config.Faults) apply to every write: creates are numbered by body,
// file inits, uploads and commits by record and key, publishes, new
// versions ("new-version"), files-imports, reviews set or removed and
// submits ("submit-review") by record, and, with the reads rule, reads by
// path. A drop commits the write and hangs up. A 502 or 504 drawn for a
// publish publishes first and then answers, as a proxy does that times out
// in front of a slow publish; every other status fault answers before
// anything commits.
//
// What it leaves out: one user (the token's), who is no community's
// curator (a submission is never included directly); communities exist
// only as ids (Communities); edit drafts in search (an edit shows there
// once published), unlocking an edit's files (RDM_LOCK_EDIT_PUBLISHED_FILES
// off, or a file-modification request), a review set at create (parent.review), cancelling or
// expiring a request and its timeline, reviews of new versions, concept
// DOIs, embargoes, access links or vocabularies (resource_type ids are not
// checked); metadata is checked only for the four required fields above;
// search parses only the one field query above and ranks nothing; file
// bytes are hashed and dropped, never stored, so downloads are not served;
// no multipart uploads; no persistence. Older InvenioRDM versions deleted a
// committed file when its content was uploaded again and answered 200 with
// "errors"; this stub follows the current refusal (400).
//
// Invenio is safe for concurrent use.
type Invenio struct {
	cfg InvenioConfig
	inj *injector
	now func() time.Time

	stubLife // mu guards what follows
	records  map[string]*ivRecord
	order    []*ivRecord
	parents  map[string]*ivParent
	requests map[string]*ivRequest // review requests not deleted
	edits    map[string]*ivRecord  // the open edit drafts, by record id
	reqOrder []*ivRequest
	seq      uint64    // record ids drawn
	pseq     uint64    // parent ids drawn
	rseq     uint64    // request ids drawn
	window   time.Time // start of the current rate-limit window
	used     int       // requests in the window
	sused    int       // searches in the window
	stats    InvenioStats
}

// ivRecord is a draft, or a published record. mu guards it.
type ivRecord struct {
	id        string
	body      map[string]any // access, files, metadata, custom_fields, pids, ...
	published bool
	discarded bool
	doi       string
	files     []*ivFile
	created   time.Time
	updated   time.Time
	parent    *ivParent  // the versions this record is one of
	index     int        // versions.index: 1 for the first version
	review    *ivRequest // the draft's community submission, until accepted or removed
	revision  int        // revision_id: one more at every write of the draft or record
	// editOf is, for an edit draft, the published record it edits (same
	// id); its files are locked.
	editOf *ivRecord

	// Search sees indexed; pending replaces it at pendingAt.
	indexed   *ivHit
	pending   *ivHit
	pendingAt time.Time
}

type ivFile struct {
	key      string
	uploaded bool
	md5      string // hex of the content received
	size     int64
	checksum string // "md5:<hex>" once committed
}

// ivHit is what search holds of a record.
type ivHit struct {
	doc         map[string]any
	identifiers []string
	tokens      map[string]bool
	created     time.Time
	gone        bool // discarded: not a hit any more

	// As they were when the record was indexed.
	parent      string
	index       int
	published   bool
	latest      bool // versions.is_latest
	latestDraft bool // versions.is_latest_draft
}

// NewInvenio returns an InvenioRDM stub for cfg.
func NewInvenio(cfg InvenioConfig) (*Invenio, error) {
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Latency < 0 || cfg.IndexLag < 0 || cfg.Window < 0 || cfg.MaxFiles < 0 || cfg.Limit < 0 || cfg.SearchLimit < 0 {
		return nil, fmt.Errorf("%w: durations and limits must not be negative", ErrConfig)
	}
	if cfg.DOIPrefix == "" {
		cfg.DOIPrefix = "10.5072"
	}
	cfg.Communities = slices.Clone(cfg.Communities)
	if cfg.MaxFiles == 0 {
		cfg.MaxFiles = 100
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	iv := &Invenio{
		cfg: cfg, stubLife: newStubLife(), now: time.Now,
		records: map[string]*ivRecord{}, parents: map[string]*ivParent{}, requests: map[string]*ivRequest{},
		edits: map[string]*ivRecord{},
	}
	iv.inj = newInjector(faults, cfg.Seed, cfg.Latency, time.Now, iv.done, injectedIVError, &iv.mu)
	return iv, nil
}

// Close ends every wait; later requests get 503. Close is idempotent.
func (iv *Invenio) Close() error { return iv.end() }

// Stats returns a snapshot of the counters.
func (iv *Invenio) Stats() InvenioStats {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	s := iv.stats
	s.Faults, s.FaultsByKind = iv.inj.count, maps.Clone(iv.inj.byKind)
	return s
}

// Records returns every draft and record not discarded, in creation order.
func (iv *Invenio) Records() []InvenioRecord {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	var out []InvenioRecord
	for _, r := range iv.order {
		if r.discarded {
			continue
		}
		rec := InvenioRecord{
			ID: r.id, Published: r.published, DOI: r.doi, Identifiers: identifierValues(r.body), Created: r.created,
			Parent: r.parent.id, Version: r.index, Communities: slices.Clone(r.parent.communities),
			EditOpen: iv.edits[r.id] != nil, Revision: r.revision,
		}
		if md, ok := r.body["metadata"].(map[string]any); ok {
			rec.Title, _ = md["title"].(string)
		}
		if r.review != nil {
			rec.Review = r.review.status
		}
		for _, f := range r.files {
			st := "pending"
			if f.checksum != "" {
				st = "completed"
			}
			rec.Files = append(rec.Files, InvenioFile{Key: f.key, Status: st, Checksum: f.checksum, Size: f.size})
		}
		out = append(out, rec)
	}
	return out
}

// ServeHTTP answers one request of the API.
func (iv *Invenio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !iv.admitRequest(&iv.stats.Requests) {
		ivError(w, http.StatusServiceUnavailable, "The server is closed.")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		ivError(w, http.StatusNotFound, "The requested URL was not found on the server.")
		return
	}
	if !iv.admit(w, isIVSearch(r.Method, rest)) {
		return
	}
	authed := iv.cfg.Token == "" || r.Header.Get("Authorization") == "Bearer "+iv.cfg.Token
	switch {
	case rest == "user/records":
		if r.Method != http.MethodGet {
			ivError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
			return
		}
		if !authed {
			ivError(w, http.StatusForbidden, "Permission denied.")
			return
		}
		iv.search(w, r)
	case rest == "records":
		switch {
		case r.Method == http.MethodGet:
			iv.searchRecords(w, r)
		case r.Method != http.MethodPost:
			ivError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
		case !authed:
			ivError(w, http.StatusForbidden, "Permission denied.")
		default:
			iv.create(w, r)
		}
	case strings.HasPrefix(rest, "records/"):
		id, sub, _ := strings.Cut(strings.TrimPrefix(rest, "records/"), "/")
		iv.serveRecord(w, r, id, sub, authed)
	case strings.HasPrefix(rest, "requests/") && r.Method == http.MethodGet:
		if !authed {
			ivError(w, http.StatusForbidden, "Permission denied.")
			return
		}
		iv.readRequest(w, r, strings.TrimPrefix(rest, "requests/"))
	default:
		ivError(w, http.StatusNotFound, "The requested URL was not found on the server.")
	}
}

// isIVSearch reports whether a request counts against the search budget:
// the searches of records, of the user's records and of a record's versions.
func isIVSearch(method, rest string) bool {
	if rest == "user/records" {
		return true
	}
	return method == http.MethodGet && (rest == "records" || strings.HasPrefix(rest, "records/") && strings.HasSuffix(rest, "/versions"))
}

// serveRecord answers the paths under /api/records/{id}: reads of published
// records and their versions for anyone, everything else for the token's
// user.
func (iv *Invenio) serveRecord(w http.ResponseWriter, r *http.Request, id, sub string, authed bool) {
	if r.Method == http.MethodGet {
		switch sub {
		case "":
			iv.readRecord(w, r, id, authed)
			return
		case "versions":
			iv.listVersions(w, r, id)
			return
		case "versions/latest":
			iv.readLatest(w, r, id)
			return
		}
	}
	if !authed {
		ivError(w, http.StatusForbidden, "Permission denied.")
		return
	}
	switch {
	case sub == "versions" && r.Method == http.MethodPost:
		iv.newVersion(w, r, id)
	case sub == "draft/actions/files-import" && r.Method == http.MethodPost:
		iv.importFiles(w, r, id)
	case sub == "draft/review":
		iv.serveReview(w, r, id)
	case sub == "draft/actions/submit-review" && r.Method == http.MethodPost:
		iv.submitReview(w, r, id)
	default:
		iv.serveDraft(w, r, id, sub)
	}
}

// serveDraft answers a draft, its publish action and its files.
func (iv *Invenio) serveDraft(w http.ResponseWriter, r *http.Request, id, sub string) {
	switch {
	case sub == "draft":
		switch r.Method {
		case http.MethodPost:
			iv.edit(w, r, id)
		case http.MethodGet:
			iv.readDraft(w, r, id)
		case http.MethodPut:
			iv.updateDraft(w, r, id)
		case http.MethodDelete:
			iv.discard(w, r, id)
		default:
			ivError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
		}
	case sub == "draft/actions/publish" && r.Method == http.MethodPost:
		iv.publish(w, r, id)
	case (sub == "draft/files" || strings.HasPrefix(sub, "draft/files/")) && r.Method != http.MethodGet && iv.locked(id):
		ivError(w, http.StatusForbidden, "Bucket is locked for modifications.")
	case sub == "draft/files":
		switch r.Method {
		case http.MethodGet:
			iv.listFiles(w, r, id)
		case http.MethodPost:
			iv.initFiles(w, r, id)
		default:
			ivError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
		}
	case strings.HasPrefix(sub, "draft/files/"):
		key := strings.TrimPrefix(sub, "draft/files/")
		switch {
		case strings.HasSuffix(key, "/content") && r.Method == http.MethodPut:
			iv.upload(w, r, id, strings.TrimSuffix(key, "/content"))
		case strings.HasSuffix(key, "/commit") && r.Method == http.MethodPost:
			iv.commit(w, r, id, strings.TrimSuffix(key, "/commit"))
		case r.Method == http.MethodGet:
			iv.readFile(w, r, id, key)
		case r.Method == http.MethodDelete:
			iv.deleteFile(w, id, key)
		default:
			ivError(w, http.StatusMethodNotAllowed, "The method is not allowed for the requested URL.")
		}
	default:
		ivError(w, http.StatusNotFound, "The requested URL was not found on the server.")
	}
}

// admit applies the rate limit: it answers 429 and returns false for a
// request over its budget, and sets the X-RateLimit headers on every answer.
func (iv *Invenio) admit(w http.ResponseWriter, search bool) bool {
	limit := iv.cfg.Limit
	if search {
		limit = iv.cfg.SearchLimit
	}
	if limit == 0 {
		return true
	}
	iv.mu.Lock()
	now := iv.now()
	if now.Sub(iv.window) >= iv.cfg.Window {
		iv.window, iv.used, iv.sused = now, 0, 0
	}
	used := &iv.used
	if search {
		used = &iv.sused
	}
	over := *used >= limit
	if !over {
		*used++
	} else {
		iv.stats.RateLimited++
	}
	remaining := limit - *used
	reset := iv.window.Add(iv.cfg.Window)
	iv.mu.Unlock()
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(float64(reset.UnixNano())/1e9)), 10))
	if !over {
		return true
	}
	if iv.cfg.RetryAfter {
		h.Set("Retry-After", strconv.Itoa(int(math.Ceil(reset.Sub(now).Seconds()))))
	}
	ivError(w, http.StatusTooManyRequests, fmt.Sprintf("%d per %s", limit, iv.cfg.Window))
	return false
}

// create serves POST /api/records.
func (iv *Invenio) create(w http.ResponseWriter, r *http.Request) {
	raw, body, ok := readIVJSON(w, r)
	if !ok {
		return
	}
	doc, isObject := body.(map[string]any)
	if !isObject {
		ivError(w, http.StatusBadRequest, "Invalid JSON: the body must be an object.")
		return
	}
	sum := sha256.Sum256(raw)
	ft, ok := iv.admitWrite(w, "create", hex.EncodeToString(sum[:]))
	if !ok {
		return
	}
	iv.mu.Lock()
	now := iv.now()
	rec := &ivRecord{id: iv.newID(), body: draftBody(doc), created: now, updated: now, index: 1, revision: 1}
	rec.parent = iv.newParent()
	rec.parent.next = rec
	iv.records[rec.id] = rec
	iv.order = append(iv.order, rec)
	iv.stats.Drafts++
	iv.reindex(rec)
	out := rec.answer(r, partialErrors(rec.body))
	iv.mu.Unlock()
	iv.finish(w, r, ft, http.StatusCreated, out)
}

// draftBody is the stored part of a create or update body.
func draftBody(doc map[string]any) map[string]any {
	body := map[string]any{}
	for _, name := range []string{"access", "files", "metadata", "custom_fields", "pids"} {
		if v, ok := doc[name]; ok {
			body[name] = v
		}
	}
	if _, ok := body["metadata"].(map[string]any); !ok {
		body["metadata"] = map[string]any{}
	}
	if _, ok := body["pids"].(map[string]any); !ok {
		body["pids"] = map[string]any{}
	}
	return body
}

// readDraft serves GET /api/records/{id}/draft.
func (iv *Invenio) readDraft(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	var out []byte
	if rec != nil {
		out = rec.answer(r, nil)
	}
	iv.mu.Unlock()
	if rec == nil {
		ivError(w, http.StatusNotFound, "Draft not found.")
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// updateDraft serves PUT /api/records/{id}/draft.
func (iv *Invenio) updateDraft(w http.ResponseWriter, r *http.Request, id string) {
	_, body, ok := readIVJSON(w, r)
	if !ok {
		return
	}
	doc, isObject := body.(map[string]any)
	if !isObject {
		ivError(w, http.StatusBadRequest, "Invalid JSON: the body must be an object.")
		return
	}
	ft, ok := iv.admitWrite(w, "update", id)
	if !ok {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	var out []byte
	mismatch := ""
	if rec != nil {
		if mismatch = iv.ifMatch(r, rec); mismatch == "" {
			if rec.editOf != nil {
				rec.body = editBody(doc, rec.editOf)
			} else {
				rec.body = draftBody(doc)
				iv.reindex(rec)
			}
			rec.updated = iv.now()
			rec.revision++
			out = rec.answer(r, partialErrors(rec.body))
		}
	}
	iv.mu.Unlock()
	switch {
	case rec == nil:
		ivError(w, http.StatusNotFound, "Draft not found.")
	case mismatch != "":
		ivPreconditionFailed(w, mismatch)
	default:
		iv.finish(w, r, ft, http.StatusOK, out)
	}
}

// discard serves DELETE /api/records/{id}/draft: the draft, its files and
// a review not yet submitted are gone, and the index is refreshed at once.
// A draft whose review is submitted is refused, as InvenioRDM does.
func (iv *Invenio) discard(w http.ResponseWriter, r *http.Request, id string) {
	iv.mu.Lock()
	rec := iv.draft(id)
	reviewOpen := rec != nil && rec.review != nil && rec.review.open()
	mismatch := ""
	if rec != nil {
		mismatch = iv.ifMatch(r, rec)
	}
	switch {
	case mismatch != "":
		iv.mu.Unlock()
		ivPreconditionFailed(w, mismatch)
		return
	case rec != nil && rec.editOf != nil:
		// An edit draft goes; its record stays as published.
		delete(iv.edits, id)
		iv.stats.Discarded++
		iv.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if rec != nil && !reviewOpen {
		rec.discarded = true
		iv.stats.Discarded++
		iv.dropReview(rec)
		if p := rec.parent; p.next == rec {
			p.next = nil
			if p.latest != nil {
				iv.reindex(p.latest) // is the latest draft again
			}
		}
		rec.pending, rec.pendingAt = &ivHit{gone: true}, iv.now()
		iv.refresh(iv.now().Add(time.Duration(math.MaxInt64 / 2)))
	}
	iv.mu.Unlock()
	switch {
	case rec == nil:
		ivError(w, http.StatusNotFound, "Draft not found.")
	case reviewOpen:
		// invenio-rdm-records services/components/review.py, delete_draft.
		ivError(w, http.StatusBadRequest, "You cannot delete a draft with an open review. Please cancel the review first.")
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// readRecord serves GET /api/records/{id}.
func (iv *Invenio) readRecord(w http.ResponseWriter, r *http.Request, id string, authed bool) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	rec := iv.records[id]
	var out []byte
	if rec != nil && rec.published {
		out = rec.answer(r, nil)
	}
	iv.mu.Unlock()
	if out == nil {
		ivError(w, http.StatusNotFound, "The persistent identifier is not registered.")
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// publish serves POST /api/records/{id}/draft/actions/publish.
func (iv *Invenio) publish(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "publish", id, true)
	if answered {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	var errs []ivFieldError
	reviewOpen := false
	if rec != nil {
		errs = publishErrors(rec)
		reviewOpen = rec.review != nil && !rec.review.closed()
	}
	iv.mu.Unlock()
	switch {
	case rec == nil:
		ivError(w, http.StatusNotFound, "Draft not found.")
		return
	case reviewOpen:
		// invenio-rdm-records services/components/review.py, publish.
		ivError(w, http.StatusBadRequest, "You cannot publish a draft with an open review request. Please cancel the review request first.")
		return
	case len(errs) > 0:
		ivValidation(w, errs)
		return
	}
	if !iv.inj.delay() {
		ivError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	iv.mu.Lock()
	var out []byte
	switch {
	case rec.editOf != nil && iv.edits[id] != rec:
		rec = nil // published or discarded meanwhile
	case rec.editOf != nil:
		rec = iv.commitEdit(rec)
		out = rec.answer(r, nil)
	case rec.published || rec.discarded:
		rec = nil // published or discarded meanwhile by a concurrent request
	default:
		iv.commitPublish(rec)
		out = rec.answer(r, nil)
	}
	iv.mu.Unlock()
	if rec == nil {
		ivError(w, http.StatusNotFound, "Draft not found.")
		return
	}
	if ft.Status == http.StatusBadGateway || ft.Status == http.StatusGatewayTimeout {
		iv.inj.counted(ft)
		injectedIVError(w, ft.Status)
		return
	}
	iv.finish(w, r, ft, http.StatusAccepted, out)
}

// commitPublish publishes the draft rec: it mints its DOI (unless it names
// one) and makes it the latest version of its parent. iv.mu is held.
func (iv *Invenio) commitPublish(rec *ivRecord) {
	rec.published = true
	rec.revision++
	rec.updated = iv.now()
	rec.doi = iv.cfg.DOIPrefix + "/" + rec.id
	pids, _ := rec.body["pids"].(map[string]any)
	if doi, ok := pids["doi"].(map[string]any); ok && doi["identifier"] != nil {
		rec.doi, _ = doi["identifier"].(string)
	} else {
		pids["doi"] = map[string]any{"identifier": rec.doi, "provider": "datacite", "client": "datacite"}
	}
	iv.stats.Published++
	p := rec.parent
	previous := p.latest
	p.latest = rec
	if p.next == rec {
		p.next = nil
	}
	iv.reindex(rec)
	if previous != nil {
		// Upstream reindexes the version that was latest (is_latest false now).
		iv.reindex(previous)
	}
}

// publishErrors are the validation errors that refuse a publish. iv.mu is
// held.
func publishErrors(rec *ivRecord) []ivFieldError {
	errs := partialErrors(rec.body)
	files, _ := rec.body["files"].(map[string]any)
	enabled, _ := files["enabled"].(bool)
	committed := 0
	for _, f := range rec.files {
		if f.checksum == "" {
			errs = append(errs, ivFieldError{Field: "files", Messages: []string{"File " + f.key + " is not committed."}})
		} else {
			committed++
		}
	}
	switch {
	case enabled && committed == 0:
		errs = append(errs, ivFieldError{Field: "files.enabled", Messages: []string{"Missing uploaded files. To disable files for this record please mark it as metadata-only."}})
	case !enabled && len(rec.files) > 0:
		errs = append(errs, ivFieldError{Field: "files.enabled", Messages: []string{"Files are disabled for this record, but it has files."}})
	}
	return errs
}

// partialErrors lists the required metadata a draft lacks: a create or
// update answers them in "errors" without refusing; a publish refuses them.
func partialErrors(body map[string]any) []ivFieldError {
	md, _ := body["metadata"].(map[string]any)
	var errs []ivFieldError
	for _, name := range []string{"resource_type", "title", "publication_date", "creators"} {
		v, ok := md[name]
		empty := !ok || v == nil || v == ""
		if list, isList := v.([]any); isList && len(list) == 0 {
			empty = true
		}
		if empty {
			errs = append(errs, ivFieldError{Field: "metadata." + name, Messages: []string{"Missing data for required field."}})
		}
	}
	return errs
}

// initFiles serves POST /api/records/{id}/draft/files.
func (iv *Invenio) initFiles(w http.ResponseWriter, r *http.Request, id string) {
	_, body, ok := readIVJSON(w, r)
	if !ok {
		return
	}
	list, _ := body.([]any)
	var keys []string
	for _, item := range list {
		m, _ := item.(map[string]any)
		k, _ := m["key"].(string)
		if k == "" {
			ivValidation(w, []ivFieldError{{Field: "key", Messages: []string{"Missing data for required field."}}})
			return
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		ivError(w, http.StatusBadRequest, "Invalid JSON: want a list of {\"key\": ...}.")
		return
	}
	ft, ok := iv.admitWrite(w, "file-init", id+"/"+strings.Join(keys, "\x00"))
	if !ok {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	status, msg := 0, ""
	switch {
	case rec == nil:
		status, msg = http.StatusNotFound, "Draft not found."
	case len(rec.files)+len(keys) > iv.cfg.MaxFiles:
		status, msg = http.StatusBadRequest, fmt.Sprintf("Uploading more than %d files is not supported.", iv.cfg.MaxFiles)
	default:
		for _, k := range keys {
			if rec.file(k) != nil {
				status, msg = http.StatusBadRequest, "File with key "+k+" already exists."
				break
			}
		}
	}
	var out []byte
	if status == 0 {
		for _, k := range keys {
			rec.files = append(rec.files, &ivFile{key: k})
			iv.stats.FileInits++
		}
		rec.updated = iv.now()
		out = rec.filesAnswer(r)
	}
	iv.mu.Unlock()
	if status != 0 {
		ivError(w, status, msg)
		return
	}
	iv.finish(w, r, ft, http.StatusCreated, out)
}

// listFiles serves GET /api/records/{id}/draft/files.
func (iv *Invenio) listFiles(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	var out []byte
	if rec != nil {
		out = rec.filesAnswer(r)
	}
	iv.mu.Unlock()
	if rec == nil {
		ivError(w, http.StatusNotFound, "Draft not found.")
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// readFile serves GET /api/records/{id}/draft/files/{key}.
func (iv *Invenio) readFile(w http.ResponseWriter, r *http.Request, id, key string) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	var out []byte
	if rec := iv.draft(id); rec != nil {
		if f := rec.file(key); f != nil {
			out, _ = json.Marshal(rec.fileEntry(r, f))
		}
	}
	iv.mu.Unlock()
	if out == nil {
		ivError(w, http.StatusNotFound, "File not found.")
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// deleteFile serves DELETE /api/records/{id}/draft/files/{key}.
func (iv *Invenio) deleteFile(w http.ResponseWriter, id, key string) {
	iv.mu.Lock()
	found := false
	if rec := iv.draft(id); rec != nil {
		for i, f := range rec.files {
			if f.key == key {
				rec.files = slices.Delete(rec.files, i, i+1)
				found = true
				break
			}
		}
	}
	iv.mu.Unlock()
	if !found {
		ivError(w, http.StatusNotFound, "File not found.")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// upload serves PUT /api/records/{id}/draft/files/{key}/content.
func (iv *Invenio) upload(w http.ResponseWriter, r *http.Request, id, key string) {
	if ct := r.Header.Get("Content-Type"); ct != "" && ct != "application/octet-stream" {
		ivError(w, http.StatusUnsupportedMediaType, "Invalid Content-Type header.")
		return
	}
	iv.mu.Lock()
	status, msg := 0, ""
	if rec := iv.draft(id); rec == nil {
		status, msg = http.StatusNotFound, "Draft not found."
	} else if f := rec.file(key); f == nil {
		status, msg = http.StatusNotFound, "File with key "+key+" does not exist."
	} else if f.checksum != "" {
		status, msg = http.StatusBadRequest, `File with key "`+key+`" is already committed.`
	}
	iv.mu.Unlock()
	if status != 0 {
		ivError(w, status, msg)
		return
	}
	ft, answered := iv.fault(w, "upload", id+"/"+key, false)
	if answered {
		return
	}
	h := md5.New()
	n, err := io.Copy(h, io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil {
		ivError(w, http.StatusBadRequest, `Transfer of File with key "`+key+`" failed.`)
		return
	}
	if n > DefaultMaxBodyBytes {
		ivError(w, http.StatusRequestEntityTooLarge, "File size limit exceeded.")
		return
	}
	if !iv.inj.delay() {
		ivError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	iv.mu.Lock()
	var out []byte
	if rec := iv.draft(id); rec != nil {
		if f := rec.file(key); f != nil && f.checksum == "" {
			f.uploaded, f.md5, f.size = true, hex.EncodeToString(h.Sum(nil)), n
			iv.stats.Uploads++
			out, _ = json.Marshal(rec.fileEntry(r, f))
		}
	}
	iv.mu.Unlock()
	if out == nil {
		ivError(w, http.StatusNotFound, "File with key "+key+" does not exist.")
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// commit serves POST /api/records/{id}/draft/files/{key}/commit.
func (iv *Invenio) commit(w http.ResponseWriter, r *http.Request, id, key string) {
	ft, ok := iv.admitWrite(w, "commit", id+"/"+key)
	if !ok {
		return
	}
	iv.mu.Lock()
	status, msg := 0, ""
	var out []byte
	if rec := iv.draft(id); rec == nil {
		status, msg = http.StatusNotFound, "Draft not found."
	} else if f := rec.file(key); f == nil {
		status, msg = http.StatusNotFound, "File with key "+key+" does not exist."
	} else if !f.uploaded {
		// InvenioRDM raises a bare exception here.
		status, msg = http.StatusInternalServerError, "Internal server error."
	} else {
		if f.checksum == "" {
			f.checksum = "md5:" + f.md5
			iv.stats.Commits++
		}
		out, _ = json.Marshal(rec.fileEntry(r, f))
	}
	iv.mu.Unlock()
	if status != 0 {
		ivError(w, status, msg)
		return
	}
	iv.finish(w, r, ft, http.StatusOK, out)
}

// search serves GET /api/user/records: the user's drafts and records, one
// hit per record and, unless allversions is true, only the latest draft of
// each record's versions (versions.is_latest_draft), newest first.
func (iv *Invenio) search(w http.ResponseWriter, r *http.Request) {
	sp, ok := parseIVSearch(w, r)
	if !ok {
		return
	}
	ft, answered := iv.fault(w, "read", "search\x00"+r.URL.RawQuery, false)
	if answered {
		return
	}
	published := r.URL.Query().Get("is_published")
	hits := iv.hits(sp, func(h *ivHit) bool {
		if published != "" && strconv.FormatBool(h.published) != published {
			return false
		}
		return sp.all || h.latestDraft
	})
	slices.SortStableFunc(hits, func(a, b *ivHit) int { return b.created.Compare(a.created) })
	iv.finish(w, r, ft, http.StatusOK, hitsAnswer(r, hits, sp, "newest", true))
}

// ivSearch is what a search asks for: its page, its query, and whether it
// wants every version or only the latest.
type ivSearch struct {
	page, size int
	all        bool // allversions=true
	match      func(*ivHit) bool
	parsed     bool // q was a query the stub parses
}

// parseIVSearch reads page, size, allversions and q, and answers 400 for
// a value InvenioRDM refuses.
func parseIVSearch(w http.ResponseWriter, r *http.Request) (ivSearch, bool) {
	query := r.URL.Query()
	sp := ivSearch{page: 1, size: 10}
	var errs []ivFieldError
	for _, param := range []struct {
		name string
		dst  *int
	}{{"page", &sp.page}, {"size", &sp.size}} {
		if v := query.Get(param.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				errs = append(errs, ivFieldError{Field: param.name, Messages: []string{"Must be greater than or equal to 1."}})
				continue
			}
			*param.dst = n
		}
	}
	if v := query.Get("allversions"); v != "" {
		all, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, ivFieldError{Field: "allversions", Messages: []string{"Not a valid boolean."}})
		}
		sp.all = all
	}
	if len(errs) > 0 {
		ivValidation(w, errs)
		return sp, false
	}
	if sp.page*sp.size > 10000 {
		ivError(w, http.StatusBadRequest, "Result window is too large: page * size must be at most 10000.")
		return sp, false
	}
	sp.match, sp.parsed = parseIVQuery(query.Get("q"))
	return sp, true
}

// hits are the indexed records that match sp's query and keep, in creation
// order. It counts the search.
func (iv *Invenio) hits(sp ivSearch, keep func(*ivHit) bool) []*ivHit {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.stats.Searches++
	if !sp.parsed {
		iv.stats.FallbackQueries++
	}
	iv.refresh(iv.now())
	var hits []*ivHit
	for _, rec := range iv.order {
		if h := rec.indexed; h != nil && !h.gone && sp.match(h) && keep(h) {
			hits = append(hits, h)
		}
	}
	return hits
}

// hitsAnswer is the JSON of one page of hits.
func hitsAnswer(r *http.Request, hits []*ivHit, sp ivSearch, sortBy string, aggregations bool) []byte {
	total := len(hits)
	from := min((sp.page-1)*sp.size, total)
	docs := make([]map[string]any, 0, sp.size)
	for _, h := range hits[from:min(from+sp.size, total)] {
		docs = append(docs, h.doc)
	}
	links := map[string]any{"self": pageURL(r, sp.page, sp.size)}
	if from+sp.size < total {
		links["next"] = pageURL(r, sp.page+1, sp.size)
	}
	answer := map[string]any{"hits": map[string]any{"hits": docs, "total": total}, "links": links, "sortBy": sortBy}
	if aggregations {
		answer["aggregations"] = map[string]any{}
	}
	out, _ := json.Marshal(answer)
	return out
}

// parseIVQuery returns the matcher for q and whether q was a query the stub
// parses: empty, or metadata.identifiers.identifier:"VALUE". Anything else
// falls back to matching any of q's tokens.
func parseIVQuery(q string) (func(*ivHit) bool, bool) {
	q = strings.TrimSpace(q)
	if q == "" {
		return func(*ivHit) bool { return true }, true
	}
	if v, ok := strings.CutPrefix(q, `metadata.identifiers.identifier:"`); ok && strings.HasSuffix(v, `"`) && len(v) > 1 {
		value := strings.TrimSuffix(v, `"`)
		if !strings.ContainsAny(value, `"\`) {
			return func(h *ivHit) bool {
				for _, id := range h.identifiers {
					if strings.HasPrefix(id, value) {
						return true
					}
				}
				return false
			}, true
		}
	}
	toks := tokens(q)
	return func(h *ivHit) bool {
		for t := range toks {
			if h.tokens[t] {
				return true
			}
		}
		return false
	}, false
}

// tokens splits s into lower-case runs of letters and digits.
func tokens(s string) map[string]bool {
	out := map[string]bool{}
	for _, t := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		out[t] = true
	}
	return out
}

// pageURL is the search URL of another page.
func pageURL(r *http.Request, page, size int) string {
	q := r.URL.Query()
	q.Set("page", strconv.Itoa(page))
	q.Set("size", strconv.Itoa(size))
	return absURL(r, r.URL.Path) + "?" + q.Encode()
}

// reindex queues what search will show of rec after the lag. iv.mu is held.
func (iv *Invenio) reindex(rec *ivRecord) {
	h := &ivHit{
		doc: rec.hitDoc(), identifiers: identifierValues(rec.body), created: rec.created,
		parent: rec.parent.id, index: rec.index, published: rec.published,
		latest: rec.isLatest(), latestDraft: rec.isLatestDraft(),
	}
	md, _ := rec.body["metadata"].(map[string]any)
	title, _ := md["title"].(string)
	h.tokens = tokens(title + " " + strings.Join(h.identifiers, " ") + " " + rec.id)
	rec.pending, rec.pendingAt = h, iv.now().Add(iv.cfg.IndexLag)
	if iv.cfg.IndexLag == 0 {
		rec.indexed, rec.pending = h, nil
	}
}

// refresh makes every write queued by now searchable. iv.mu is held.
func (iv *Invenio) refresh(now time.Time) {
	for _, rec := range iv.order {
		if rec.pending != nil && !now.Before(rec.pendingAt) {
			rec.indexed, rec.pending = rec.pending, nil
		}
	}
}

// draft returns the draft id, nil when there is none (never created,
// discarded, or published). iv.mu is held.
func (iv *Invenio) draft(id string) *ivRecord {
	rec := iv.records[id]
	if rec == nil || rec.discarded || rec.published {
		return iv.edits[id] // nil but for a published record's edit draft
	}
	return rec
}

// newID draws a record id shaped like InvenioRDM's ("abcde-fgh12").
// iv.mu is held.
func (iv *Invenio) newID() string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	for {
		iv.seq++
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(iv.cfg.Seed))
		binary.BigEndian.PutUint64(b[8:], iv.seq)
		sum := sha256.Sum256(b[:])
		var id [11]byte
		for i, j := 0, 0; i < len(id); i++ {
			if i == 5 {
				id[i] = '-'
				continue
			}
			id[i] = alphabet[sum[j]%32]
			j++
		}
		if !iv.taken(string(id[:])) {
			return string(id[:])
		}
	}
}

// taken reports whether id names a record or a parent. iv.mu is held.
func (iv *Invenio) taken(id string) bool {
	_, rec := iv.records[id]
	_, parent := iv.parents[id]
	return rec || parent
}

// fault numbers a write (or, with the reads rule, a read) and injects the
// fault drawn for it when it strikes before anything commits. late, for a
// publish, leaves a 502 or 504 to strike after the commit.
func (iv *Invenio) fault(w http.ResponseWriter, class, key string, late bool) (fault, bool) {
	if late {
		iv.mu.Lock()
		ak := class + "\x00" + key
		iv.inj.attempts[ak]++
		attempt := iv.inj.attempts[ak]
		iv.mu.Unlock()
		ft, _ := iv.inj.faults.Draw(iv.inj.seed, class, key, attempt)
		if ft.Status == http.StatusBadGateway || ft.Status == http.StatusGatewayTimeout {
			return ft, false
		}
		return iv.inj.apply(w, ft)
	}
	return iv.inj.early(w, class, key)
}

// admitWrite draws the fault of a write (class, key) that answers before
// anything commits, then waits out the stub's latency: ok is false when
// the request is answered already (a fault, or a stub closing meanwhile).
func (iv *Invenio) admitWrite(w http.ResponseWriter, class, key string) (ft fault, ok bool) {
	ft, answered := iv.fault(w, class, key, false)
	if answered {
		return ft, false
	}
	if !iv.inj.delay() {
		ivError(w, http.StatusServiceUnavailable, "The server is closing.")
		return ft, false
	}
	return ft, true
}

// finish writes a JSON answer, unless ft drops or trickles it.
func (iv *Invenio) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	setETag(w, body)
	iv.inj.finish(w, r, ft, status, nil, body)
}

func (rec *ivRecord) file(key string) *ivFile {
	for _, f := range rec.files {
		if f.key == key {
			return f
		}
	}
	return nil
}

// doc is the record as the API answers it. iv.mu is held.
func (rec *ivRecord) doc(r *http.Request) map[string]any {
	d := map[string]any{}
	for k, v := range rec.body {
		d[k] = v
	}
	base := "/api/records/" + rec.id
	links := map[string]any{}
	if rec.published {
		links["self"] = absURL(r, base)
		links["files"] = absURL(r, base+"/files")
		links["self_html"] = absURL(r, "/records/"+rec.id)
	} else {
		links["self"] = absURL(r, base+"/draft")
		links["files"] = absURL(r, base+"/draft/files")
		links["publish"] = absURL(r, base+"/draft/actions/publish")
		links["self_html"] = absURL(r, "/uploads/"+rec.id)
	}
	if !rec.published {
		links["review"] = absURL(r, base+"/draft/review")
		links["submit-review"] = absURL(r, base+"/draft/actions/submit-review")
	}
	links["latest"] = absURL(r, base+"/versions/latest")
	links["versions"] = absURL(r, base+"/versions")
	if rec.published {
		d["files"] = rec.filesDoc()
	}
	d["id"] = rec.id
	d["is_published"] = rec.published || rec.editOf != nil // an edit draft's status is "published"
	d["is_draft"] = !rec.published
	d["parent"] = rec.parentDoc(true)
	d["versions"] = rec.versionsDoc()
	d["links"] = links
	d["created"] = rec.created.UTC().Format(time.RFC3339Nano)
	d["updated"] = rec.updated.UTC().Format(time.RFC3339Nano)
	d["revision_id"] = rec.revision
	return d
}

// hitDoc is what search answers of rec: the record without file entries.
func (rec *ivRecord) hitDoc() map[string]any {
	d := map[string]any{}
	for k, v := range rec.body {
		d[k] = v
	}
	d["id"] = rec.id
	d["is_published"] = rec.published
	d["is_draft"] = !rec.published
	d["parent"] = rec.parentDoc(false)
	d["versions"] = rec.versionsDoc()
	d["created"] = rec.created.UTC().Format(time.RFC3339Nano)
	// Marshal once, so that later writes to rec.body do not change what
	// the index holds.
	raw, _ := json.Marshal(d)
	var frozen map[string]any
	_ = json.Unmarshal(raw, &frozen)
	return frozen
}

// answer is the JSON of rec, with errors when set. iv.mu is held.
func (rec *ivRecord) answer(r *http.Request, errs []ivFieldError) []byte {
	d := rec.doc(r)
	if len(errs) > 0 {
		d["errors"] = errs
	}
	b, _ := json.Marshal(d)
	return b
}

// filesAnswer is the JSON of a draft's file list. iv.mu is held.
func (rec *ivRecord) filesAnswer(r *http.Request) []byte {
	entries := make([]map[string]any, 0, len(rec.files))
	for _, f := range rec.files {
		entries = append(entries, rec.fileEntry(r, f))
	}
	files, _ := rec.body["files"].(map[string]any)
	enabled, _ := files["enabled"].(bool)
	b, _ := json.Marshal(map[string]any{
		"enabled": enabled, "default_preview": nil, "order": []string{}, "entries": entries,
		"links": map[string]any{"self": absURL(r, "/api/records/"+rec.id+"/draft/files")},
	})
	return b
}

// fileEntry is one file as the API answers it. iv.mu is held.
func (rec *ivRecord) fileEntry(r *http.Request, f *ivFile) map[string]any {
	base := "/api/records/" + rec.id + "/draft/files/" + escapeKey(f.key)
	e := map[string]any{
		"key": f.key, "status": "pending", "metadata": nil,
		"links": map[string]any{
			"self": absURL(r, base), "content": absURL(r, base+"/content"), "commit": absURL(r, base+"/commit"),
		},
	}
	if f.checksum != "" {
		e["status"], e["checksum"], e["size"], e["mimetype"] = "completed", f.checksum, f.size, "application/octet-stream"
	}
	return e
}

// escapeKey escapes a file key for a URL path, keeping its "/".
func escapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// identifierValues are the values of metadata.identifiers in body.
func identifierValues(body map[string]any) []string {
	md, _ := body["metadata"].(map[string]any)
	list, _ := md["identifiers"].([]any)
	var out []string
	for _, item := range list {
		m, _ := item.(map[string]any)
		if v, ok := m["identifier"].(string); ok {
			out = append(out, v)
		}
	}
	return out
}

// readIVJSON reads a JSON request body: its bytes and its value. The
// Content-Type must be application/json exactly.
func readIVJSON(w http.ResponseWriter, r *http.Request) ([]byte, any, bool) {
	if r.Header.Get("Content-Type") != "application/json" {
		ivError(w, http.StatusUnsupportedMediaType, "Invalid Content-Type header.")
		return nil, nil, false
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil || len(raw) > DefaultMaxBodyBytes {
		ivError(w, http.StatusRequestEntityTooLarge, "The request body is too large.")
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		ivError(w, http.StatusBadRequest, "Unable to decode JSON data in request body.")
		return nil, nil, false
	}
	return raw, v, true
}

// absURL is the absolute URL of path on the request's host.
func absURL(r *http.Request, path string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + path
}

// ivFieldError is one entry of a validation error's "errors".
type ivFieldError struct {
	Field    string   `json:"field"`
	Messages []string `json:"messages"`
}

func ivError(w http.ResponseWriter, status int, message string) {
	ivWrite(w, status, map[string]any{"status": status, "message": message})
}

func ivValidation(w http.ResponseWriter, errs []ivFieldError) {
	ivWrite(w, http.StatusBadRequest, map[string]any{"status": 400, "message": "A validation error occurred.", "errors": errs})
}

func ivWrite(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// injectedIVError answers an injected status fault.
func injectedIVError(w http.ResponseWriter, status int) {
	ivError(w, status, http.StatusText(status))
}

// InvenioServer is an InvenioRDM stub listening on 127.0.0.1 with a random
// port, for tests: point a client at API and Close it. It is safe for
// concurrent use by multiple goroutines.
type InvenioServer struct {
	// URL is the server's root, "http://127.0.0.1:PORT"; API is URL +
	// "/api", the endpoint a client takes.
	URL, API string

	iv *Invenio
	lo *loopback
}

// NewInvenioServer starts an InvenioRDM stub for cfg on 127.0.0.1.
func NewInvenioServer(cfg InvenioConfig) (*InvenioServer, error) {
	iv, err := NewInvenio(cfg)
	if err != nil {
		return nil, err
	}
	lo, err := startLoopback(iv, func(w http.ResponseWriter, _ *http.Request) {
		ivError(w, http.StatusServiceUnavailable, "The server is closed.")
	})
	if err != nil {
		return nil, err
	}
	return &InvenioServer{URL: lo.url, API: lo.url + "/api", iv: iv, lo: lo}, nil
}

// Client returns an HTTP client for the server. Its idle connections are
// closed by Close.
func (s *InvenioServer) Client() *http.Client { return s.lo.client }

// Stats returns a snapshot of the stub's counters.
func (s *InvenioServer) Stats() InvenioStats { return s.iv.Stats() }

// Records returns every draft and record the stub holds, in creation order.
func (s *InvenioServer) Records() []InvenioRecord { return s.iv.Records() }

// Close ends every wait, closes the listener and every connection, and
// waits for the handlers to return. Close is idempotent.
func (s *InvenioServer) Close() { s.lo.close(s.iv.Close, nil) }
