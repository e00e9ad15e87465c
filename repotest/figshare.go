package repotest

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FigshareConfig configures a Figshare stub. The zero value asks for no
// token, lets search see every article at once, splits uploads in parts
// of DefaultFigsharePartSize and injects no faults. NewFigshare copies it.
type FigshareConfig struct {
	// Token, when set, is the personal token every request under /v2 must
	// carry as "Authorization: token <Token>"; another, or none, is a 403.
	Token string
	// IndexLag is how long a new article takes to show in search.
	IndexLag time.Duration
	// PartSize is the size of an upload's parts but the last; default
	// DefaultFigsharePartSize.
	PartSize int64
	// DOIPrefix is the prefix of the DOIs a publish mints; default
	// "10.5072".
	DOIPrefix string
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects
	// none. See Figshare for what each write numbers its attempts by.
	Faults string
	// Seed selects the fault sequence.
	Seed int64
	// Latency delays every write before it commits.
	Latency time.Duration

	now func() time.Time
}

// DefaultFigsharePartSize is the default FigshareConfig.PartSize.
const DefaultFigsharePartSize = 5 << 20

// FigshareStats counts what a Figshare stub did. Its JSON form names each
// field in snake_case.
type FigshareStats struct {
	Requests int64 `json:"requests"` // requests received, refused and faulted ones included
	Articles int64 `json:"articles"` // articles created
	Drafts   int64 `json:"drafts"`   // articles never published, now
	// DuplicateMarkers counts articles created while an earlier one held
	// one of their deposit-sha256- tags.
	DuplicateMarkers int64 `json:"duplicate_markers"`
	Files            int64 `json:"files"` // uploads initiated
	// DuplicateFiles counts uploads initiated under a name the article
	// already held.
	DuplicateFiles int64 `json:"duplicate_files"`
	Parts          int64 `json:"parts"` // part uploads stored
	// PartsAgain counts part uploads of a part already COMPLETE.
	PartsAgain int64 `json:"parts_again"`
	Completed  int64 `json:"completed"` // uploads completed
	Publishes  int64 `json:"publishes"` // publishes (each makes a public version)
	Searches   int64 `json:"searches"`
	Faults     int64 `json:"faults"`
	// FaultsByKind counts injected faults by kind. It is a copy.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// FigshareArticle is one article the stub holds.
type FigshareArticle struct {
	ID       int64
	Title    string
	DOI      string // "" until published
	Public   bool
	Versions int // public versions
	Tags     []string
	Files    []FigshareFile
}

// FigshareFile is one file of an article.
type FigshareFile struct {
	ID        int64
	Name      string
	Size      int64
	MD5       string // supplied at initiate
	Computed  string // of the bytes assembled, "" until completed
	Completed bool
}

// Figshare is a stub of Figshare's API v2 under /v2 and of its upload
// service under /upload, as an http.Handler, following
// figshare/user_documentation (docs/api/index.md, file_uploader.md,
// upload_example.md, and the swagger models and paths):
//
//   - POST /v2/account/articles with a body holding a title creates a
//     private article: 201 {"entity_id":N,"location":".../v2/account/articles/N"};
//     no title is a 400. Nothing is arbitrated: every create is a new
//     article. tags (or keywords) are kept as tags.
//   - GET /v2/account/articles?page=&page_size= (or limit=&offset=) lists
//     the account's articles from the database at once, newest first, in
//     the short form (id, title, doi, url, published_date, ...); mixing
//     the two pairs is a 422, and so is an offset past 1000 (index.md).
//   - POST /v2/account/articles/search {"search_for":...} answers the
//     short forms of the articles an index sees, each IndexLag after its
//     create: ":tag: T" matches a tag exactly, any other text a title that
//     holds it. It takes the same paging members.
//   - GET /v2/account/articles/{id} answers the private article: id, title,
//     doi, tags, status ("draft", "public"), is_public, version, files.
//     An unknown id is a 404 {"message":...,"code":...}.
//   - POST .../{id}/files {"name","size","md5"} initiates an upload: 201
//     {"location":".../files/F"}; every initiate is a new file.
//     GET .../{id}/files lists them and GET .../files/{F} answers one, with
//     status ("created", then "available"), supplied_md5, computed_md5,
//     upload_token and upload_url ({URL}/upload/{token}, on the stub's own
//     host, where Figshare's is another).
//   - GET /upload/{token} answers the upload (token, name, size, md5,
//     status PENDING or COMPLETED, parts with partNo, startOffset,
//     endOffset inclusive, status PENDING or COMPLETE, locked);
//     GET /upload/{token}/{n} one part; PUT /upload/{token}/{n} stores the
//     part's bytes (200), a body of another length is a 400 (Figshare's
//     would time out), a part locked by a PUT in flight a 409, an upload
//     completed a 409.
//   - POST .../{id}/files/{F} completes the upload: 202 once every part is
//     COMPLETE (the file's MD5 computed from the parts), else a 400; a
//     second complete is a 400.
//   - POST .../{id}/publish makes a public version (201, the public
//     location) and mints the DOI at the first ({DOIPrefix}/figshare.{id});
//     every publish makes one more version.
//
// Faults (Config.Faults) apply to the writes: creates numbered by body,
// initiates by article, name and MD5, parts by token and number, completes
// by token, publishes by article, and, with the reads rule, reads by URL.
// A drop commits the write and hangs up; a status fault answers before
// anything commits, a 429 with Retry-After.
//
// What it leaves out: one account, no institutions, groups, custom fields,
// collections, projects, authors or categories checked, no embargo,
// private links, file deletes, link-only files, article updates or
// deletes, no rate limit of its own, no upload expiry or ABORTED uploads,
// and no persistence. Search parses the two forms above, ranks nothing and
// orders by id.
//
// Figshare is safe for concurrent use.
type Figshare struct {
	cfg FigshareConfig
	inj *injector
	now func() time.Time

	stubLife // mu guards what follows
	articles map[int64]*fsArticle
	order    []*fsArticle
	uploads  map[string]*fsFile
	markers  map[string]bool
	nextID   int64
	stats    FigshareStats
}

type fsArticle struct {
	id       int64
	title    string
	tags     []string
	body     map[string]any
	created  time.Time
	doi      string
	versions int
	files    []*fsFile
}

type fsFile struct {
	id        int64
	article   int64
	name      string
	size      int64
	md5       string
	token     string
	parts     []*fsPart
	completed bool
	computed  string
}

type fsPart struct {
	start, end int64 // inclusive
	data       []byte
	complete   bool
	locked     bool
}

// NewFigshare returns a Figshare stub for cfg.
func NewFigshare(cfg FigshareConfig) (*Figshare, error) {
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.IndexLag < 0 || cfg.PartSize < 0 || cfg.Latency < 0 {
		return nil, fmt.Errorf("%w: durations and sizes must not be negative", ErrConfig)
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultFigsharePartSize
	}
	if cfg.DOIPrefix == "" {
		cfg.DOIPrefix = "10.5072"
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	f := &Figshare{cfg: cfg, now: cfg.now, stubLife: newStubLife(), nextID: 1000,
		articles: map[int64]*fsArticle{}, uploads: map[string]*fsFile{}, markers: map[string]bool{}}
	f.inj = newInjector(faults, cfg.Seed, cfg.Latency, cfg.now, f.done, fsInjected, &f.mu)
	return f, nil
}

// Close ends every wait; later requests get 503. Close is idempotent.
func (f *Figshare) Close() error { return f.end() }

// Stats returns a snapshot of the counters.
func (f *Figshare) Stats() FigshareStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	s.Drafts = 0
	for _, a := range f.order {
		if a.versions == 0 {
			s.Drafts++
		}
	}
	s.Faults, s.FaultsByKind = f.inj.count, maps.Clone(f.inj.byKind)
	return s
}

// Articles returns every article, in creation order.
func (f *Figshare) Articles() []FigshareArticle {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]FigshareArticle, 0, len(f.order))
	for _, a := range f.order {
		fa := FigshareArticle{ID: a.id, Title: a.title, DOI: a.doi, Public: a.versions > 0, Versions: a.versions, Tags: slices.Clone(a.tags)}
		for _, fl := range a.files {
			fa.Files = append(fa.Files, FigshareFile{ID: fl.id, Name: fl.name, Size: fl.size, MD5: fl.md5, Computed: fl.computed, Completed: fl.completed})
		}
		out = append(out, fa)
	}
	return out
}

// ServeHTTP answers one request.
func (f *Figshare) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !f.admitRequest(&f.stats.Requests) {
		fsError(w, http.StatusServiceUnavailable, "The server is closed.")
		return
	}
	if f.cfg.Token != "" && r.Header.Get("Authorization") != "token "+f.cfg.Token {
		fsError(w, http.StatusForbidden, "Invalid or expired token")
		return
	}
	if rest, ok := strings.CutPrefix(r.URL.Path, "/upload/"); ok {
		f.upload(w, r, strings.Split(rest, "/"))
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/account/articles")
	if !ok {
		fsError(w, http.StatusNotFound, "Not found")
		return
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if parts[0] == "" {
		parts = nil
	}
	switch {
	case len(parts) == 0 && r.Method == http.MethodPost:
		f.create(w, r)
	case len(parts) == 0 && r.Method == http.MethodGet:
		f.list(w, r)
	case len(parts) == 1 && parts[0] == "search" && r.Method == http.MethodPost:
		f.search(w, r)
	default:
		id, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil || len(parts) > 3 {
			fsError(w, http.StatusNotFound, "Not found")
			return
		}
		f.routeArticle(w, r, id, parts[1:])
	}
}

func (f *Figshare) routeArticle(w http.ResponseWriter, r *http.Request, id int64, sub []string) {
	f.mu.Lock()
	a := f.articles[id]
	f.mu.Unlock()
	if a == nil {
		fsError(w, http.StatusNotFound, "Article not found")
		return
	}
	switch {
	case len(sub) == 0 && r.Method == http.MethodGet:
		f.read(w, r, func() any { return f.articleDoc(r, a) })
	case len(sub) == 1 && sub[0] == "publish" && r.Method == http.MethodPost:
		f.publish(w, r, a)
	case len(sub) == 1 && sub[0] == "files" && r.Method == http.MethodPost:
		f.initiate(w, r, a)
	case len(sub) == 1 && sub[0] == "files" && r.Method == http.MethodGet:
		f.read(w, r, func() any {
			out := []any{}
			for _, fl := range a.files {
				out = append(out, f.fileDoc(r, fl))
			}
			return out
		})
	case len(sub) == 2 && sub[0] == "files":
		fid, _ := strconv.ParseInt(sub[1], 10, 64)
		f.mu.Lock()
		var fl *fsFile
		for _, x := range a.files {
			if x.id == fid {
				fl = x
			}
		}
		f.mu.Unlock()
		switch {
		case fl == nil:
			fsError(w, http.StatusNotFound, "File not found")
		case r.Method == http.MethodGet:
			f.read(w, r, func() any { return f.fileDoc(r, fl) })
		case r.Method == http.MethodPost:
			f.complete(w, r, a, fl)
		default:
			fsError(w, http.StatusMethodNotAllowed, "Method not allowed")
		}
	default:
		fsError(w, http.StatusNotFound, "Not found")
	}
}

// base is the scheme and host the request came to, for locations.
func base(r *http.Request) string { return "http://" + r.Host }

// read answers a read, faulted by URL under the reads rule; doc is built
// under the lock.
func (f *Figshare) read(w http.ResponseWriter, r *http.Request, doc func() any) {
	ft, answered := f.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	f.mu.Lock()
	body, _ := json.Marshal(doc())
	f.mu.Unlock()
	f.finish(w, r, ft, http.StatusOK, body)
}

func (f *Figshare) create(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil || len(raw) > DefaultMaxBodyBytes {
		fsError(w, http.StatusRequestEntityTooLarge, "The request body is too large")
		return
	}
	var body map[string]any
	if json.Unmarshal(raw, &body) != nil || body == nil {
		fsError(w, http.StatusBadRequest, "Invalid JSON body")
		return
	}
	title, _ := body["title"].(string)
	if strings.TrimSpace(title) == "" {
		fsError(w, http.StatusBadRequest, "Missing field: title")
		return
	}
	var tags []string
	for _, k := range []string{"tags", "keywords"} {
		list, _ := body[k].([]any)
		for _, t := range list {
			if s, ok := t.(string); ok && !slices.Contains(tags, s) {
				tags = append(tags, s)
			}
		}
	}
	sum := sha256.Sum256(raw)
	ft, answered := f.inj.early(w, "create", hex.EncodeToString(sum[:]))
	if answered {
		return
	}
	if !f.inj.delay() {
		fsError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	f.mu.Lock()
	a := &fsArticle{id: f.nextID, title: title, tags: tags, body: body, created: f.now()}
	f.nextID++
	for _, t := range tags {
		if strings.HasPrefix(t, "deposit-sha256-") && f.markers[t] {
			f.stats.DuplicateMarkers++
			break
		}
	}
	for _, t := range tags {
		f.markers[t] = true
	}
	f.articles[a.id] = a
	f.order = append(f.order, a)
	f.stats.Articles++
	f.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"entity_id": a.id, "location": base(r) + "/v2/account/articles/" + strconv.FormatInt(a.id, 10)})
	f.finish(w, r, ft, http.StatusCreated, out)
}

// paging reads page/page_size or limit/offset from q (strings), as
// offset and size; a 422 message when they are mixed or past the limit.
func paging(get func(string) string) (offset, size int, problem string) {
	page, pageSize, limit, off := get("page"), get("page_size"), get("limit"), get("offset")
	num := func(s string, def int) int {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return def
		}
		return n
	}
	switch {
	case (page != "" || pageSize != "") && (limit != "" || off != ""):
		return 0, 0, "Confusing pagination parameters"
	case limit != "" || off != "":
		offset, size = num(off, 0), num(limit, 10)
	default:
		size = num(pageSize, 10)
		offset = (max(num(page, 1), 1) - 1) * size
	}
	if size < 1 || size > 1000 {
		return 0, 0, "page_size/limit must be between 1 and 1000"
	}
	if offset > 1000 {
		return 0, 0, "Offset is limited to 1000"
	}
	return offset, size, ""
}

// short is an article's short form. f.mu is held.
func (f *Figshare) short(r *http.Request, a *fsArticle) map[string]any {
	id := strconv.FormatInt(a.id, 10)
	var published any
	if a.versions > 0 {
		published = a.created.UTC().Format(time.RFC3339)
	}
	return map[string]any{"id": a.id, "title": a.title, "doi": a.doi, "handle": "", "group_id": nil,
		"url": base(r) + "/v2/account/articles/" + id, "url_private_api": base(r) + "/v2/account/articles/" + id,
		"url_public_api": base(r) + "/v2/articles/" + id, "published_date": published, "defined_type": 3,
		"resource_title": nil, "resource_doi": nil, "thumb": ""}
}

// page answers the short forms of hits from offset, size of them.
func (f *Figshare) page(w http.ResponseWriter, r *http.Request, ft fault, hits []*fsArticle, offset, size int) {
	out := []any{}
	f.mu.Lock()
	for i := offset; i < len(hits) && i < offset+size; i++ {
		out = append(out, f.short(r, hits[i]))
	}
	f.mu.Unlock()
	body, _ := json.Marshal(out)
	f.finish(w, r, ft, http.StatusOK, body)
}

func (f *Figshare) list(w http.ResponseWriter, r *http.Request) {
	offset, size, problem := paging(r.URL.Query().Get)
	if problem != "" {
		fsError(w, http.StatusUnprocessableEntity, problem)
		return
	}
	ft, answered := f.inj.early(w, "read", r.URL.Path+"?"+r.URL.RawQuery)
	if answered {
		return
	}
	f.mu.Lock()
	hits := slices.Clone(f.order)
	f.mu.Unlock()
	slices.Reverse(hits)
	f.page(w, r, ft, hits, offset, size)
}

func (f *Figshare) search(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes))
	var q map[string]any
	if json.Unmarshal(raw, &q) != nil || q == nil {
		fsError(w, http.StatusBadRequest, "Invalid JSON body")
		return
	}
	get := func(k string) string {
		switch v := q[k].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return ""
	}
	offset, size, problem := paging(get)
	if problem != "" {
		fsError(w, http.StatusUnprocessableEntity, problem)
		return
	}
	term := strings.TrimSpace(get("search_for"))
	if len(term) < 3 {
		fsError(w, http.StatusBadRequest, "search_for must have at least 3 characters")
		return
	}
	ft, answered := f.inj.early(w, "read", "search\x00"+string(raw))
	if answered {
		return
	}
	tag, byTag := strings.CutPrefix(term, ":tag:")
	tag = strings.Trim(strings.TrimSpace(tag), `"`)
	f.mu.Lock()
	f.stats.Searches++
	now := f.now()
	var hits []*fsArticle
	for _, a := range f.order {
		switch {
		case now.Sub(a.created) < f.cfg.IndexLag:
		case byTag && slices.Contains(a.tags, tag):
			hits = append(hits, a)
		case !byTag && strings.Contains(strings.ToLower(a.title), strings.ToLower(term)):
			hits = append(hits, a)
		}
	}
	f.mu.Unlock()
	f.page(w, r, ft, hits, offset, size)
}

// articleDoc is the private article. f.mu is held.
func (f *Figshare) articleDoc(r *http.Request, a *fsArticle) map[string]any {
	doc := f.short(r, a)
	status := "draft"
	if a.versions > 0 {
		status = "public"
	}
	files := []any{}
	for _, fl := range a.files {
		files = append(files, f.fileDoc(r, fl))
	}
	maps.Copy(doc, map[string]any{"tags": slices.Clone(a.tags), "status": status, "is_public": a.versions > 0,
		"version": a.versions, "created_date": a.created.UTC().Format(time.RFC3339), "files": files,
		"description": a.body["description"], "references": []any{}, "custom_fields": []any{}})
	return doc
}

// fileDoc is a private file. f.mu is held.
func (f *Figshare) fileDoc(r *http.Request, fl *fsFile) map[string]any {
	status := "created"
	if fl.completed {
		status = "available"
	}
	return map[string]any{"id": fl.id, "name": fl.name, "size": fl.size, "is_link_only": false,
		"download_url": base(r) + "/ndownloader/files/" + strconv.FormatInt(fl.id, 10),
		"supplied_md5": fl.md5, "computed_md5": fl.computed, "status": status, "viewer_type": "", "preview_state": "",
		"upload_url": base(r) + "/upload/" + fl.token, "upload_token": fl.token}
}

func (f *Figshare) initiate(w http.ResponseWriter, r *http.Request, a *fsArticle) {
	var req struct {
		Name string `json:"name"`
		Size *int64 `json:"size"`
		MD5  string `json:"md5"`
		Link string `json:"link"`
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes))
	if json.Unmarshal(raw, &req) != nil || req.Link != "" || req.Name == "" || req.Size == nil || *req.Size < 0 {
		fsError(w, http.StatusBadRequest, "Provide name, size and md5 (link-only files are not emulated)")
		return
	}
	ft, answered := f.inj.early(w, "initiate", strconv.FormatInt(a.id, 10)+"\x00"+req.Name+"\x00"+req.MD5)
	if answered {
		return
	}
	if !f.inj.delay() {
		fsError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	f.mu.Lock()
	fl := &fsFile{id: f.nextID, article: a.id, name: req.Name, size: *req.Size, md5: strings.ToLower(req.MD5)}
	f.nextID++
	sum := sha256.Sum256(fmt.Appendf(nil, "%d\x00%d\x00%d", f.cfg.Seed, a.id, fl.id))
	fl.token = hex.EncodeToString(sum[:16])
	for start := int64(0); start < fl.size || (start == 0 && fl.size == 0); start += f.cfg.PartSize {
		end := min(start+f.cfg.PartSize, fl.size) - 1
		fl.parts = append(fl.parts, &fsPart{start: start, end: end})
		if fl.size == 0 {
			break
		}
	}
	for _, x := range a.files {
		if x.name == fl.name {
			f.stats.DuplicateFiles++
			break
		}
	}
	a.files = append(a.files, fl)
	f.uploads[fl.token] = fl
	f.stats.Files++
	f.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"location": base(r) + "/v2/account/articles/" + strconv.FormatInt(a.id, 10) + "/files/" + strconv.FormatInt(fl.id, 10)})
	f.finish(w, r, ft, http.StatusCreated, out)
}

// upload serves the upload service: /upload/{token}[/{n}].
func (f *Figshare) upload(w http.ResponseWriter, r *http.Request, parts []string) {
	f.mu.Lock()
	fl := f.uploads[parts[0]]
	f.mu.Unlock()
	if fl == nil || len(parts) > 2 {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	var p *fsPart
	n := 0
	if len(parts) == 2 {
		n, _ = strconv.Atoi(parts[1])
		if n < 1 || n > len(fl.parts) {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		p = fl.parts[n-1]
	}
	switch {
	case r.Method == http.MethodGet && p == nil:
		f.read(w, r, func() any { return uploadDoc(fl) })
	case r.Method == http.MethodGet:
		f.read(w, r, func() any { return partDoc(n, p) })
	case r.Method == http.MethodPut && p != nil:
		f.putPart(w, r, fl, n, p)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// uploadDoc is GET /upload/{token}. f.mu is held.
func uploadDoc(fl *fsFile) map[string]any {
	status := "PENDING"
	if fl.completed {
		status = "COMPLETED"
	}
	parts := []any{}
	for i, p := range fl.parts {
		parts = append(parts, partDoc(i+1, p))
	}
	return map[string]any{"token": fl.token, "name": fl.name, "size": fl.size, "md5": fl.md5, "status": status, "parts": parts}
}

func partDoc(n int, p *fsPart) map[string]any {
	status := "PENDING"
	if p.complete {
		status = "COMPLETE"
	}
	return map[string]any{"partNo": n, "startOffset": p.start, "endOffset": p.end, "status": status, "locked": p.locked}
}

func (f *Figshare) putPart(w http.ResponseWriter, r *http.Request, fl *fsFile, n int, p *fsPart) {
	ft, answered := f.inj.early(w, "part", fl.token+"\x00"+strconv.Itoa(n))
	if answered {
		return
	}
	f.mu.Lock()
	refused := fl.completed || p.locked
	if !refused {
		p.locked = true
	}
	f.mu.Unlock()
	if refused {
		w.WriteHeader(http.StatusConflict)
		return
	}
	want := p.end - p.start + 1
	data, err := io.ReadAll(io.LimitReader(r.Body, want+1))
	ok := err == nil && int64(len(data)) == want && f.inj.delay()
	f.mu.Lock()
	p.locked = false
	if ok {
		if p.complete {
			f.stats.PartsAgain++
		}
		p.data, p.complete = data, true
		f.stats.Parts++
	}
	f.mu.Unlock()
	if !ok {
		fsError(w, http.StatusBadRequest, fmt.Sprintf("part %d takes %d bytes", n, want))
		return
	}
	f.finish(w, r, ft, http.StatusOK, nil)
}

func (f *Figshare) complete(w http.ResponseWriter, r *http.Request, a *fsArticle, fl *fsFile) {
	ft, answered := f.inj.early(w, "complete", fl.token)
	if answered {
		return
	}
	if !f.inj.delay() {
		fsError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	f.mu.Lock()
	problem := ""
	switch {
	case fl.completed:
		problem = "File upload already completed"
	case slices.ContainsFunc(fl.parts, func(p *fsPart) bool { return !p.complete }):
		problem = "Not all parts of the file were uploaded"
	default:
		var h hash.Hash = md5.New()
		for _, p := range fl.parts {
			h.Write(p.data)
			p.data = nil
		}
		fl.computed, fl.completed = hex.EncodeToString(h.Sum(nil)), true
		f.stats.Completed++
	}
	f.mu.Unlock()
	if problem != "" {
		fsError(w, http.StatusBadRequest, problem)
		return
	}
	out, _ := json.Marshal(map[string]any{"location": base(r) + "/v2/account/articles/" + strconv.FormatInt(a.id, 10) + "/files/" + strconv.FormatInt(fl.id, 10)})
	f.finish(w, r, ft, http.StatusAccepted, out)
}

func (f *Figshare) publish(w http.ResponseWriter, r *http.Request, a *fsArticle) {
	ft, answered := f.inj.early(w, "publish", strconv.FormatInt(a.id, 10))
	if answered {
		return
	}
	if !f.inj.delay() {
		fsError(w, http.StatusServiceUnavailable, "The server is closing.")
		return
	}
	f.mu.Lock()
	a.versions++
	if a.doi == "" {
		a.doi = f.cfg.DOIPrefix + "/figshare." + strconv.FormatInt(a.id, 10)
	}
	f.stats.Publishes++
	f.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"location": base(r) + "/v2/articles/" + strconv.FormatInt(a.id, 10)})
	f.finish(w, r, ft, http.StatusCreated, out)
}

func (f *Figshare) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, body []byte) {
	if body != nil {
		w.Header().Set("Content-Type", "application/json")
	}
	f.inj.finish(w, r, ft, status, nil, body)
}

// fsError answers Figshare's error body.
func fsError(w http.ResponseWriter, status int, message string) {
	body, _ := json.Marshal(map[string]any{"message": message, "code": strings.ReplaceAll(http.StatusText(status), " ", "")})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func fsInjected(w http.ResponseWriter, status int) { fsError(w, status, http.StatusText(status)) }
