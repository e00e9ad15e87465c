package repotest

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// DataverseConfig configures a Dataverse stub. The zero value asks for no
// API token, holds no lock after a publish or an ingest, lets search see
// every write at once, limits nothing and injects no faults. NewDataverse
// copies it; later changes have no effect.
type DataverseConfig struct {
	// Token, when set, is the API token every write must carry as
	// "X-Dataverse-key: <Token>" (or "?key=<Token>"). Another token is a
	// 401 "Bad API key" everywhere; no token at all is the guest, refused
	// per endpoint as Dataverse refuses it (see Dataverse). With Token
	// empty every request acts as the one user.
	Token string
	// Alias is the one collection (dataverse) the stub holds; default
	// "root".
	Alias string
	// Subcollections are the names of collections inside it, which hold
	// nothing: its contents listing names them before its datasets, as
	// Dataverse lists child collections first.
	Subcollections []string
	// DOIPrefix is the authority of the DOIs minted at create; default
	// "10.5072" (DataCite's test prefix). Identifiers are "FK2/" and six
	// letters or digits, as Dataverse's default shoulder and generator
	// make them.
	DOIPrefix string
	// PublishLag is how long a publish holds the finalizePublication lock
	// after it is accepted; the version is RELEASED once it ends.
	PublishLag time.Duration
	// IngestLag is how long tabular ingest holds the Ingest lock after a
	// tabular file (.csv, .tsv) is added; its rename to .tab shows once it
	// ends.
	IngestLag time.Duration
	// IndexLag is how long a write takes to show in search: search sees
	// each dataset as it was IndexLag after its last write.
	IndexLag time.Duration
	// Unindexed is the share, in [0,1], of datasets search never shows,
	// as when Dataverse's index of a dataset fails (it only logs it);
	// which ones is drawn from Seed and the dataset's id.
	Unindexed float64
	// Limit, when set, is the number of times each command (create, add,
	// publish) may run per Window: an hourly token bucket per command, as
	// Dataverse 6.x rate limits each user and command.
	Limit int
	// Window is the time in which a bucket refills Limit tokens; default
	// one hour.
	Window time.Duration
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects
	// none. See Dataverse for what each step numbers its attempts by.
	Faults string
	// Seed selects the fault sequence and the identifiers.
	Seed int64
	// Latency delays every write before it commits.
	Latency time.Duration

	now func() time.Time // the clock; time.Now when nil
}

// DataverseStats counts what a Dataverse stub did. All counts start at
// zero. Its JSON form names each field in snake_case.
type DataverseStats struct {
	Requests int64 `json:"requests"` // requests received, refused and faulted ones included
	Datasets int64 `json:"datasets"` // datasets created
	Drafts   int64 `json:"drafts"`   // datasets whose latest version is a draft now
	// DuplicateMarkers counts datasets created while an earlier dataset
	// already held one of their otherId values: the marker of a deposit
	// that a client sent twice.
	DuplicateMarkers int64 `json:"duplicate_markers"`
	Files            int64 `json:"files"` // files added
	// DuplicateFiles counts files added whose content was already in the
	// dataset (answered with a warning, and kept).
	DuplicateFiles int64 `json:"duplicate_files"`
	RenamedFiles   int64 `json:"renamed_files"`   // files renamed name-N.ext because the name was taken
	Publishes      int64 `json:"publishes"`       // publishes accepted
	Minor          int64 `json:"minor"`           // of those, minor releases (N.m+1)
	Major          int64 `json:"major"`           // of those, major releases after the first ((N+1).0)
	DraftWrites    int64 `json:"draft_writes"`    // PUTs of a draft version's metadata (making the draft or overwriting it)
	Replaced       int64 `json:"replaced"`        // files replaced (a new file each)
	Deleted        int64 `json:"deleted"`         // files deleted from a draft
	Discarded      int64 `json:"discarded"`       // draft versions deleted
	Released       int64 `json:"released"`        // versions released (their finalization ended)
	PublishRefused int64 `json:"publish_refused"` // publishes refused: locked, or nothing to release
	Searches       int64 `json:"searches"`        // searches answered
	RateLimited    int64 `json:"rate_limited"`    // answers of the rate limit (not injected faults)
	Faults         int64 `json:"faults"`          // faults injected, all kinds
	// FaultsByKind counts injected faults by kind as written in the spec.
	// It is a copy.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// DataverseDataset is one dataset the stub holds.
type DataverseDataset struct {
	ID           int64
	PersistentID string // "doi:10.5072/FK2/ABCDEF"
	VersionState string // "DRAFT" or "RELEASED", of the latest version
	// OtherIDs are the otherIdValue values of the citation block, in order.
	OtherIDs []string
	Files    []DataverseFile // in the order they were added
	Created  time.Time
	// Title is the latest version's title.
	Title string
	// Versions are the numbers of the released versions, oldest first
	// ("1.0", "1.1", "2.0").
	Versions []string
}

// DataverseFile is one file of a dataset.
type DataverseFile struct {
	Label          string // the name, after any rename
	DirectoryLabel string
	MD5            string // hex, of the bytes as uploaded
	Size           int64
}

// Dataverse is a stub of the Dataverse native API as an http.Handler under
// /api, following the behaviour of IQSS/dataverse (src/main/java/edu/
// harvard/iq/dataverse/api/Datasets.java, Dataverses.java,
// AbstractApiBean.java, datasetutility/AddReplaceFileHelper.java,
// engine/command/impl/PublishDatasetCommand.java) and its guides
// (https://guides.dataverse.org/en/latest/api/native-api.html, search.html,
// admin/rate-limiting.html). Answers are {"status":"OK","data":...} or
// {"status":"ERROR","message":...}.
//
//   - POST /api/dataverses/{alias}/datasets with the native JSON creates a
//     dataset: 201 {"data":{"id":N,"persistentId":"doi:..."}} and Location
//     /datasets/{id} (the guide says 200). The server always mints the
//     DOI: protocol, authority and identifier sent by the client are
//     ignored (IQSS/dataverse#3632). A missing title, author,
//     datasetContact, dsDescription or subject is a 403 "Validation
//     Failed: X is required. (Invalid value:...)." followed by the stray
//     "java.util.stream.ReferencePipeline$3@..." of Dataverse 5.11 and
//     later; a subject outside the vocabulary is a 400 "Error parsing
//     Json: Value 'X' does not exist in type 'subject'". An unknown alias
//     is a 404 "Can't find dataverse with identifier='X'"; a body without
//     datasetVersion a 400 "Please provide initial version in the dataset
//     json".
//
//   - POST /api/datasets/{id}/add (id numeric, or :persistentId with
//     ?persistentId=) takes multipart parts "file" and "jsonData" and
//     answers 200 {"data":{"files":[...]}}. Nothing is arbitrated: the
//     same content again is added again, with "message": "This file has
//     the same content as X that is in the dataset. "; a name already
//     taken in the same folder becomes name-1.ext (name-2.ext, ...); a
//     .csv or .tsv file is ingested as a table and listed as name.tab
//     once the Ingest lock ends, unless jsonData says "tabIngest": false,
//     its checksum staying the original's. Checksums are MD5, as Dataverse
//     reports them by default. GET /api/datasets/{id}/versions/:draft/files
//     (or :latest) lists the files; a version the caller cannot see (no
//     draft, or the guest's draft) is a 404 "Dataset version :draft of
//     dataset N not found".
//
//   - POST /api/datasets/{id}/actions/:publish?type=major|minor answers 200
//     with the dataset, numbers the version, and holds the
//     finalizePublication lock for PublishLag; the version stays DRAFT
//     until the lock ends and is RELEASED after. A publish while any lock
//     is held is a 403 "This dataset is locked. Reason: L1,L2. Please try
//     publishing later."; with no draft it is a 403 "Latest version of
//     dataset FK2/X is already released. Only draft versions can be
//     released.". An add while a lock other than Ingest is held is a 400
//     "Failed to add file to dataset.". An add to a released dataset
//     opens a new draft.
//
//   - GET /api/datasets/{id}/locks lists the locks, [] when there are
//     none; GET /api/datasets/{id} answers the dataset with latestVersion
//     (versionState, versionNumber, versionMinorNumber, createTime in whole
//     seconds as JsonPrinter prints it, metadataBlocks);
//     GET /api/datasets/{id}/versions/:latest (or :draft) answers that
//     version alone, with datasetId and datasetPersistentId, and its files
//     unless excludeFiles=true (Datasets.java, getVersion); a version the
//     caller cannot see is a 404.
//
//   - GET /api/search?q=&type=dataset&subtree=&start=&per_page= answers
//     {"data":{"q","total_count","start","items":[...],"count_in_response"}}
//     from an index that sees each dataset as it was IndexLag after its
//     last write, while versionState and the metadataBlocks of
//     metadata_fields come from the current row, as Dataverse builds a
//     hit. With Unindexed, a share of the datasets is never indexed, as
//     when Dataverse's indexing of a dataset fails and is only logged. q
//     is "*", otherIdValue:"VALUE", title:"VALUE" (phrase queries
//     on tokenised text: a hit's value may be longer than VALUE), or
//     words that must all appear; sort=date (by creation) or sort=name,
//     with order=asc or desc, orders the hits, which are otherwise in
//     creation order. A guest sees released datasets only.
//
//   - GET /api/dataverses/{alias}/contents lists the collection's direct
//     children from the database at once, unpaged, without metadata, as
//     Dataverses.java (listContent) does: each sub-collection as
//     {"type":"dataverse","id","title"}, then each dataset the caller may
//     see (the guest: released ones only) in the form JsonPrinter gives a
//     dataset (id, identifier, persistentUrl, protocol, authority,
//     separator, publisher, publicationDate once released,
//     storageIdentifier, datasetType, locks) with "type":"dataset", by id;
//     search's lag and Unindexed do not touch it.
//
//   - A wrong token is a 401 "Bad API key". The guest's create is a 401
//     "cause was null! User :guest is not permitted to perform requested
//     action.", its add a 403 "You do not have permission to edit this
//     dataset.", its publish a 401 "Only authenticated users can perform
//     the requested operation". A dataset not found is a 404 (by
//     persistent identifier with Dataverse's own message, "When accessing
//     a dataset based on Persistent ID, a persistentId query parameter
//     must be present.").
//
//   - With Limit, a command over its budget does nothing and answers 429
//     "<Command> failed: Rate limited due to too many requests." (create
//     with the "cause was null! " prefix); an add answers it 400, after
//     "There was an error when trying to add the new file. ". No answer
//     carries Retry-After.
//
//   - A released dataset's next version (dataverse_versions.go): PUT
//     /api/datasets/{id}/versions/:draft with a version (not wrapped)
//     makes the draft, a copy of the release's metadata and files, or
//     overwrites its metadata, and answers 200 with the draft; files in
//     the body are a 400 "You may not add files via this api.", any lock
//     but Ingest a 403 "Dataset cannot be edited due to dataset lock.".
//     POST /api/files/{id}/replace puts a new file (a new id) in the old
//     one's place, refusing 400 the same content ("Error! You may not
//     replace a file with a file that has duplicate content."), another
//     content type without forceReplace, a file not in the latest version,
//     an unknown id; DELETE /api/files/{id} takes the file out of the
//     draft, 200 with data false for a released file, true otherwise.
//     DELETE .../versions/:draft drops the draft (the release is the
//     latest again; an unreleased dataset goes), 401 "This is NOT a DRAFT
//     version" without one. GET .../versions/:latest-published (and its
//     /files) shows the release while a draft is open; a version the
//     dataset lacks is a 404 "Dataset version V of dataset N not found".
//     A minor publish is a 403 "Cannot publish as minor version. Re-try as
//     major release." for the first release and "Cannot release as minor
//     version. Re-try as major release." when the draft's files (by id)
//     differ from the release's; versions are numbered 1.0, then N.m+1
//     (minor) or (N+1).0 (major). A draft has no number until its publish.
//
// Faults (Config.Faults) apply to the writes: creates are numbered by
// body, adds by dataset and file (name and content), publishes by dataset,
// draft PUTs ("edit") by dataset and body, replaces and deletes by file,
// draft deletes ("discard") by dataset, and, with the reads rule, reads
// by URL. A drop commits the write and
// hangs up. A 502 or 504 drawn for a publish accepts the publish first and
// then answers, as a proxy does that times out in front of a slow publish;
// every other status fault answers before anything commits.
//
// What it leaves out: one collection and one user, no roles, no edits
// of a dataset's metadata but the draft's PUT (no editMetadata, no
// sourceLastUpdateTime), no deaccession, no versions but the latest and
// the latest released (no version by number but the latest's), no
// version notes or contributors, no file restrict or metadata edits, no
// check of the draft's metadata at PUT or publish, no file PIDs, what a
// delete of a file the draft no longer holds answers (a 400 "Delete
// failed" here: not verified upstream), no direct (S3) upload, /addFiles,
// :import, validateDatasetJson, workflows, guestbooks, or persistence. Metadata is checked
// only for the five required citation fields and the subject vocabulary;
// a dataset without a license or terms is published (Dataverse refuses
// it). Ingest only renames (no variables, no failure, and the .tab name
// is not checked against names already taken); search parses the
// three query forms above, ranks nothing, does not stem, and facets
// nothing. Publishing locks only for a fixed time: no stuck locks, no
// OptimisticLockException, no DataCite failures. Rate limits use one
// bucket per command for the one user, and nested commands do not count.
//
// Dataverse is safe for concurrent use.
type Dataverse struct {
	cfg DataverseConfig
	inj *injector
	now func() time.Time

	stubLife // mu guards what follows
	byID     map[int64]*dvDataset
	children []int64 // the ids of Config.Subcollections
	byPID    map[string]*dvDataset
	order    []*dvDataset
	markers  map[string]bool // otherIdValue values of every dataset created
	nextID   int64
	seq      uint64
	buckets  map[string]*dvBucket
	stats    DataverseStats
}

// dvDataset is one dataset. Dataverse.mu guards it.
type dvDataset struct {
	id         int64
	identifier string         // "FK2/ABCDEF"; never changes
	version    map[string]any // the datasetVersion sent, without its files
	otherIDs   []string
	files      []*dvFile
	created    time.Time
	// versionCreated is when the latest version was created.
	versionCreated time.Time

	released      bool // a version was released
	releasedAt    time.Time
	draft         bool // the latest version is a draft
	major, minor  int  // the latest version's number; 0.0 before the first publish
	finalizing    bool
	finalizeUntil time.Time
	// pub is the latest released version, nil before the first release;
	// versions the numbers of every release.
	pub      *dvRelease
	versions []string

	indexed   *dvHit
	pending   *dvHit
	pendingAt time.Time
	unindexed bool // search never shows it (Config.Unindexed)
}

type dvFile struct {
	id          int64
	released    bool // in a released version
	label       string
	dir         string
	description string
	contentType string
	md5         string
	size        int64
	tabular     bool      // ingest renames it to .tab at ingestAt
	ingestAt    time.Time // when the Ingest lock ends
	ingested    bool
}

// dvHit is what the search index holds of a dataset.
type dvHit struct {
	released bool
	title    []string
	otherIDs [][]string
	words    map[string]bool
}

// dvBucket is a token bucket of one command.
type dvBucket struct {
	tokens float64
	at     time.Time
}

// NewDataverse returns a Dataverse stub for cfg.
func NewDataverse(cfg DataverseConfig) (*Dataverse, error) {
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Unindexed < 0 || cfg.Unindexed > 1 {
		return nil, fmt.Errorf("%w: Unindexed is a share, in [0,1]", ErrConfig)
	}
	if cfg.Latency < 0 || cfg.IndexLag < 0 || cfg.PublishLag < 0 || cfg.IngestLag < 0 || cfg.Window < 0 || cfg.Limit < 0 {
		return nil, fmt.Errorf("%w: durations and limits must not be negative", ErrConfig)
	}
	if cfg.Alias == "" {
		cfg.Alias = "root"
	}
	cfg.Subcollections = slices.Clone(cfg.Subcollections)
	if cfg.DOIPrefix == "" {
		cfg.DOIPrefix = "10.5072"
	}
	if cfg.Window == 0 {
		cfg.Window = time.Hour
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	dv := &Dataverse{
		cfg: cfg, stubLife: newStubLife(), now: cfg.now, nextID: 1,
		byID: map[int64]*dvDataset{}, byPID: map[string]*dvDataset{}, markers: map[string]bool{}, buckets: map[string]*dvBucket{},
	}
	dv.inj = newInjector(faults, cfg.Seed, cfg.Latency, cfg.now, dv.done, injectedDVError, &dv.mu)
	// Collections and datasets share one id space (DvObject).
	for range cfg.Subcollections {
		dv.children = append(dv.children, dv.nextID)
		dv.nextID++
	}
	return dv, nil
}

// Close ends every wait; later requests get 503. Close is idempotent.
func (dv *Dataverse) Close() error { return dv.end() }

// Stats returns a snapshot of the counters.
func (dv *Dataverse) Stats() DataverseStats {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.settleAll(dv.now())
	s := dv.stats
	s.Drafts = 0
	for _, ds := range dv.order {
		if ds.draft {
			s.Drafts++
		}
	}
	s.Faults, s.FaultsByKind = dv.inj.count, maps.Clone(dv.inj.byKind)
	return s
}

// Datasets returns every dataset, in creation order.
func (dv *Dataverse) Datasets() []DataverseDataset {
	dv.mu.Lock()
	defer dv.mu.Unlock()
	dv.settleAll(dv.now())
	out := make([]DataverseDataset, 0, len(dv.order))
	for _, ds := range dv.order {
		d := DataverseDataset{ID: ds.id, PersistentID: dv.pid(ds), VersionState: ds.state(), OtherIDs: slices.Clone(ds.otherIDs), Created: ds.created,
			Title: fieldString(ds.version, "title"), Versions: slices.Clone(ds.versions)}
		for _, f := range ds.files {
			d.Files = append(d.Files, DataverseFile{Label: f.label, DirectoryLabel: f.dir, MD5: f.md5, Size: f.size})
		}
		out = append(out, d)
	}
	return out
}

// ServeHTTP answers one request of the API.
func (dv *Dataverse) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !dv.admitRequest(&dv.stats.Requests) {
		dvError(w, http.StatusServiceUnavailable, "The server is closed.")
		return
	}
	user, ok := dv.authenticate(w, r)
	if !ok {
		return
	}
	rest, _ := strings.CutPrefix(r.URL.Path, "/api/")
	parts := strings.Split(rest, "/")
	switch {
	case rest == "search" && r.Method == http.MethodGet:
		dv.search(w, r, user)
	case len(parts) == 3 && parts[0] == "dataverses" && parts[2] == "datasets" && r.Method == http.MethodPost:
		dv.create(w, r, parts[1], user)
	case len(parts) == 3 && parts[0] == "dataverses" && parts[2] == "contents" && r.Method == http.MethodGet:
		dv.contents(w, r, parts[1], user)
	case len(parts) >= 2 && parts[0] == "datasets":
		dv.routeDataset(w, r, parts[1], strings.Join(parts[2:], "/"), user)
	case len(parts) == 3 && parts[0] == "files" && parts[2] == "replace" && r.Method == http.MethodPost:
		dv.replace(w, r, parts[1], user)
	case len(parts) == 2 && parts[0] == "files" && r.Method == http.MethodDelete:
		dv.deleteFile(w, r, parts[1], user)
	default:
		dvNoEndpoint(w)
	}
}

// routeDataset serves the paths under /api/datasets/{id}.
func (dv *Dataverse) routeDataset(w http.ResponseWriter, r *http.Request, id, sub string, user bool) {
	switch {
	case sub == "" && r.Method == http.MethodGet:
		dv.readDataset(w, r, id)
	case sub == "add" && r.Method == http.MethodPost:
		dv.add(w, r, id, user)
	case strings.HasPrefix(sub, "versions/") && strings.HasSuffix(sub, "/files") && r.Method == http.MethodGet:
		dv.listFiles(w, r, id, strings.TrimSuffix(strings.TrimPrefix(sub, "versions/"), "/files"), user)
	case sub == "versions/:draft" && r.Method == http.MethodPut:
		dv.putDraft(w, r, id, user)
	case sub == "versions/:draft" && r.Method == http.MethodDelete:
		dv.deleteDraft(w, r, id, user)
	case strings.HasPrefix(sub, "versions/") && strings.Count(sub, "/") == 1 && r.Method == http.MethodGet:
		dv.readVersion(w, r, id, strings.TrimPrefix(sub, "versions/"), user)
	case sub == "actions/:publish" && r.Method == http.MethodPost:
		dv.publish(w, r, id, user)
	case sub == "locks" && r.Method == http.MethodGet:
		dv.locks(w, r, id)
	default:
		dvNoEndpoint(w)
	}
}

// authenticate reads the API token: it reports whether the request is the
// user's (false: the guest), and answers 401 for a token that is not the
// configured one.
func (dv *Dataverse) authenticate(w http.ResponseWriter, r *http.Request) (user, ok bool) {
	key := r.Header.Get("X-Dataverse-key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	switch {
	case dv.cfg.Token == "":
		return true, true
	case key == "":
		return false, true
	case key != dv.cfg.Token:
		dvError(w, http.StatusUnauthorized, "Bad API key")
		return false, false
	}
	return true, true
}

// admit takes a token of command's bucket; over the budget it answers
// status with Dataverse's message (prefix first) and returns false.
func (dv *Dataverse) admit(w http.ResponseWriter, command string, status int, prefix string) bool {
	if dv.cfg.Limit == 0 {
		return true
	}
	dv.mu.Lock()
	now := dv.now()
	b := dv.buckets[command]
	if b == nil {
		b = &dvBucket{tokens: float64(dv.cfg.Limit), at: now}
		dv.buckets[command] = b
	}
	refill := now.Sub(b.at).Seconds() / dv.cfg.Window.Seconds() * float64(dv.cfg.Limit)
	b.tokens, b.at = min(float64(dv.cfg.Limit), b.tokens+refill), now
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	} else {
		dv.stats.RateLimited++
	}
	dv.mu.Unlock()
	if !ok {
		dvError(w, status, prefix+command+" failed: Rate limited due to too many requests.")
	}
	return ok
}

// citation is the parsed part of a create body that the stub checks.
type citation struct {
	version  map[string]any
	fields   map[string]any // typeName -> value
	otherIDs []string
}

// parseCitation reads a native dataset JSON. It returns the status and
// message of a refusal, or 0. A body without citation fields is parsed:
// the validation of the create refuses it.
func parseCitation(body []byte) (citation, int, string) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		return citation{}, http.StatusBadRequest, "Error parsing Json: " + err.Error()
	}
	version, _ := doc["datasetVersion"].(map[string]any)
	blocks, _ := version["metadataBlocks"].(map[string]any)
	cit, _ := blocks["citation"].(map[string]any)
	list, _ := cit["fields"].([]any)
	if version == nil {
		return citation{}, http.StatusBadRequest, "Please provide initial version in the dataset json"
	}
	c := citation{version: version, fields: map[string]any{}}
	for _, item := range list {
		f, _ := item.(map[string]any)
		name, _ := f["typeName"].(string)
		if name == "" {
			return citation{}, http.StatusBadRequest, "Error parsing Json: a field has no typeName"
		}
		c.fields[name] = f["value"]
	}
	for _, s := range asList(c.fields["subject"]) {
		if v, _ := s.(string); !slices.Contains(dvSubjects, v) {
			return citation{}, http.StatusBadRequest, fmt.Sprintf("Error parsing Json: Value '%v' does not exist in type 'subject'", s)
		}
	}
	for _, o := range asList(c.fields["otherId"]) {
		m, _ := o.(map[string]any)
		sub, _ := m["otherIdValue"].(map[string]any)
		if v, ok := sub["value"].(string); ok {
			c.otherIDs = append(c.otherIDs, v)
		}
	}
	return c, 0, ""
}

// dvSubjects is the citation block's subject vocabulary.
var dvSubjects = []string{
	"Agricultural Sciences", "Arts and Humanities", "Astronomy and Astrophysics", "Business and Management",
	"Chemistry", "Computer and Information Science", "Earth and Environmental Sciences", "Engineering", "Law",
	"Mathematical Sciences", "Medicine, Health and Life Sciences", "Physics", "Social Sciences", "Other",
}

// dvRequired are the citation fields a dataset must have, with the names
// Dataverse's messages give them.
var dvRequired = [][2]string{
	{"title", "Title"}, {"author", "Author"}, {"datasetContact", "Point of Contact"},
	{"dsDescription", "Description"}, {"subject", "Subject"},
}

// validationFailure is the 403 message of missing required fields, or "".
func (c citation) validationFailure(seed uint64) string {
	var missing []string
	for _, req := range dvRequired {
		v := c.fields[req[0]]
		if s, isString := v.(string); v == nil || (isString && strings.TrimSpace(s) == "") || (!isString && len(asList(v)) == 0) {
			missing = append(missing, req[1]+" is required. (Invalid value:edu.harvard.iq.dataverse.DatasetField[ id=null ])")
		}
	}
	if len(missing) == 0 {
		return ""
	}
	// Since 5.11 the message ends with a stream's toString (a bug).
	return "Validation Failed: " + strings.Join(missing, ", ") + "." + fmt.Sprintf("java.util.stream.ReferencePipeline$3@%x", uint32(seed))
}

// asList is v as a list: a list as it is, a single value as a list of one.
func asList(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	case map[string]any:
		return []any{v}
	}
	return []any{v}
}

// beginWrite injects the fault of a write of class and key (an answer
// before the handler runs, or a fault to apply after it) and waits the
// latency; ok false when the write is answered already, a fault's or a
// 503 from a server closing.
func (dv *Dataverse) beginWrite(w http.ResponseWriter, class, key string) (fault, bool) {
	ft, answered := dv.inj.early(w, class, key)
	if answered {
		return ft, false
	}
	if !dv.inj.delay() {
		dvError(w, http.StatusServiceUnavailable, "The server is closing.")
		return ft, false
	}
	return ft, true
}

// create serves POST /api/dataverses/{alias}/datasets.
func (dv *Dataverse) create(w http.ResponseWriter, r *http.Request, alias string, user bool) {
	if alias != dv.cfg.Alias {
		dvError(w, http.StatusNotFound, "Can't find dataverse with identifier='"+alias+"'")
		return
	}
	if !user {
		dvError(w, http.StatusUnauthorized, "cause was null! User :guest is not permitted to perform requested action.")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil || len(raw) > DefaultMaxBodyBytes {
		dvError(w, http.StatusRequestEntityTooLarge, "The request body is too large.")
		return
	}
	c, status, msg := parseCitation(raw)
	if status != 0 {
		dvError(w, status, msg)
		return
	}
	if !dv.admit(w, "CreateNewDatasetCommand", http.StatusTooManyRequests, "cause was null! ") {
		return
	}
	sum := sha256.Sum256(raw)
	if failure := c.validationFailure(binary.BigEndian.Uint64(sum[:8])); failure != "" {
		dvError(w, http.StatusForbidden, failure)
		return
	}
	ft, ok := dv.beginWrite(w, "create", hex.EncodeToString(sum[:]))
	if !ok {
		return
	}
	dv.mu.Lock()
	ds := dv.newDataset(c)
	out := dvOK(map[string]any{"id": ds.id, "persistentId": dv.pid(ds)})
	dv.mu.Unlock()
	w.Header().Set("Location", "/datasets/"+strconv.FormatInt(ds.id, 10))
	dv.finish(w, r, ft, http.StatusCreated, out)
}

// newDataset stores a new draft for c, with identifiers of the server's
// choice. dv.mu is held.
func (dv *Dataverse) newDataset(c citation) *dvDataset {
	version := maps.Clone(c.version)
	for _, k := range []string{"files", "versionState", "versionNumber", "versionMinorNumber", "id"} {
		delete(version, k)
	}
	ds := &dvDataset{id: dv.nextID, identifier: dv.newIdentifier(), version: version, otherIDs: c.otherIDs, created: dv.now(), draft: true}
	ds.versionCreated = ds.created
	ds.unindexed = dv.draw("unindexed", ds.id) < dv.cfg.Unindexed
	dv.nextID++
	for _, v := range c.otherIDs {
		if dv.markers[v] {
			dv.stats.DuplicateMarkers++
			break
		}
	}
	for _, v := range c.otherIDs {
		dv.markers[v] = true
	}
	dv.byID[ds.id], dv.byPID[dv.pid(ds)] = ds, ds
	dv.order = append(dv.order, ds)
	dv.stats.Datasets++
	dv.reindex(ds, dv.now())
	return ds
}

// newIdentifier draws an identifier shaped like Dataverse's default
// ("FK2/" and six upper-case letters or digits). dv.mu is held.
func (dv *Dataverse) newIdentifier() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for {
		dv.seq++
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(dv.cfg.Seed))
		binary.BigEndian.PutUint64(b[8:], dv.seq)
		sum := sha256.Sum256(b[:])
		id := make([]byte, 6)
		for i := range id {
			id[i] = alphabet[int(sum[i])%len(alphabet)]
		}
		ident := "FK2/" + string(id)
		if _, taken := dv.byPID["doi:"+dv.cfg.DOIPrefix+"/"+ident]; !taken {
			return ident
		}
	}
}

// draw is a number in [0,1) drawn from the seed, what and n.
func (dv *Dataverse) draw(what string, n int64) float64 {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(dv.cfg.Seed))
	binary.BigEndian.PutUint64(b[8:], uint64(n))
	sum := sha256.Sum256(append(b[:], what...))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// pid is the dataset's persistent identifier, "doi:AUTHORITY/FK2/X". It
// reads only what never changes after a create, so dv.mu need not be held.
func (dv *Dataverse) pid(ds *dvDataset) string {
	return "doi:" + dv.cfg.DOIPrefix + "/" + ds.identifier
}

// dataset finds the dataset a path names (a numeric id, or :persistentId
// with the persistentId query parameter), settled to now, or answers as
// Dataverse's findDatasetOrDie does. dv.mu is not held.
func (dv *Dataverse) dataset(w http.ResponseWriter, r *http.Request, id string) *dvDataset {
	const absent = "When accessing a dataset based on Persistent ID, a persistentId query parameter must be present."
	status, msg := 0, ""
	dv.mu.Lock()
	var ds *dvDataset
	if n, err := strconv.ParseInt(id, 10, 64); err == nil {
		if ds = dv.byID[n]; ds == nil {
			status, msg = http.StatusNotFound, "Dataset with ID "+id+" not found."
		}
	} else if pid := r.URL.Query().Get("persistentId"); id == ":persistentId" && pid == "" {
		status, msg = http.StatusBadRequest, absent
	} else {
		if id != ":persistentId" {
			pid = id
		}
		if ds = dv.byPID[pid]; ds == nil {
			// Dataverse answers a PID it does not hold with this message too.
			status, msg = http.StatusNotFound, absent
		}
	}
	if ds != nil {
		dv.settle(ds, dv.now())
	}
	dv.mu.Unlock()
	if status != 0 {
		dvError(w, status, msg)
	}
	return ds
}

// addRequest is a parsed multipart add.
type addRequest struct {
	name, contentType string
	md5               string
	size              int64
	description, dir  string
	tabIngest         bool
}

// readAdd reads a multipart add: the file part is hashed and dropped. It
// answers a refusal itself and returns false.
func readAdd(w http.ResponseWriter, r *http.Request) (addRequest, bool) {
	return readAddWith(w, r, nil)
}

// readAddWith reads a multipart add, and gives its jsonData to onJSON too
// when set.
func readAddWith(w http.ResponseWriter, r *http.Request, onJSON func([]byte)) (addRequest, bool) {
	req := addRequest{tabIngest: true}
	mr, err := r.MultipartReader()
	if err != nil {
		dvError(w, http.StatusUnsupportedMediaType, "The request must be multipart/form-data.")
		return req, false
	}
	var jsonData []byte
	haveFile := false
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			dvError(w, http.StatusBadRequest, "The multipart body cannot be read.")
			return req, false
		}
		switch part.FormName() {
		case "file":
			h := md5.New()
			n, err := io.Copy(h, io.LimitReader(part, DefaultMaxBodyBytes+1))
			if err != nil || n > DefaultMaxBodyBytes {
				dvError(w, http.StatusRequestEntityTooLarge, "The file is too large.")
				return req, false
			}
			haveFile, req.name, req.md5, req.size = true, part.FileName(), hex.EncodeToString(h.Sum(nil)), n
			req.contentType = part.Header.Get("Content-Type")
		case "jsonData":
			jsonData, _ = io.ReadAll(io.LimitReader(part, 1<<20))
		}
	}
	if len(jsonData) > 0 && onJSON != nil {
		onJSON(jsonData)
	}
	if len(jsonData) > 0 {
		var opts struct {
			Description    string `json:"description"`
			DirectoryLabel string `json:"directoryLabel"`
			TabIngest      *bool  `json:"tabIngest"`
		}
		if json.Unmarshal(jsonData, &opts) != nil {
			dvError(w, http.StatusBadRequest, "Error in parsing provided json")
			return req, false
		}
		req.description, req.dir = opts.Description, strings.Trim(opts.DirectoryLabel, "/")
		if opts.TabIngest != nil {
			req.tabIngest = *opts.TabIngest
		}
	}
	if !haveFile || req.name == "" {
		dvError(w, http.StatusBadRequest, "You must upload a file or provide a valid storageidentifier, filename, and mimetype.")
		return req, false
	}
	if req.contentType == "" {
		req.contentType = "application/octet-stream"
	}
	return req, true
}

// add serves POST /api/datasets/{id}/add.
func (dv *Dataverse) add(w http.ResponseWriter, r *http.Request, id string, user bool) {
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	req, ok := readAdd(w, r)
	if !ok {
		return
	}
	if !user {
		dvError(w, http.StatusForbidden, "You do not have permission to edit this dataset.")
		return
	}
	// AddReplaceFileHelper reports the refusal of its command as a 400.
	if !dv.admit(w, "CreateNewDataFilesCommand", http.StatusBadRequest, "There was an error when trying to add the new file. ") {
		return
	}
	ft, ok := dv.beginWrite(w, "add", dv.pid(ds)+"/"+req.dir+"/"+req.name+"/"+req.md5)
	if !ok {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	dv.settle(ds, now)
	if ds.finalizing {
		dv.mu.Unlock()
		dvError(w, http.StatusBadRequest, "Failed to add file to dataset.")
		return
	}
	f, warning := dv.addFile(ds, req, now)
	var out []byte
	entry := dv.fileEntry(ds, f)
	if warning != "" {
		out, _ = json.Marshal(map[string]any{"status": "OK", "message": warning, "data": map[string]any{"files": []any{entry}}})
	} else {
		out = dvOK(map[string]any{"files": []any{entry}})
	}
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, out)
}

// addFile adds req's file to the dataset's draft (opening one after a
// release), renaming it when its name is taken, and returns it with the
// duplicate-content warning, if any. dv.mu is held.
func (dv *Dataverse) addFile(ds *dvDataset, req addRequest, now time.Time) (*dvFile, string) {
	warning := ""
	for _, old := range ds.files {
		if old.md5 == req.md5 {
			// AddReplaceFileHelper warns, with a trailing space, and adds.
			warning = "This file has the same content as " + old.label + " that is in the dataset. "
			dv.stats.DuplicateFiles++
			break
		}
	}
	label := req.name
	for n := 1; ds.nameTaken(req.dir, label); n++ {
		ext := path.Ext(req.name)
		label = strings.TrimSuffix(req.name, ext) + "-" + strconv.Itoa(n) + ext
	}
	if label != req.name {
		dv.stats.RenamedFiles++
	}
	f := &dvFile{
		id: dv.nextID, label: label, dir: req.dir, description: req.description,
		contentType: req.contentType, md5: req.md5, size: req.size,
	}
	dv.nextID++
	if ext := strings.ToLower(path.Ext(label)); req.tabIngest && (ext == ".csv" || ext == ".tsv") {
		f.tabular, f.ingestAt = true, now.Add(dv.cfg.IngestLag)
		if ext == ".csv" {
			f.contentType = "text/csv"
		} else {
			f.contentType = "text/tab-separated-values"
		}
	}
	dv.openDraft(ds, now)
	ds.files = append(ds.files, f)
	dv.stats.Files++
	dv.reindex(ds, now)
	return f, warning
}

// nameTaken reports whether a file of the dataset is called label in dir.
func (ds *dvDataset) nameTaken(dir, label string) bool {
	for _, f := range ds.files {
		if f.dir == dir && f.label == label {
			return true
		}
	}
	return false
}

// listFiles serves GET /api/datasets/{id}/versions/:draft/files (and
// :latest).
func (dv *Dataverse) listFiles(w http.ResponseWriter, r *http.Request, id, which string, user bool) {
	ft, answered := dv.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	dv.mu.Lock()
	var out []byte
	if v, ok := ds.pick(which, user); ok {
		entries := make([]any, 0, len(v.files))
		for _, f := range v.files {
			entries = append(entries, dv.fileEntry(ds, f))
		}
		out = dvOK(entries)
	}
	dv.mu.Unlock()
	if out == nil {
		dvVersionNotFound(w, ds, which)
		return
	}
	dv.finish(w, r, ft, http.StatusOK, out)
}

// fileEntry is one file as the API answers it. dv.mu is held.
func (dv *Dataverse) fileEntry(ds *dvDataset, f *dvFile) map[string]any {
	df := map[string]any{
		"id": f.id, "persistentId": "", "filename": f.label, "contentType": f.contentType,
		"filesize": f.size, "storageIdentifier": "local://" + strconv.FormatInt(f.id, 16), "rootDataFileId": -1,
		"md5": f.md5, "checksum": map[string]any{"type": "MD5", "value": f.md5},
		"tabularData": f.ingested, "description": f.description,
	}
	if f.ingested {
		df["contentType"] = "text/tab-separated-values"
		df["originalFileFormat"] = f.contentType
	}
	e := map[string]any{
		"label": f.label, "restricted": false, "version": 1, "datasetVersionId": ds.id, "dataFile": df,
		"description": f.description,
	}
	if f.dir != "" {
		e["directoryLabel"] = f.dir
	}
	return e
}

// publish serves POST /api/datasets/{id}/actions/:publish.
func (dv *Dataverse) publish(w http.ResponseWriter, r *http.Request, id string, user bool) {
	typ := strings.ToLower(r.URL.Query().Get("type"))
	switch {
	case r.URL.Query().Get("type") == "":
		dvError(w, http.StatusBadRequest, "Missing 'type' parameter (either 'major','minor', or 'updatecurrent').")
		return
	case !user:
		dvError(w, http.StatusUnauthorized, "Only authenticated users can perform the requested operation")
		return
	case typ == "updatecurrent":
		dvError(w, http.StatusForbidden, "Only superusers can update the current version")
		return
	case typ != "major" && typ != "minor":
		dvError(w, http.StatusBadRequest, "Illegal 'type' parameter value '"+typ+"'. It needs to be either 'major', 'minor', or 'updatecurrent'.")
		return
	}
	ds := dv.dataset(w, r, id)
	if ds == nil || !dv.admit(w, "PublishDatasetCommand", http.StatusTooManyRequests, "") {
		return
	}
	ft, answered := dv.lateFault(w, "publish", dv.pid(ds))
	if answered {
		return
	}
	if !dv.inj.delay() {
		dvError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	dv.mu.Lock()
	now := dv.now()
	dv.settle(ds, now)
	refusal := ""
	if locks := ds.lockNames(now); len(locks) > 0 {
		refusal = "This dataset is locked. Reason: " + strings.Join(locks, ",") + ". Please try publishing later."
	} else if !ds.draft {
		refusal = "Latest version of dataset " + ds.identifier + " is already released. Only draft versions can be released."
	} else if typ == "minor" && !ds.released {
		refusal = "Cannot publish as minor version. Re-try as major release."
	} else if typ == "minor" && !ds.minorUpdate() {
		refusal = "Cannot release as minor version. Re-try as major release."
	}
	var out []byte
	if refusal != "" {
		dv.stats.PublishRefused++
	} else {
		dv.accept(ds, typ == "minor", now)
		out = dvOK(dv.datasetDoc(ds, now, false))
	}
	dv.mu.Unlock()
	if refusal != "" {
		dvError(w, http.StatusForbidden, refusal)
		return
	}
	if ft.Status == http.StatusBadGateway || ft.Status == http.StatusGatewayTimeout {
		dv.inj.counted(ft)
		injectedDVError(w, ft.Status)
		return
	}
	dv.finish(w, r, ft, http.StatusOK, out)
}

// accept numbers the draft and locks it for finalization. dv.mu is held.
func (dv *Dataverse) accept(ds *dvDataset, minor bool, now time.Time) {
	switch {
	case !ds.released:
		ds.major, ds.minor = 1, 0
	case !minor:
		ds.major, ds.minor = ds.pub.major+1, 0
		dv.stats.Major++
	default:
		ds.major, ds.minor = ds.pub.major, ds.pub.minor+1
		dv.stats.Minor++
	}
	ds.finalizing, ds.finalizeUntil = true, now.Add(dv.cfg.PublishLag)
	dv.stats.Publishes++
	dv.settle(ds, now)
}

// lateFault numbers a publish and draws its fault; a 502 or 504 is left to
// strike after the publish is accepted.
func (dv *Dataverse) lateFault(w http.ResponseWriter, class, key string) (fault, bool) {
	dv.mu.Lock()
	ak := class + "\x00" + key
	dv.inj.attempts[ak]++
	attempt := dv.inj.attempts[ak]
	dv.mu.Unlock()
	ft, _ := dv.inj.faults.Draw(dv.inj.seed, class, key, attempt)
	if ft.Status == http.StatusBadGateway || ft.Status == http.StatusGatewayTimeout {
		return ft, false
	}
	return dv.inj.apply(w, ft)
}

// settle ends the locks whose time is up: a finalization releases the
// version, an ingest renames its table. dv.mu is held.
func (dv *Dataverse) settle(ds *dvDataset, now time.Time) {
	for _, f := range ds.files {
		if f.tabular && !f.ingested && !now.Before(f.ingestAt) {
			f.ingested = true
			f.label = strings.TrimSuffix(f.label, path.Ext(f.label)) + ".tab"
			dv.reindex(ds, f.ingestAt)
		}
	}
	if ds.finalizing && !now.Before(ds.finalizeUntil) {
		if !ds.released {
			ds.releasedAt = ds.finalizeUntil
		}
		ds.finalizing, ds.draft, ds.released = false, false, true
		ds.pub = &dvRelease{version: ds.version, otherIDs: ds.otherIDs, files: slices.Clone(ds.files), major: ds.major, minor: ds.minor, created: ds.versionCreated}
		for _, f := range ds.files {
			f.released = true
		}
		ds.versions = append(ds.versions, strconv.Itoa(ds.major)+"."+strconv.Itoa(ds.minor))
		dv.stats.Released++
		dv.reindex(ds, ds.finalizeUntil)
	}
}

// settleAll settles every dataset. dv.mu is held.
func (dv *Dataverse) settleAll(now time.Time) {
	for _, ds := range dv.order {
		dv.settle(ds, now)
	}
}

// lockNames are the dataset's locks, in the order Dataverse took them.
func (ds *dvDataset) lockNames(now time.Time) []string {
	var names []string
	for _, f := range ds.files {
		if f.tabular && now.Before(f.ingestAt) {
			names = append(names, "Ingest")
			break
		}
	}
	if ds.finalizing {
		names = append(names, "finalizePublication")
	}
	return names
}

// state is the latest version's state.
func (ds *dvDataset) state() string {
	if ds.draft {
		return "DRAFT"
	}
	return "RELEASED"
}

// locks serves GET /api/datasets/{id}/locks.
func (dv *Dataverse) locks(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := dv.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	list := []any{}
	for _, name := range ds.lockNames(now) {
		list = append(list, map[string]any{
			"lockType": name, "date": now.UTC().Format(time.RFC3339), "user": "dataverseAdmin", "dataset": dv.pid(ds),
		})
	}
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, dvOK(list))
}

// readDataset serves GET /api/datasets/{id}.
func (dv *Dataverse) readDataset(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := dv.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	dv.mu.Lock()
	out := dvOK(dv.datasetDoc(ds, dv.now(), true))
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, out)
}

// datasetDoc is the dataset as Dataverse's JsonPrinter prints it, with its
// latest version when withVersion. dv.mu is held.
func (dv *Dataverse) datasetDoc(ds *dvDataset, now time.Time, withVersion bool) map[string]any {
	d := map[string]any{
		"id": ds.id, "identifier": ds.identifier, "persistentUrl": "https://doi.org/" + dv.cfg.DOIPrefix + "/" + ds.identifier,
		"protocol": "doi", "authority": dv.cfg.DOIPrefix, "separator": "/", "publisher": "Root",
		"storageIdentifier": "file://" + dv.cfg.DOIPrefix + "/" + ds.identifier, "datasetType": "dataset",
		"locks": append([]string{}, ds.lockNames(now)...), // [] when none, as JsonPrinter prints it
	}
	if ds.released {
		d["publicationDate"] = ds.releasedAt.UTC().Format(time.DateOnly)
	}
	if withVersion {
		d["latestVersion"] = dv.versionDoc(ds)
	}
	return d
}

// versionDoc is the dataset's latest version as JsonPrinter prints one,
// without its files. dv.mu is held.
func (dv *Dataverse) versionDoc(ds *dvDataset) map[string]any {
	return dv.versionDocOf(ds, ds.latest())
}

// versionDocOf is version v of the dataset as JsonPrinter prints one,
// without its files; a draft has no number (null, left out) until its
// publication numbers it. dv.mu is held.
func (dv *Dataverse) versionDocOf(ds *dvDataset, v dvVersionView) map[string]any {
	doc := maps.Clone(v.version)
	doc["versionState"] = v.state
	if v.state == "RELEASED" || ds.finalizing {
		doc["versionNumber"], doc["versionMinorNumber"] = v.major, v.minor
	}
	doc["datasetId"], doc["datasetPersistentId"] = ds.id, dv.pid(ds)
	// JsonPrinter's format: whole seconds, UTC.
	doc["createTime"] = v.created.UTC().Format("2006-01-02T15:04:05Z")
	return doc
}

// readVersion serves GET /api/datasets/{id}/versions/:latest and
// :draft: the version, with its files unless excludeFiles=true; a
// version the caller cannot see is a 404, as listFiles answers it.
func (dv *Dataverse) readVersion(w http.ResponseWriter, r *http.Request, id, which string, user bool) {
	ft, answered := dv.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	dv.mu.Lock()
	var out []byte
	if v, ok := ds.pick(which, user); ok {
		doc := dv.versionDocOf(ds, v)
		if r.URL.Query().Get("excludeFiles") != "true" {
			files := make([]any, 0, len(v.files))
			for _, f := range v.files {
				files = append(files, dv.fileEntry(ds, f))
			}
			doc["files"] = files
		}
		out = dvOK(doc)
	}
	dv.mu.Unlock()
	if out == nil {
		dvVersionNotFound(w, ds, which)
		return
	}
	dv.finish(w, r, ft, http.StatusOK, out)
}

// contents serves GET /api/dataverses/{alias}/contents: from the database,
// unpaged, without metadata; sub-collections first, then datasets by id.
func (dv *Dataverse) contents(w http.ResponseWriter, r *http.Request, alias string, user bool) {
	if alias != dv.cfg.Alias {
		dvError(w, http.StatusNotFound, "Can't find dataverse with identifier='"+alias+"'")
		return
	}
	ft, answered := dv.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	list := []any{}
	for i, name := range dv.cfg.Subcollections {
		list = append(list, map[string]any{"type": "dataverse", "id": dv.children[i], "title": name})
	}
	for _, ds := range dv.order {
		dv.settle(ds, now)
		if !user && !ds.released {
			continue
		}
		d := dv.datasetDoc(ds, now, false)
		d["type"] = "dataset"
		list = append(list, d)
	}
	out := dvOK(list)
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, out)
}

// reindex queues what search will show of ds IndexLag after at. dv.mu is
// held.
func (dv *Dataverse) reindex(ds *dvDataset, at time.Time) {
	if ds.unindexed {
		return
	}
	h := &dvHit{released: ds.released, words: map[string]bool{}}
	h.title = wordList(fieldString(ds.version, "title"))
	for _, v := range ds.otherIDs {
		h.otherIDs = append(h.otherIDs, wordList(v))
	}
	for _, list := range append([][]string{h.title}, h.otherIDs...) {
		for _, t := range list {
			h.words[t] = true
		}
	}
	ds.pending, ds.pendingAt = h, at.Add(dv.cfg.IndexLag)
}

// refresh settles every dataset and makes every write queued by now
// searchable. dv.mu is held.
func (dv *Dataverse) refresh(now time.Time) {
	dv.settleAll(now)
	for _, ds := range dv.order {
		if ds.pending != nil && !now.Before(ds.pendingAt) {
			ds.indexed, ds.pending = ds.pending, nil
		}
	}
}

// fieldString is the string value of a primitive citation field.
func fieldString(version map[string]any, typeName string) string {
	blocks, _ := version["metadataBlocks"].(map[string]any)
	cit, _ := blocks["citation"].(map[string]any)
	list, _ := cit["fields"].([]any)
	for _, item := range list {
		f, _ := item.(map[string]any)
		if f["typeName"] == typeName {
			s, _ := f["value"].(string)
			return s
		}
	}
	return ""
}

// wordList splits s into lower-case runs of letters and digits, in order.
func wordList(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// search serves GET /api/search: hits from the lagging index, the state
// and metadata of each hit from the current row.
func (dv *Dataverse) search(w http.ResponseWriter, r *http.Request, user bool) {
	query := r.URL.Query()
	start, perPage := 0, 10
	for name, dst := range map[string]*int{"start": &start, "per_page": &perPage} {
		if v := query.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				dvError(w, http.StatusBadRequest, name+" must be a number of 0 or more, not "+strconv.Quote(v)+".")
				return
			}
			*dst = n
		}
	}
	perPage = min(perPage, 1000)
	ft, answered := dv.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	q := query.Get("q")
	match := parseDVQuery(q)
	wantDatasets := query.Get("type") == "" || slices.Contains(query["type"], "dataset")
	subtree := query.Get("subtree")
	withMetadata := slices.Contains(query["metadata_fields"], "citation:*") || slices.Contains(query["metadata_fields"], "citation:otherId")

	dv.mu.Lock()
	dv.stats.Searches++
	dv.refresh(dv.now())
	var hits []*dvDataset
	for _, ds := range dv.order {
		h := ds.indexed
		if !wantDatasets || (subtree != "" && subtree != dv.cfg.Alias) || h == nil || (!user && !h.released) || !match(h) {
			continue
		}
		hits = append(hits, ds)
	}
	sortHits(hits, query.Get("sort"), query.Get("order"))
	total := len(hits)
	from := min(start, total)
	items := make([]any, 0, min(perPage, total-from))
	for _, ds := range hits[from:min(from+perPage, total)] {
		items = append(items, dv.searchItem(ds, query.Get("show_entity_ids") == "true", withMetadata))
	}
	dv.mu.Unlock()
	out := dvOK(map[string]any{
		"q": q, "total_count": total, "start": start, "spelling_alternatives": map[string]any{},
		"items": items, "count_in_response": len(items),
	})
	dv.finish(w, r, ft, http.StatusOK, out)
}

// sortHits orders hits as sort=date or sort=name asks (order asc or
// desc); any other sort leaves them in creation order, as an unranked
// index would.
func sortHits(hits []*dvDataset, by, order string) {
	var cmp func(a, b *dvDataset) int
	switch by {
	case "date":
		cmp = func(a, b *dvDataset) int { return a.created.Compare(b.created) }
	case "name":
		cmp = func(a, b *dvDataset) int {
			return strings.Compare(fieldString(a.version, "title"), fieldString(b.version, "title"))
		}
	default:
		return
	}
	slices.SortStableFunc(hits, cmp)
	if order == "desc" {
		slices.Reverse(hits)
	}
}

// searchItem is one dataset hit, built from the current row. dv.mu is held.
func (dv *Dataverse) searchItem(ds *dvDataset, entityIDs, withMetadata bool) map[string]any {
	it := map[string]any{
		"name": fieldString(ds.version, "title"), "type": "dataset",
		"url":       "https://doi.org/" + dv.cfg.DOIPrefix + "/" + ds.identifier,
		"global_id": dv.pid(ds), "identifier_of_dataverse": dv.cfg.Alias, "name_of_dataverse": "Root",
		"fileCount": len(ds.files), "versionState": ds.state(), "majorVersion": ds.major, "minorVersion": ds.minor,
		"createdAt": ds.created.UTC().Format(time.RFC3339),
	}
	if entityIDs {
		it["entity_id"] = ds.id
	}
	if withMetadata {
		var fields []any
		blocks, _ := ds.version["metadataBlocks"].(map[string]any)
		cit, _ := blocks["citation"].(map[string]any)
		list, _ := cit["fields"].([]any)
		for _, item := range list {
			if f, _ := item.(map[string]any); f["typeName"] == "otherId" {
				fields = append(fields, f)
			}
		}
		it["metadataBlocks"] = map[string]any{"citation": map[string]any{"displayName": "Citation Metadata", "fields": fields}}
	}
	return it
}

// parseDVQuery returns the matcher of a search q: "*" or empty (every
// dataset), otherIdValue:"V" or title:"V" (a phrase: V's words in a row
// in one value), or words that must all appear.
func parseDVQuery(q string) func(*dvHit) bool {
	q = strings.TrimSpace(q)
	if q == "" || q == "*" {
		return func(*dvHit) bool { return true }
	}
	for _, name := range []string{"otherIdValue", "title"} {
		v, ok := strings.CutPrefix(q, name+`:"`)
		if !ok || !strings.HasSuffix(v, `"`) || len(v) < 2 {
			continue
		}
		phrase := wordList(strings.TrimSuffix(v, `"`))
		return func(h *dvHit) bool {
			values := h.otherIDs
			if name == "title" {
				values = [][]string{h.title}
			}
			return slices.ContainsFunc(values, func(words []string) bool { return containsRun(words, phrase) })
		}
	}
	words := wordList(q)
	return func(h *dvHit) bool {
		for _, t := range words {
			if !h.words[t] {
				return false
			}
		}
		return len(words) > 0
	}
}

// containsRun reports whether run appears in words, in order and
// adjacent.
func containsRun(words, run []string) bool {
	if len(run) == 0 {
		return false
	}
	for i := 0; i+len(run) <= len(words); i++ {
		if slices.Equal(words[i:i+len(run)], run) {
			return true
		}
	}
	return false
}

// finish writes a JSON answer, unless ft drops or trickles it.
func (dv *Dataverse) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	dv.inj.finish(w, r, ft, status, nil, body)
}

// dvOK is the success envelope around data.
func dvOK(data any) []byte {
	b, _ := json.Marshal(map[string]any{"status": "OK", "data": data})
	return b
}

// dvError answers Dataverse's error envelope.
func dvError(w http.ResponseWriter, status int, message string) {
	body, _ := json.Marshal(map[string]any{"status": "ERROR", "message": message})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// dvNoEndpoint answers a path or method the API does not have, as
// Dataverse's WebApplicationExceptionHandler does.
func dvNoEndpoint(w http.ResponseWriter) {
	dvError(w, http.StatusNotFound, "API endpoint does not exist on this server. Please check your code for typos, or consult our API guide at http://guides.dataverse.org.")
}

// injectedDVError answers an injected status fault.
func injectedDVError(w http.ResponseWriter, status int) {
	dvError(w, status, http.StatusText(status))
}

// DataverseServer is a Dataverse stub listening on 127.0.0.1 with a random
// port, for tests: point a client at URL and Close it. It is safe for
// concurrent use by multiple goroutines.
type DataverseServer struct {
	// URL is the server's root, "http://127.0.0.1:PORT"; the API is under
	// URL + "/api", as a Dataverse installation's is.
	URL string

	dv *Dataverse
	lo *loopback
}

// NewDataverseServer starts a Dataverse stub for cfg on 127.0.0.1.
func NewDataverseServer(cfg DataverseConfig) (*DataverseServer, error) {
	dv, err := NewDataverse(cfg)
	if err != nil {
		return nil, err
	}
	lo, err := startLoopback(dv, func(w http.ResponseWriter, _ *http.Request) {
		dvError(w, http.StatusServiceUnavailable, "The server is closed.")
	})
	if err != nil {
		return nil, err
	}
	return &DataverseServer{URL: lo.url, dv: dv, lo: lo}, nil
}

// Client returns an HTTP client for the server. Its idle connections are
// closed by Close.
func (s *DataverseServer) Client() *http.Client { return s.lo.client }

// Stats returns a snapshot of the stub's counters.
func (s *DataverseServer) Stats() DataverseStats { return s.dv.Stats() }

// Datasets returns every dataset the stub holds, in creation order.
func (s *DataverseServer) Datasets() []DataverseDataset { return s.dv.Datasets() }

// Close ends every wait, closes the listener and every connection, and
// waits for the handlers to return. Close is idempotent.
func (s *DataverseServer) Close() { s.lo.close(s.dv.Close, nil) }
