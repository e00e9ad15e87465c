package repotest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DataCiteConfig configures a DataCite stub. The zero value mints under the
// test prefix 10.5072, asks for no credentials and injects no faults.
// NewDataCite copies it; later changes have no effect.
type DataCiteConfig struct {
	// Prefixes are the DOI prefixes the repository may mint under; default
	// ["10.5072"]. A DOI under another prefix is a 403.
	Prefixes []string
	// Username and Password, when Username is set, are the repository ID
	// and password every write, and every read of a draft, must carry as
	// HTTP basic auth. Wrong credentials are a 401 on any request.
	Username, Password string
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects none.
	// Creates (POST /dois) are numbered per DOI (per body when only a
	// prefix is given), updates (PUT) and reads (GET, with the reads rule)
	// per DOI apart.
	Faults string
	// Seed selects the fault sequence and the random suffixes.
	Seed int64
	// Latency delays every create and update before it commits.
	Latency time.Duration

	beforeCommit func(doi string) // test seam: a create is about to wait and commit
	onWait       func(doi string) // test seam: a create waits for another one of the same DOI
}

// DataCiteDOI is one DOI the stub holds.
type DataCiteDOI struct {
	DOI   string // lower case
	State string // "draft", "registered" or "findable"
	// Attributes are the DOI's attributes as the stub answers them: those
	// sent, merged over updates, plus doi, prefix, suffix and state.
	Attributes json.RawMessage
	Created    time.Time
	// Versions counts the DOI's metadata versions: 1 at its creation,
	// one more for each update of its metadata (an event alone is none).
	Versions int
}

// DataCiteStats counts what a DataCite stub did. All counts start at zero.
// Its JSON form names each field in snake_case.
type DataCiteStats struct {
	Requests  int64 `json:"requests"`  // requests received, faulted and refused ones included
	Minted    int64 `json:"minted"`    // DOIs created, by POST or by a PUT to a new DOI
	Taken     int64 `json:"taken"`     // 422 "This DOI has already been taken" answers
	Conflicts int64 `json:"conflicts"` // 409 answers: a create that lost a race for its DOI
	Updates   int64 `json:"updates"`   // PUTs to an existing DOI, events alone included
	// MetadataUpdates counts the PUTs to an existing DOI that carried
	// metadata (any attribute but doi and event): each a new version.
	MetadataUpdates int64 `json:"metadata_updates"`
	// EventRequests counts creates and updates carrying an event that
	// committed; Events counts those that moved a DOI to another state.
	EventRequests int64 `json:"event_requests"`
	Events        int64 `json:"events"`
	Faults        int64 `json:"faults"` // faults injected, all kinds
	// FaultsByKind counts injected faults by kind as written in the spec. It
	// is a copy.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// DataCite is a stub of DataCite's REST API (the /dois resource) as an
// http.Handler, following the behaviour a deposit client must survive:
//
//   - POST /dois with a JSON:API body {"data":{"type":"dois","attributes":
//     {...}}} creates a draft DOI and answers 201 with the DOI as JSON:API.
//     With attributes.prefix and no attributes.doi it picks a random suffix,
//     so every such request mints a new DOI. With a doi that exists it
//     answers 422 {"errors":[{"source":"doi","title":"This DOI has already
//     been taken","uid":"<doi>"}]}. A create that arrives while another
//     create of the same DOI is committing waits for it, and then answers
//     409 {"errors":[{"status":"409","title":"The resource already
//     exists."}]}, as the database's unique index makes the second of two
//     racing creators fail.
//   - PUT /dois/{doi} is an upsert: 201 when it creates, 200 when it
//     updates (top-level attributes replaced, alternateIdentifiers as a
//     whole; "Update a doi" answers 200 in openapi.yaml of datacite/lupo).
//     An update keeps the DOI's state unless it carries an event.
//   - attributes.event moves a DOI: register (draft to registered), publish
//     (draft or registered to findable), hide (findable to registered);
//     another event for the state changes nothing. Register and publish
//     need url, creators, titles, publisher, publicationYear and types: a
//     422 names each missing one.
//   - GET /dois/{doi} answers 200 with the DOI, or 404. Drafts are visible
//     only with the credentials.
//   - DOIs are case-insensitive and stored lower case.
//   - Faults (Config.Faults) apply to creates, updates and, with the reads
//     rule, reads: 429 and 503 with or without Retry-After, 5xx, reset,
//     drop after commit (the 422 "taken" answer included), slow bodies.
//
// What it leaves out: one repository with one set of credentials (a DOI
// another repository owns is simulated by one this repository created
// without the client's key); no listing, search, deletion, XML, content
// negotiation or Fabrica; no schema validation beyond the attributes above;
// no real rate limit (429 only as an injected fault); no persistence. A PUT
// racing a create of the same DOI is not serialised against it.
//
// DataCite is safe for concurrent use.
type DataCite struct {
	cfg DataCiteConfig
	inj *injector

	stubLife // mu guards what follows
	dois     map[string]*dcRecord
	order    []*dcRecord
	inflight map[string]chan struct{} // DOI -> closed when its create ends
	seq      uint64                   // random suffixes drawn
	stats    DataCiteStats
}

type dcRecord struct {
	doi      string
	state    string
	attrs    map[string]any
	created  time.Time
	updated  time.Time
	versions int // metadata versions: 1 + metadata updates
}

// NewDataCite returns a DataCite stub for cfg.
func NewDataCite(cfg DataCiteConfig) (*DataCite, error) {
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.Latency < 0 {
		return nil, fmt.Errorf("%w: latency must not be negative", ErrConfig)
	}
	if len(cfg.Prefixes) == 0 {
		cfg.Prefixes = []string{"10.5072"}
	}
	cfg.Prefixes = slices.Clone(cfg.Prefixes)
	for i, p := range cfg.Prefixes {
		cfg.Prefixes[i] = strings.ToLower(p)
	}
	d := &DataCite{cfg: cfg, stubLife: newStubLife(), dois: map[string]*dcRecord{}, inflight: map[string]chan struct{}{}}
	d.inj = newInjector(faults, cfg.Seed, cfg.Latency, time.Now, d.done, injectedDCError, &d.mu)
	return d, nil
}

// Close ends every wait; later requests get 503. Close is idempotent.
func (d *DataCite) Close() error { return d.end() }

// Stats returns a snapshot of the counters.
func (d *DataCite) Stats() DataCiteStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Faults, s.FaultsByKind = d.inj.count, maps.Clone(d.inj.byKind)
	return s
}

// DOIs returns every DOI, in creation order.
func (d *DataCite) DOIs() []DataCiteDOI {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]DataCiteDOI, len(d.order))
	for i, r := range d.order {
		out[i] = DataCiteDOI{DOI: r.doi, State: r.state, Attributes: r.attributes(), Created: r.created, Versions: r.versions}
	}
	return out
}

// ServeHTTP answers one request of the /dois API.
func (d *DataCite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !d.admitRequest(&d.stats.Requests) {
		dcError(w, http.StatusServiceUnavailable, "", "The server is closed.")
		return
	}
	authed := d.cfg.Username == ""
	if !authed {
		user, pass, ok := r.BasicAuth()
		if ok || r.Header.Get("Authorization") != "" {
			if !ok || user != d.cfg.Username || pass != d.cfg.Password {
				dcError(w, http.StatusUnauthorized, "", "Bad credentials.")
				return
			}
			authed = true
		}
	}
	path := r.URL.Path
	switch {
	case path == "/dois" && r.Method == http.MethodPost:
		if !authed {
			dcError(w, http.StatusUnauthorized, "", "Bad credentials.")
			return
		}
		d.create(w, r)
	case strings.HasPrefix(path, "/dois/") && len(path) > len("/dois/"):
		doi := strings.ToLower(strings.TrimPrefix(path, "/dois/"))
		switch r.Method {
		case http.MethodGet:
			d.read(w, r, doi, authed)
		case http.MethodPut:
			if !authed {
				dcError(w, http.StatusUnauthorized, "", "Bad credentials.")
				return
			}
			d.update(w, r, doi)
		default:
			w.Header().Set("Allow", "GET, PUT")
			dcError(w, http.StatusMethodNotAllowed, "", "Method not allowed.")
		}
	case path == "/dois":
		w.Header().Set("Allow", "POST")
		dcError(w, http.StatusMethodNotAllowed, "", "Method not allowed.")
	default:
		dcError(w, http.StatusNotFound, "", "The resource you are looking for doesn't exist.")
	}
}

// create serves POST /dois.
func (d *DataCite) create(w http.ResponseWriter, r *http.Request) {
	attrs, ok := readDOIBody(w, r)
	if !ok {
		return
	}
	doi, _ := attrs["doi"].(string)
	doi = strings.ToLower(doi)
	faultKey := doi
	if doi == "" {
		prefix, _ := attrs["prefix"].(string)
		if prefix == "" {
			dcErrors(w, http.StatusUnprocessableEntity, []dcErr{{Source: "doi", Title: "Can't be blank"}})
			return
		}
		doi = d.randomDOI(strings.ToLower(prefix))
		// Numbered by body, so a retry of the same create is attempt 2.
		canon, _ := json.Marshal(attrs)
		sum := sha256.Sum256(canon)
		faultKey = "prefix\x00" + hex.EncodeToString(sum[:])
	}
	if !d.allowed(doi) {
		dcError(w, http.StatusForbidden, "", "You are not authorized to access this resource.")
		return
	}
	ft, answered := d.inj.early(w, "create", faultKey)
	if answered {
		return
	}
	event, _ := attrs["event"].(string)
	if errs := missingFor(event, attrs, doi); len(errs) > 0 {
		dcErrors(w, http.StatusUnprocessableEntity, errs)
		return
	}
	for first := true; ; first = false {
		d.mu.Lock()
		if _, exists := d.dois[doi]; exists {
			if first {
				d.stats.Taken++
				d.mu.Unlock()
				body, _ := json.Marshal(map[string]any{"errors": []dcErr{{Source: "doi", Title: "This DOI has already been taken", UID: doi}}})
				d.finish(w, r, ft, http.StatusUnprocessableEntity, nil, body)
				return
			}
			// Lost the race to a create that was committing.
			d.stats.Conflicts++
			d.mu.Unlock()
			dcErrors(w, http.StatusConflict, []dcErr{{Status: "409", Title: "The resource already exists."}})
			return
		}
		ch, busy := d.inflight[doi]
		if !busy {
			ch = make(chan struct{})
			d.inflight[doi] = ch
			d.mu.Unlock()
			break
		}
		d.mu.Unlock()
		if d.cfg.onWait != nil {
			d.cfg.onWait(doi)
		}
		select {
		case <-ch:
		case <-d.done:
			dcError(w, http.StatusServiceUnavailable, "", "The server is closing.")
			return
		}
	}
	end := func() {
		close(d.inflight[doi])
		delete(d.inflight, doi)
	}
	if d.cfg.beforeCommit != nil {
		d.cfg.beforeCommit(doi)
	}
	if !d.inj.delay() {
		d.mu.Lock()
		end()
		d.mu.Unlock()
		dcError(w, http.StatusServiceUnavailable, "", "The server is closing.")
		return
	}
	d.mu.Lock()
	rec := d.add(doi, attrs)
	d.applyEvent(rec, event)
	end()
	out := rec.encode()
	d.mu.Unlock()
	d.finish(w, r, ft, http.StatusCreated, http.Header{"Location": {doiURL(r, doi)}}, out)
}

// update serves PUT /dois/{doi}: an upsert.
func (d *DataCite) update(w http.ResponseWriter, r *http.Request, doi string) {
	attrs, ok := readDOIBody(w, r)
	if !ok {
		return
	}
	if !d.allowed(doi) {
		dcError(w, http.StatusForbidden, "", "You are not authorized to access this resource.")
		return
	}
	ft, answered := d.inj.early(w, "update", doi)
	if answered {
		return
	}
	delete(attrs, "doi")
	event, _ := attrs["event"].(string)
	if !d.inj.delay() {
		dcError(w, http.StatusServiceUnavailable, "", "The server is closing.")
		return
	}
	d.mu.Lock()
	rec, exists := d.dois[doi]
	merged := maps.Clone(attrs)
	if exists {
		merged = maps.Clone(rec.attrs)
		maps.Copy(merged, attrs)
	}
	if errs := missingFor(event, merged, doi); len(errs) > 0 {
		d.mu.Unlock()
		dcErrors(w, http.StatusUnprocessableEntity, errs)
		return
	}
	status := http.StatusOK
	if exists {
		rec.attrs = merged
		rec.updated = time.Now().UTC()
		d.stats.Updates++
		if hasMetadata(attrs) {
			d.stats.MetadataUpdates++
			rec.versions++
		}
	} else {
		rec = d.add(doi, attrs)
		status = http.StatusCreated
	}
	d.applyEvent(rec, event)
	out := rec.encode()
	d.mu.Unlock()
	d.finish(w, r, ft, status, nil, out)
}

// read serves GET /dois/{doi}.
func (d *DataCite) read(w http.ResponseWriter, r *http.Request, doi string, authed bool) {
	ft, answered := d.inj.early(w, "read", doi)
	if answered {
		return
	}
	d.mu.Lock()
	rec, ok := d.dois[doi]
	var out []byte
	if ok && (authed || rec.state != "draft") {
		out = rec.encode()
	}
	d.mu.Unlock()
	if out == nil {
		dcError(w, http.StatusNotFound, "", "The resource you are looking for doesn't exist.")
		return
	}
	d.finish(w, r, ft, http.StatusOK, nil, out)
}

// add stores a new draft DOI. d.mu is held.
func (d *DataCite) add(doi string, attrs map[string]any) *dcRecord {
	now := time.Now().UTC()
	attrs = maps.Clone(attrs)
	delete(attrs, "doi")
	delete(attrs, "prefix")
	delete(attrs, "suffix")
	rec := &dcRecord{doi: doi, state: "draft", attrs: attrs, created: now, updated: now, versions: 1}
	d.dois[doi] = rec
	d.order = append(d.order, rec)
	d.stats.Minted++
	return rec
}

// applyEvent moves rec by event and counts it. d.mu is held.
func (d *DataCite) applyEvent(rec *dcRecord, event string) {
	delete(rec.attrs, "event")
	if event == "" {
		return
	}
	d.stats.EventRequests++
	next := rec.state
	switch {
	case event == "register" && rec.state == "draft":
		next = "registered"
	case event == "publish" && (rec.state == "draft" || rec.state == "registered"):
		next = "findable"
	case event == "hide" && rec.state == "findable":
		next = "registered"
	}
	if next != rec.state {
		rec.state = next
		d.stats.Events++
	}
}

// randomDOI draws a DOI under prefix that is not taken, with a suffix
// shaped like DataCite's ("xxxx-xxxx"). d.mu is not held.
func (d *DataCite) randomDOI(prefix string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for {
		d.seq++
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(d.cfg.Seed))
		binary.BigEndian.PutUint64(b[8:], d.seq)
		sum := sha256.Sum256(b[:])
		s := strings.ToLower(base32.StdEncoding.EncodeToString(sum[:5]))
		doi := prefix + "/" + s[:4] + "-" + s[4:8]
		if _, taken := d.dois[doi]; !taken {
			return doi
		}
	}
}

func (d *DataCite) allowed(doi string) bool {
	prefix, suffix, ok := strings.Cut(doi, "/")
	return ok && suffix != "" && slices.Contains(d.cfg.Prefixes, prefix)
}

// hasMetadata reports whether a PUT's attributes change metadata: any but
// doi and event.
func hasMetadata(attrs map[string]any) bool {
	for name := range attrs {
		if name != "doi" && name != "event" {
			return true
		}
	}
	return false
}

// missingFor lists the attributes event needs that attrs lacks.
func missingFor(event string, attrs map[string]any, doi string) []dcErr {
	if event != "register" && event != "publish" {
		return nil
	}
	var errs []dcErr
	for _, name := range []string{"url", "creators", "titles", "publisher", "publicationYear", "types"} {
		if v, ok := attrs[name]; !ok || v == nil || v == "" {
			errs = append(errs, dcErr{Source: name, Title: "Can't be blank", UID: doi})
		}
	}
	return errs
}

// attributes are the attributes of rec as answered. d.mu is held.
func (rec *dcRecord) attributes() json.RawMessage {
	attrs := maps.Clone(rec.attrs)
	prefix, suffix, _ := strings.Cut(rec.doi, "/")
	attrs["doi"], attrs["prefix"], attrs["suffix"], attrs["state"] = rec.doi, prefix, suffix, rec.state
	attrs["created"], attrs["updated"] = rec.created.Format(time.RFC3339), rec.updated.Format(time.RFC3339)
	raw, _ := json.Marshal(attrs)
	return raw
}

// encode is the JSON:API document of rec. d.mu is held.
func (rec *dcRecord) encode() []byte {
	b, _ := json.Marshal(map[string]any{"data": map[string]any{"id": rec.doi, "type": "dois", "attributes": rec.attributes()}})
	return b
}

// readDOIBody reads a JSON:API DOI document and returns its attributes.
func readDOIBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != dcMediaTypeBare && mt != "application/json") {
			dcError(w, http.StatusUnsupportedMediaType, "", "The content type is not recognized.")
			return nil, false
		}
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil || len(raw) > DefaultMaxBodyBytes {
		dcError(w, http.StatusRequestEntityTooLarge, "", "The payload is too large or could not be read.")
		return nil, false
	}
	var doc struct {
		Data *struct {
			Type       string         `json:"type"`
			Attributes map[string]any `json:"attributes"`
		} `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil || doc.Data == nil || doc.Data.Attributes == nil ||
		(doc.Data.Type != "" && doc.Data.Type != "dois") {
		dcError(w, http.StatusBadRequest, "400", "You need to provide a payload following the JSONAPI spec")
		return nil, false
	}
	return doc.Data.Attributes, true
}

// The media type of DataCite's answers.
const (
	dcMediaTypeBare = "application/vnd.api+json"
	dcMediaType     = dcMediaTypeBare + "; charset=utf-8"
)

// dcErr is one entry of a JSON:API errors array, shaped as DataCite's.
type dcErr struct {
	Status string `json:"status,omitempty"`
	Source string `json:"source,omitempty"`
	Title  string `json:"title"`
	UID    string `json:"uid,omitempty"`
}

func dcErrors(w http.ResponseWriter, status int, errs []dcErr) {
	body, _ := json.Marshal(map[string]any{"errors": errs})
	w.Header().Set("Content-Type", dcMediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// finish writes a JSON:API answer, unless ft drops it or trickles it.
func (d *DataCite) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, hdr http.Header, body []byte) {
	w.Header().Set("Content-Type", dcMediaType)
	d.inj.finish(w, r, ft, status, hdr, body)
}

// injectedDCError answers an injected status fault.
func injectedDCError(w http.ResponseWriter, status int) {
	dcError(w, status, strconv.Itoa(status), http.StatusText(status))
}

func dcError(w http.ResponseWriter, status int, code, title string) {
	if code == "" {
		code = strconv.Itoa(status)
	}
	dcErrors(w, status, []dcErr{{Status: code, Title: title}})
}

// doiURL is the absolute URL of a DOI.
func doiURL(r *http.Request, doi string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/dois/" + doi
}

// DataCiteServer is a DataCite stub listening on 127.0.0.1 with a random
// port, for tests: point a client's endpoint at URL and Close it. It is safe
// for concurrent use by multiple goroutines.
type DataCiteServer struct {
	// URL is the API root, "http://127.0.0.1:PORT" with no trailing slash:
	// DOIs are created at URL/dois.
	URL string

	d  *DataCite
	lo *loopback
}

// NewDataCiteServer starts a DataCite stub for cfg on 127.0.0.1.
func NewDataCiteServer(cfg DataCiteConfig) (*DataCiteServer, error) {
	d, err := NewDataCite(cfg)
	if err != nil {
		return nil, err
	}
	lo, err := startLoopback(d, func(w http.ResponseWriter, _ *http.Request) {
		dcError(w, http.StatusServiceUnavailable, "", "The server is closed.")
	})
	if err != nil {
		return nil, err
	}
	return &DataCiteServer{URL: lo.url, d: d, lo: lo}, nil
}

// Client returns an HTTP client for the server. Its idle connections are
// closed by Close.
func (s *DataCiteServer) Client() *http.Client { return s.lo.client }

// Stats returns a snapshot of the stub's counters.
func (s *DataCiteServer) Stats() DataCiteStats { return s.d.Stats() }

// DOIs returns every DOI the stub holds, in creation order.
func (s *DataCiteServer) DOIs() []DataCiteDOI { return s.d.DOIs() }

// Close ends every wait, closes the listener and every connection, and
// waits for the handlers to return. Close is idempotent.
func (s *DataCiteServer) Close() { s.lo.close(s.d.Close, nil) }
