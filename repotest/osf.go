package repotest

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OSFConfig configures an OSF stub. The zero value asks for no token,
// lists every node at once and injects no faults. NewOSF copies it.
type OSFConfig struct {
	// Token, when set, is the personal access token every request must
	// carry as "Authorization: Bearer <Token>"; another is a 401, and none
	// a 401 for a write or /users/me. Empty: every request is the user's.
	Token string
	// ListLag is how long a new node takes to show in the user's node
	// listing. OSF reads that listing from its database, so it shows a
	// committed node at once; a lag makes the stub stricter than OSF.
	ListLag time.Duration
	// DOIPrefix is the prefix of the DOIs minted; default "10.5072".
	DOIPrefix string
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects
	// none. Creates are numbered by body, uploads by node, name and bytes,
	// PATCHes and DOIs by node, and, with the reads rule, reads by URL.
	Faults string
	// Seed selects the fault sequence and the identifiers.
	Seed int64
	// Latency delays every write before it commits.
	Latency time.Duration

	now func() time.Time
}

// OSFStats counts what an OSF stub did. Its JSON form names each field in
// snake_case.
type OSFStats struct {
	Requests int64 `json:"requests"` // requests received, refused and faulted ones included
	Nodes    int64 `json:"nodes"`    // nodes created
	// DuplicateMarkers counts nodes created with a tag an earlier node
	// already had that begins "deposit:": a deposit sent twice.
	DuplicateMarkers int64 `json:"duplicate_markers"`
	Files            int64 `json:"files"`     // files created
	Versions         int64 `json:"versions"`  // versions added to existing files (re-uploads)
	Conflicts        int64 `json:"conflicts"` // uploads refused 409: the name was taken
	Publics          int64 `json:"publics"`   // nodes made public (a PATCH to public of a private node)
	DOIs             int64 `json:"dois"`      // DOIs minted
	DOIRefused       int64 `json:"doi_refused"`
	Faults           int64 `json:"faults"` // faults injected, all kinds
	// FaultsByKind counts injected faults by kind. It is a copy.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// OSFNode is one node the stub holds.
type OSFNode struct {
	ID, Title, Category, Parent string
	Tags                        []string
	Public                      bool
	DOI                         string
	Files                       []OSFFile // in the order they were created
	Created                     time.Time
}

// OSFFile is one file of a node's OSF Storage.
type OSFFile struct {
	Name, Path, SHA256, MD5 string
	Size                    int64
	Versions                int // 1 for a file uploaded once
}

// OSF is a stub of OSF's API v2 (under /v2) and of WaterButler's OSF
// Storage (under /v1/resources), as an http.Handler, following
// CenterForOpenScience/osf.io (api/nodes/views.py and serializers.py,
// api/users/views.py UserNodes, api/base/filters.py, api/base/pagination.py,
// api/identifiers/serializers.py, api/nodes/permissions.py EditIfPublic)
// and CenterForOpenScience/waterbutler (server/api/v1/provider/create.py,
// core/exceptions.py, providers/osfstorage/metadata.py), and OSF's API
// documentation (https://developer.osf.io). API errors are JSON:API
// ({"errors":[{"detail":...}]}), WaterButler's {"code":N,"message":...}.
//
//   - POST /v2/nodes/ (or /v2/nodes/{id}/children/, a component) with
//     {"data":{"type":"nodes","attributes":{title, category, description,
//     tags, public}}} makes a node, every time: 201 with the node, its id
//     five letters and digits. A missing title or category, or a category
//     OSF does not have, is a 400 with the field's pointer; a type other
//     than "nodes" a 409; an unknown parent a 404.
//   - GET /v2/nodes/{id}/ reads a node; PATCH with attributes public
//     changes it (200); GET /v2/users/me/nodes/ lists the user's nodes,
//     from the database (after ListLag), filter[tags] matching a whole tag
//     case aside, ordered by -last_logged (the last write) or by
//     sort=date_created, paged by page and page[size] (10 by default, at
//     most 100) with meta.total and links.next.
//   - POST /v2/nodes/{id}/identifiers/ with category doi mints
//     PREFIX/OSF.IO/{ID} (201); a private node is a 403 (EditIfPublic),
//     a second DOI a 400 "A DOI already exists for this resource.";
//     GET lists the node's identifiers.
//   - PUT /v1/resources/{id}/providers/osfstorage/?kind=file&name=NAME
//     stores a file at the top of the node's storage: 201 with its
//     metadata (path "/" and an id, extra.hashes md5 and sha256); a name
//     already taken is a 409 "Cannot complete action: file or folder
//     "NAME" already exists in this location" with the file's metadata as
//     data. A PUT to a file's own path (/{fileid}?kind=file) adds a
//     version (200). GET .../osfstorage/ lists the top folder.
//
// A drop commits the write and hangs up; every other status fault
// answers before anything commits.
//
// What it leaves out: one user, no contributors, institutions, licenses,
// wikis, registrations, preprints, forks or templates; no folders in
// storage, no other storage provider, no downloads, moves or deletes; no
// node deletion; no search (/v2/search/, Elasticsearch); no throttle of
// its own (OSF's API answers 429 with Retry-After past 10 requests a
// second per user; inject 429 faults instead); and no persistence.
//
// OSF is safe for concurrent use.
type OSF struct {
	cfg OSFConfig
	inj *injector
	now func() time.Time

	stubLife // mu guards what follows
	byID     map[string]*osfNode
	order    []*osfNode
	markers  map[string]bool
	seq      uint64
	stats    OSFStats
}

type osfNode struct {
	id, title, category, description, parent string
	tags                                     []string
	public                                   bool
	doi                                      string
	files                                    []*osfFile
	created, modified                        time.Time
}

type osfFile struct {
	id, name, sha256, md5 string
	size                  int64
	versions              int
	modified              time.Time
}

// osfCategories are the categories OSF takes (osf.io osf/models/node.py,
// CATEGORY_MAP).
var osfCategories = []string{"analysis", "communication", "data", "hypothesis", "instrumentation",
	"methods and measures", "procedure", "project", "software", "other", ""}

// NewOSF returns an OSF stub for cfg.
func NewOSF(cfg OSFConfig) (*OSF, error) {
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Latency < 0 || cfg.ListLag < 0 {
		return nil, fmt.Errorf("%w: durations must not be negative", ErrConfig)
	}
	if cfg.DOIPrefix == "" {
		cfg.DOIPrefix = "10.5072"
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	o := &OSF{cfg: cfg, stubLife: newStubLife(), now: cfg.now, byID: map[string]*osfNode{}, markers: map[string]bool{}}
	o.inj = newInjector(faults, cfg.Seed, cfg.Latency, cfg.now, o.done, osfRefuse, &o.mu)
	return o, nil
}

// Close ends every wait; later requests get 503. Close is idempotent.
func (o *OSF) Close() error { return o.end() }

// Stats returns a snapshot of the counters.
func (o *OSF) Stats() OSFStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.stats
	s.Faults, s.FaultsByKind = o.inj.count, maps.Clone(o.inj.byKind)
	return s
}

// Nodes returns every node, in creation order.
func (o *OSF) Nodes() []OSFNode {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]OSFNode, 0, len(o.order))
	for _, n := range o.order {
		c := OSFNode{ID: n.id, Title: n.title, Category: n.category, Parent: n.parent, Tags: slices.Clone(n.tags),
			Public: n.public, DOI: n.doi, Created: n.created}
		for _, f := range n.files {
			c.Files = append(c.Files, OSFFile{Name: f.name, Path: "/" + f.id, SHA256: f.sha256, MD5: f.md5, Size: f.size, Versions: f.versions})
		}
		out = append(out, c)
	}
	return out
}

// ServeHTTP answers one request of the API or of WaterButler.
func (o *OSF) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !o.admitRequest(&o.stats.Requests) {
		osfError(w, http.StatusServiceUnavailable, "The server is closed.")
		return
	}
	if !o.authenticate(w, r) {
		return
	}
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/v1/resources/"); ok {
		o.waterbutler(w, r, rest)
		return
	}
	parts := strings.Split(strings.Trim(strings.TrimPrefix(p, "/v2/"), "/"), "/")
	switch {
	case !strings.HasPrefix(p, "/v2/"):
		osfError(w, http.StatusNotFound, "Not found.")
	case len(parts) == 1 && parts[0] == "nodes" && r.Method == http.MethodPost:
		o.create(w, r, "")
	case len(parts) == 3 && parts[0] == "users" && parts[1] == "me" && parts[2] == "nodes" && r.Method == http.MethodGet:
		o.list(w, r)
	case len(parts) == 2 && parts[0] == "nodes" && r.Method == http.MethodGet:
		o.read(w, r, parts[1])
	case len(parts) == 2 && parts[0] == "nodes" && r.Method == http.MethodPatch:
		o.patch(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "nodes" && parts[2] == "children" && r.Method == http.MethodPost:
		o.create(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "nodes" && parts[2] == "identifiers" && r.Method == http.MethodPost:
		o.mintDOI(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "nodes" && parts[2] == "identifiers" && r.Method == http.MethodGet:
		o.identifiers(w, r, parts[1])
	default:
		osfError(w, http.StatusNotFound, "Not found.")
	}
}

// authenticate checks the bearer token; it answers 401 and returns false
// for a wrong one, or none on a write or /users/me.
func (o *OSF) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if o.cfg.Token == "" {
		return true
	}
	tok, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	switch {
	case bearer && tok == o.cfg.Token:
		return true
	case bearer || r.Header.Get("Authorization") != "":
		osfError(w, http.StatusUnauthorized, "User provided an invalid OAuth2 access token")
		return false
	case r.Method != http.MethodGet || strings.Contains(r.URL.Path, "/users/me/"):
		osfError(w, http.StatusUnauthorized, "Authentication credentials were not provided.")
		return false
	}
	return true
}

// readJSON reads a JSON:API document's data member.
func readJSON(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil || len(raw) > DefaultMaxBodyBytes {
		osfError(w, http.StatusRequestEntityTooLarge, "Request body too large.")
		return nil, false
	}
	var doc struct {
		Data map[string]any `json:"data"`
	}
	if json.Unmarshal(raw, &doc) != nil {
		osfError(w, http.StatusBadRequest, "JSON parse error")
		return nil, false
	}
	if doc.Data == nil {
		osfError(w, http.StatusBadRequest, "Request must include /data.")
		return nil, false
	}
	return doc.Data, true
}

// create serves POST /v2/nodes/ and /v2/nodes/{parent}/children/.
func (o *OSF) create(w http.ResponseWriter, r *http.Request, parent string) {
	if parent != "" && o.node(parent) == nil {
		osfError(w, http.StatusNotFound, "Not found.")
		return
	}
	data, ok := readJSON(w, r)
	if !ok {
		return
	}
	if data["type"] != "nodes" {
		osfError(w, http.StatusConflict, fmt.Sprintf("This resource has a type of \"nodes\", but you set the json body's type field to \"%v\". You probably need to change the type field to match the resource's type.", data["type"]))
		return
	}
	a, _ := data["attributes"].(map[string]any)
	title, _ := a["title"].(string)
	category, hasCat := a["category"].(string)
	switch {
	case strings.TrimSpace(title) == "":
		osfFieldError(w, "/data/attributes/title", "This field is required.")
		return
	case !hasCat:
		osfFieldError(w, "/data/attributes/category", "This field is required.")
		return
	case !slices.Contains(osfCategories, category):
		osfFieldError(w, "/data/attributes/category", fmt.Sprintf("\"%s\" is not a valid choice.", category))
		return
	}
	var tags []string
	for _, t := range asList(a["tags"]) {
		s, ok := t.(string)
		if !ok {
			osfFieldError(w, "/data/attributes/tags", "Not a valid string.")
			return
		}
		tags = append(tags, s)
	}
	desc, _ := a["description"].(string)
	public, _ := a["public"].(bool)
	body, _ := json.Marshal(data)
	sum := sha256.Sum256(body)
	ft, answered := o.inj.early(w, "create", hex.EncodeToString(sum[:]))
	if answered {
		return
	}
	if !o.inj.delay() {
		osfError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	o.mu.Lock()
	now := o.now()
	n := &osfNode{id: o.newID(), title: title, category: category, description: desc, parent: parent, tags: tags,
		public: public, created: now, modified: now}
	for _, t := range tags {
		if strings.HasPrefix(strings.ToLower(t), "deposit:") {
			if o.markers[strings.ToLower(t)] {
				o.stats.DuplicateMarkers++
			}
			o.markers[strings.ToLower(t)] = true
		}
	}
	o.byID[n.id], o.order = n, append(o.order, n)
	o.stats.Nodes++
	out := osfDoc(o.nodeDoc(n))
	o.mu.Unlock()
	o.finish(w, r, ft, http.StatusCreated, out)
}

// newID is a new five-character guid. o.mu is held.
func (o *OSF) newID() string {
	const alphabet = "23456789abcdefghjkmnpqrstuvwxyz"
	for {
		o.seq++
		sum := sha256.Sum256(fmt.Appendf(nil, "%d/%d", o.cfg.Seed, o.seq))
		id := make([]byte, 5)
		for i := range id {
			id[i] = alphabet[int(sum[i])%len(alphabet)]
		}
		if o.byID[string(id)] == nil {
			return string(id)
		}
	}
}

// node is the node of id, or nil.
func (o *OSF) node(id string) *osfNode {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byID[id]
}

// nodeDoc is the JSON:API resource of n. o.mu is held.
func (o *OSF) nodeDoc(n *osfNode) map[string]any {
	return map[string]any{"id": n.id, "type": "nodes",
		"attributes": map[string]any{"title": n.title, "category": n.category, "description": n.description,
			"tags": slices.Clone(n.tags), "public": n.public,
			"date_created": n.created.UTC().Format("2006-01-02T15:04:05.000000"), "date_modified": n.modified.UTC().Format("2006-01-02T15:04:05.000000")},
		"links": map[string]any{"self": "/v2/nodes/" + n.id + "/"}}
}

// read serves GET /v2/nodes/{id}/.
func (o *OSF) read(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := o.inj.early(w, "read", r.URL.String())
	if answered {
		return
	}
	o.mu.Lock()
	n := o.byID[id]
	var out []byte
	if n != nil {
		out = osfDoc(o.nodeDoc(n))
	}
	o.mu.Unlock()
	if n == nil {
		osfError(w, http.StatusNotFound, "Not found.")
		return
	}
	o.finish(w, r, ft, http.StatusOK, out)
}

// patch serves PATCH /v2/nodes/{id}/: public, title, description.
func (o *OSF) patch(w http.ResponseWriter, r *http.Request, id string) {
	if o.node(id) == nil {
		osfError(w, http.StatusNotFound, "Not found.")
		return
	}
	data, ok := readJSON(w, r)
	if !ok {
		return
	}
	if data["type"] != "nodes" || data["id"] != id {
		osfError(w, http.StatusConflict, "The id or type in the request body does not match the resource.")
		return
	}
	ft, answered := o.inj.early(w, "patch", id)
	if answered {
		return
	}
	if !o.inj.delay() {
		osfError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	a, _ := data["attributes"].(map[string]any)
	o.mu.Lock()
	n := o.byID[id]
	if p, ok := a["public"].(bool); ok {
		if p && !n.public {
			o.stats.Publics++
		}
		n.public = p
	}
	if t, ok := a["title"].(string); ok && t != "" {
		n.title = t
	}
	if d, ok := a["description"].(string); ok {
		n.description = d
	}
	n.modified = o.now()
	out := osfDoc(o.nodeDoc(n))
	o.mu.Unlock()
	o.finish(w, r, ft, http.StatusOK, out)
}

// list serves GET /v2/users/me/nodes/.
func (o *OSF) list(w http.ResponseWriter, r *http.Request) {
	ft, answered := o.inj.early(w, "read", r.URL.String())
	if answered {
		return
	}
	q := r.URL.Query()
	size, page := 10, 1
	if s := q.Get("page[size]"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			osfError(w, http.StatusBadRequest, "Invalid page size.")
			return
		}
		size = min(v, 100)
	}
	if s := q.Get("page"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			osfError(w, http.StatusNotFound, "Invalid page.")
			return
		}
		page = v
	}
	tag, filtered := q["filter[tags]"]
	o.mu.Lock()
	now := o.now()
	var hits []*osfNode
	for _, n := range o.order {
		if now.Before(n.created.Add(o.cfg.ListLag)) {
			continue
		}
		if filtered && !slices.ContainsFunc(n.tags, func(t string) bool { return strings.EqualFold(t, tag[0]) }) {
			continue
		}
		hits = append(hits, n)
	}
	switch q.Get("sort") {
	case "date_created":
	case "-date_created":
		slices.Reverse(hits)
	default: // -last_logged: the last write first
		slices.SortStableFunc(hits, func(x, y *osfNode) int { return y.modified.Compare(x.modified) })
	}
	total := len(hits)
	if (page-1)*size > total && page > 1 {
		o.mu.Unlock()
		osfError(w, http.StatusNotFound, "Invalid page.")
		return
	}
	data := []any{}
	for _, n := range hits[min((page-1)*size, total):min(page*size, total)] {
		data = append(data, o.nodeDoc(n))
	}
	o.mu.Unlock()
	var next any
	if page*size < total {
		nq := r.URL.Query()
		nq.Set("page", strconv.Itoa(page+1))
		next = "/v2/users/me/nodes/?" + nq.Encode()
	}
	out, _ := json.Marshal(map[string]any{"data": data, "meta": map[string]any{"total": total, "per_page": size},
		"links": map[string]any{"next": next}})
	o.finish(w, r, ft, http.StatusOK, out)
}

// mintDOI serves POST /v2/nodes/{id}/identifiers/.
func (o *OSF) mintDOI(w http.ResponseWriter, r *http.Request, id string) {
	n := o.node(id)
	if n == nil {
		osfError(w, http.StatusNotFound, "Not found.")
		return
	}
	data, ok := readJSON(w, r)
	if !ok {
		return
	}
	a, _ := data["attributes"].(map[string]any)
	if data["type"] != "identifiers" || a["category"] != "doi" {
		osfError(w, http.StatusBadRequest, "You can only mint a DOI, not a different type of identifier.")
		return
	}
	ft, answered := o.inj.early(w, "doi", id)
	if answered {
		return
	}
	if !o.inj.delay() {
		osfError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	o.mu.Lock()
	switch {
	case !n.public:
		o.mu.Unlock()
		osfError(w, http.StatusForbidden, "You do not have permission to perform this action.")
		return
	case n.doi != "":
		o.stats.DOIRefused++
		o.mu.Unlock()
		osfError(w, http.StatusBadRequest, "A DOI already exists for this resource.")
		return
	}
	n.doi = o.cfg.DOIPrefix + "/OSF.IO/" + strings.ToUpper(n.id)
	o.stats.DOIs++
	out := osfDoc(identifierDoc(n))
	o.mu.Unlock()
	o.finish(w, r, ft, http.StatusCreated, out)
}

func identifierDoc(n *osfNode) map[string]any {
	return map[string]any{"id": n.id + "-doi", "type": "identifiers", "attributes": map[string]any{"category": "doi", "value": n.doi}}
}

// identifiers serves GET /v2/nodes/{id}/identifiers/.
func (o *OSF) identifiers(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := o.inj.early(w, "read", r.URL.String())
	if answered {
		return
	}
	o.mu.Lock()
	n := o.byID[id]
	data := []any{}
	if n != nil && n.doi != "" {
		data = append(data, identifierDoc(n))
	}
	o.mu.Unlock()
	if n == nil {
		osfError(w, http.StatusNotFound, "Not found.")
		return
	}
	out, _ := json.Marshal(map[string]any{"data": data, "meta": map[string]any{"total": len(data), "per_page": 10}})
	o.finish(w, r, ft, http.StatusOK, out)
}

// waterbutler serves /v1/resources/{node}/providers/osfstorage/[{fileid}].
func (o *OSF) waterbutler(w http.ResponseWriter, r *http.Request, rest string) {
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 3 || parts[1] != "providers" {
		wbError(w, http.StatusNotFound, "Not found", nil)
		return
	}
	if parts[2] != "osfstorage" {
		wbError(w, http.StatusNotFound, fmt.Sprintf("Provider \"%s\" not found", parts[2]), nil)
		return
	}
	n := o.node(parts[0])
	if n == nil {
		wbError(w, http.StatusNotFound, "Resource not found", nil)
		return
	}
	sub := ""
	if len(parts) == 4 {
		sub = parts[3]
	}
	switch {
	case sub == "" && r.Method == http.MethodGet:
		o.listFolder(w, r, n)
	case r.Method == http.MethodPut:
		o.upload(w, r, n, strings.Trim(sub, "/"))
	default:
		wbError(w, http.StatusMethodNotAllowed, "Method not allowed", nil)
	}
}

// fileDoc is WaterButler's metadata of f in n. o.mu is held.
func fileDoc(n *osfNode, f *osfFile) map[string]any {
	return map[string]any{"id": "osfstorage/" + f.id, "type": "files", "attributes": map[string]any{
		"kind": "file", "name": f.name, "path": "/" + f.id, "materialized": "/" + f.name, "provider": "osfstorage",
		"size": f.size, "modified": f.modified.UTC().Format(time.RFC3339), "resource": n.id,
		"extra": map[string]any{"version": f.versions, "hashes": map[string]any{"md5": f.md5, "sha256": f.sha256}}}}
}

// listFolder serves GET .../osfstorage/: the top folder.
func (o *OSF) listFolder(w http.ResponseWriter, r *http.Request, n *osfNode) {
	ft, answered := o.inj.early(w, "read", r.URL.String())
	if answered {
		return
	}
	o.mu.Lock()
	data := []any{}
	for _, f := range n.files {
		data = append(data, fileDoc(n, f))
	}
	o.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"data": data})
	o.finish(w, r, ft, http.StatusOK, out)
}

// upload serves PUT .../osfstorage/?kind=file&name=NAME (a new file, 409
// for a name taken) and PUT .../osfstorage/{fileid}?kind=file (a version).
func (o *OSF) upload(w http.ResponseWriter, r *http.Request, n *osfNode, fileID string) {
	q := r.URL.Query()
	if k := q.Get("kind"); k != "" && k != "file" {
		wbError(w, http.StatusBadRequest, "this stub stores files only (no folders)", nil)
		return
	}
	if r.ContentLength < 0 {
		wbError(w, http.StatusLengthRequired, "Content-Length is required for file uploads", nil)
		return
	}
	name := q.Get("name")
	var existing *osfFile
	o.mu.Lock()
	for _, f := range n.files {
		if (fileID != "" && f.id == fileID) || (fileID == "" && f.name == name) {
			existing = f
		}
	}
	var extant map[string]any
	if existing != nil && fileID == "" {
		extant = fileDoc(n, existing)
		o.stats.Conflicts++
	}
	o.mu.Unlock()
	switch {
	case fileID == "" && name == "":
		wbError(w, http.StatusBadRequest, "Missing required parameter 'name'", nil)
		return
	case fileID != "" && name != "":
		wbError(w, http.StatusBadRequest, "'name' parameter doesn't apply to actions on files", nil)
		return
	case fileID != "" && existing == nil:
		wbError(w, http.StatusNotFound, "Could not retrieve file or directory /"+fileID, nil)
		return
	case extant != nil: // checked before the body is read, as create.py does
		wbError(w, http.StatusConflict, fmt.Sprintf("Cannot complete action: file or folder \"%s\" already exists in this location", name), extant)
		return
	}
	h256, h5 := sha256.New(), md5.New()
	size, err := io.Copy(io.MultiWriter(h256, h5), io.LimitReader(r.Body, r.ContentLength+1))
	if err != nil || size != r.ContentLength {
		wbError(w, http.StatusBadRequest, "the body is not Content-Length bytes long", nil)
		return
	}
	sum := hex.EncodeToString(h256.Sum(nil))
	ft, answered := o.inj.early(w, "upload", n.id+"\x00"+cmpOr(name, fileID)+"\x00"+sum)
	if answered {
		return
	}
	if !o.inj.delay() {
		wbError(w, http.StatusServiceUnavailable, "The server is closing.", nil)
		return
	}
	o.mu.Lock()
	now := o.now()
	status := http.StatusCreated
	f := existing
	if f == nil { // another upload of the name may have committed meanwhile: OSF then adds a version
		if i := slices.IndexFunc(n.files, func(g *osfFile) bool { return g.name == name }); i >= 0 {
			f = n.files[i]
		}
	}
	if f == nil {
		o.seq++
		f = &osfFile{id: fmt.Sprintf("%024x", o.seq), name: name}
		n.files = append(n.files, f)
		o.stats.Files++
	} else {
		status = http.StatusOK
		o.stats.Versions++
	}
	f.sha256, f.md5, f.size, f.modified = sum, hex.EncodeToString(h5.Sum(nil)), size, now
	f.versions++
	n.modified = now
	out := osfDoc(fileDoc(n, f))
	o.mu.Unlock()
	o.finish(w, r, ft, status, out)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// finish writes a JSON answer, unless ft drops or trickles it.
func (o *OSF) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, body []byte) {
	if strings.HasPrefix(r.URL.Path, "/v2/") {
		w.Header().Set("Content-Type", "application/vnd.api+json")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	o.inj.finish(w, r, ft, status, nil, body)
}

// osfDoc is a JSON:API document of one resource.
func osfDoc(data any) []byte {
	b, _ := json.Marshal(map[string]any{"data": data})
	return b
}

// osfError answers a JSON:API error document.
func osfError(w http.ResponseWriter, status int, detail string) {
	writeOSF(w, status, map[string]any{"errors": []any{map[string]any{"detail": detail}}})
}

// osfFieldError answers a 400 naming the attribute at pointer.
func osfFieldError(w http.ResponseWriter, pointer, detail string) {
	writeOSF(w, http.StatusBadRequest, map[string]any{"errors": []any{map[string]any{"source": map[string]any{"pointer": pointer}, "detail": detail}}})
}

// wbError answers WaterButler's error: {"code","message"}, or with data
// (a conflict's extant file) {"message","data"}.
func wbError(w http.ResponseWriter, status int, message string, data map[string]any) {
	doc := map[string]any{"code": status, "message": message}
	if data != nil {
		doc = map[string]any{"message": message, "data": data}
	}
	writeOSF(w, status, doc)
}

func writeOSF(w http.ResponseWriter, status int, doc any) {
	body, _ := json.Marshal(doc)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// osfRefuse answers an injected status fault.
func osfRefuse(w http.ResponseWriter, status int) {
	if status == http.StatusTooManyRequests {
		osfError(w, status, "Request was throttled.")
		return
	}
	osfError(w, status, http.StatusText(status))
}
