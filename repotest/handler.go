package repotest

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/depositkit/deposit/internal/protocol"
	"io"
	"maps"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Protocol names the write protocol a server speaks.
type Protocol string

// The protocols of the deposit design.
const (
	// ProtocolPut is the conditional PUT: PUT /{key} with If-None-Match: *.
	ProtocolPut Protocol = protocol.Put
	// ProtocolIdempotencyKey is POST with an Idempotency-Key header (IETF draft, IRI API).
	ProtocolIdempotencyKey Protocol = protocol.IdempotencyKey
)

// ErrConfig is wrapped by the errors NewHandler and NewServer return for a Config
// they cannot use (unknown protocol, bad fault spec, negative duration).
var ErrConfig = errors.New("repotest: bad config")

// Defaults for the zero values of Config.
const (
	DefaultLockTTL      = 60 * time.Second
	DefaultResultTTL    = 24 * time.Hour
	DefaultMaxBodyBytes = 16 << 20
)

// Config configures a Handler or Server. The zero value is a put server with no
// faults and records in memory. NewHandler copies it; later changes have no effect.
// `deposit serve` fills Protocol, Faults, Seed and DBPath from its flags and
// listens on --addr itself.
type Config struct {
	// Protocol is the write protocol; "" means ProtocolPut.
	Protocol Protocol
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects none.
	Faults string
	// Seed selects the fault sequence and the minted identifiers. The same seed
	// gives the same faults for the same (key, attempt) pairs.
	Seed int64
	// VerifyKey (put) refuses with 422 a PUT whose key is not the lowercase hex
	// SHA-256 of its body.
	VerifyKey bool
	// DBPath keeps the records in this SQLite file, so they survive a restart.
	// "" keeps them in memory only. Locks and fault counters are never persisted.
	DBPath string
	// LockTTL (idempotency-key) is how long a key stays locked while its request
	// is in flight; the lock is not renewed. 0 means DefaultLockTTL (60s, as IRI).
	LockTTL time.Duration
	// LockHold (idempotency-key) is how long a create holds its key's lock
	// before it commits, as the IRI reference holds it for the length of its
	// scheduler call: a second request with the key meanwhile is answered 409,
	// without Retry-After, as IRI answers. 0 commits at once.
	LockHold time.Duration
	// ResultTTL (idempotency-key) is how long a completed key is replayed, counted
	// from its creation; hits do not renew it. 0 means DefaultResultTTL (24h, as IRI).
	ResultTTL time.Duration
	// IdempotencyDisabled (idempotency-key) answers 501 to any request that carries
	// an Idempotency-Key, as a server with no idempotency store does; requests
	// without one create a record every time.
	IdempotencyDisabled bool
	// IdempotencyKeyOptional (idempotency-key) executes a POST without an
	// Idempotency-Key unprotected (a new record every time), as the IRI reference
	// does. By default the key is required and its absence is a 400.
	IdempotencyKeyOptional bool
	// Latency delays every create before it commits, in addition to any latency rule
	// of Faults. Under idempotency-key the key is locked meanwhile. A client that
	// gives up during the delay does not stop the commit, as on a real server: that
	// is the ambiguous timeout.
	Latency time.Duration
	// IgnoreIfNoneMatch (put) behaves like a server that ignores If-None-Match: a PUT
	// without it is accepted, and a PUT to an existing key creates a new version
	// with a new identifier (200), which counts as a duplicate.
	IgnoreIfNoneMatch bool
	// DuplicateIgnore lists top-level JSON member names left out when bodies are
	// compared for Stats.Duplicates (a volatile timestamp, a request ID). It does not
	// affect the 422 body check of idempotency-key, which compares whole bodies.
	DuplicateIgnore []string
	// Authorization, when set, is the exact Authorization header every request must
	// carry: none is a 401, another value a 403.
	Authorization string
	// MaxBodyBytes refuses larger request bodies with 413. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// RateLimit, when positive, is how many writes (PUT and POST) a second
	// the server accepts, as a server under load does: a token bucket
	// holding a tenth of a second's worth (at least one write) refills at
	// that rate, and a write that finds it empty is answered 429 with
	// Retry-After: 1 before anything else is looked at (Stats.Throttled).
	// 0 accepts every write.
	RateLimit float64

	now          func() time.Time // clock; nil means time.Now
	beforeCommit func(key string) // test seam: runs after a create's checks, before its latency and commit
}

// Record is one record the server created.
type Record struct {
	// Key is the URL key (put), the Idempotency-Key string value without quotes
	// (idempotency-key), or "" for a POST that carried none.
	Key string
	// Path is the request path the record was created at; under idempotency-key it
	// names the resource and is part of the cache key.
	Path string
	// Identifier is the identifier the server minted, such as "10.5072/dk.1x2y3z".
	Identifier string
	// Body is the request body as received.
	Body []byte
	// Created is when the record was committed.
	Created time.Time
}

// Stats counts what a server did. All counts start at zero when the Handler is
// created; Records includes records loaded from Config.DBPath. Its JSON form
// (`deposit serve`'s live counters) names each field in snake_case.
type Stats struct {
	Requests   int64 `json:"requests"`   // requests received, faulted ones included
	Creates    int64 `json:"creates"`    // records created, duplicates included
	Replays    int64 `json:"replays"`    // answers from an existing record: put 412, idempotency-key hit
	Conflicts  int64 `json:"conflicts"`  // genuine 409 answers: a key whose request was in flight
	Faults     int64 `json:"faults"`     // faults injected, all kinds
	Duplicates int64 `json:"duplicates"` // created records whose key, Idempotency-Key or body matched an earlier record
	Records    int64 `json:"records"`    // records held now
	Deletes    int64 `json:"deletes"`    // records removed by a DELETE (put)
	// Updates counts records replaced by a PUT with If-Match (put);
	// Mismatches the PUTs with If-Match refused 412.
	Updates    int64 `json:"updates"`
	Mismatches int64 `json:"mismatches"`
	// Throttled counts writes answered 429 for exceeding Config.RateLimit.
	Throttled int64 `json:"throttled"`
	// Overlaps counts writes that arrived for a key while another write for
	// the same key (PUT path, or Idempotency-Key) was still being handled:
	// what a fleet of clients must never send.
	Overlaps int64 `json:"overlaps"`
	// FaultsByKind counts injected faults by kind as written in the spec
	// ("drop", "reset", "slow", "503", ...). It is a copy.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// Handler is the reference repository as an http.Handler, for `deposit serve` and
// for tests that bring their own listener. It is safe for concurrent use.
type Handler struct {
	cfg      Config
	inj      *injector
	throttle *rate.Limiter // nil: no Config.RateLimit
	disk     *diskStore
	now      func() time.Time

	done chan struct{} // closed by Close: ends every wait

	mu      sync.Mutex
	closed  bool
	records []Record
	meta    []recordMeta
	seq     int64            // the last record's sequence number: identifiers are minted from it
	byKey   map[string][]int // put: key; idempotency-key: path + "\x00" + key -> record indexes
	byBody  map[string]int   // duplicate fingerprint -> records with it
	locks   map[string]lock
	lockSeq uint64
	stats   Stats
	writing map[string]int // writes being handled, by key
}

type recordMeta struct {
	full string // fingerprint of the whole body (idempotency-key 422 check)
	dup  string // fingerprint with Config.DuplicateIgnore left out
}

type lock struct {
	expires time.Time
	token   uint64
}

// NewHandler returns a Handler for cfg, with the records of cfg.DBPath loaded.
// Call Close when done to release the store.
func NewHandler(cfg Config) (*Handler, error) {
	switch cfg.Protocol {
	case "":
		cfg.Protocol = ProtocolPut
	case ProtocolPut, ProtocolIdempotencyKey:
	default:
		return nil, fmt.Errorf("%w: unknown protocol %q (want put or idempotency-key)", ErrConfig, cfg.Protocol)
	}
	if cfg.LockTTL < 0 || cfg.LockHold < 0 || cfg.ResultTTL < 0 || cfg.Latency < 0 || cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("%w: durations and sizes must not be negative", ErrConfig)
	}
	if !(cfg.RateLimit >= 0) || math.IsInf(cfg.RateLimit, 1) {
		return nil, fmt.Errorf("%w: RateLimit %v: want a finite number of writes a second, or 0 for none", ErrConfig, cfg.RateLimit)
	}
	cfg.LockTTL = cmp.Or(cfg.LockTTL, DefaultLockTTL)
	cfg.ResultTTL = cmp.Or(cfg.ResultTTL, DefaultResultTTL)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, DefaultMaxBodyBytes)
	cfg.DuplicateIgnore = append([]string(nil), cfg.DuplicateIgnore...)
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	h := &Handler{
		cfg: cfg, now: cfg.now, done: make(chan struct{}),
		byKey: map[string][]int{}, byBody: map[string]int{}, locks: map[string]lock{},
	}
	if h.now == nil {
		h.now = time.Now
	}
	if cfg.RateLimit > 0 {
		h.throttle = rate.NewLimiter(rate.Limit(cfg.RateLimit), max(1, int(cfg.RateLimit/10)))
	}
	h.inj = newInjector(faults, cfg.Seed, cfg.Latency, h.now, h.done, injectedProblem, &h.mu)
	if cfg.DBPath != "" {
		if h.disk, err = openDisk(cfg.DBPath); err != nil {
			return nil, err
		}
		recs, seq, err := h.disk.load()
		if err != nil {
			_ = h.disk.close()
			return nil, err
		}
		h.seq = seq
		for _, r := range recs {
			full, dup, _ := fingerprints(r.Body, cfg.DuplicateIgnore)
			h.add(r, recordMeta{full: full, dup: dup})
		}
	}
	return h, nil
}

// Close releases the store. Requests that arrive later get 503. Close is idempotent.
func (h *Handler) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	close(h.done)
	if h.disk != nil {
		return h.disk.close()
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (h *Handler) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.stats
	s.Faults, s.FaultsByKind = h.inj.count, maps.Clone(h.inj.byKind)
	s.Records = int64(len(h.records))
	return s
}

// Records returns a copy of every record, in creation order.
func (h *Handler) Records() []Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Record, len(h.records))
	for i, r := range h.records {
		r.Body = bytes.Clone(r.Body)
		out[i] = r
	}
	return out
}

// ServeHTTP answers one request of the configured protocol.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.stats.Requests++
	closed := h.closed
	h.mu.Unlock()
	if closed {
		problem(w, http.StatusServiceUnavailable, "the server is closed", nil)
		return
	}
	if want := h.cfg.Authorization; want != "" {
		got := r.Header.Get("Authorization")
		if got == "" {
			problem(w, http.StatusUnauthorized, "an Authorization header is required", http.Header{"Www-Authenticate": {"Bearer"}})
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			problem(w, http.StatusForbidden, "the credentials are not accepted", nil)
			return
		}
	}
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		if h.throttle != nil && !h.throttle.AllowN(h.now(), 1) {
			h.mu.Lock()
			h.stats.Throttled++
			h.mu.Unlock()
			problem(w, http.StatusTooManyRequests, "too many writes: slow down", http.Header{"Retry-After": {"1"}})
			return
		}
		done := h.writeStarts(r)
		defer done()
		w = &answerWatch{ResponseWriter: w, answered: done}
	}
	if h.cfg.Protocol == ProtocolPut {
		h.servePut(w, r)
		return
	}
	h.servePost(w, r)
}

// writeStarts counts a write of r's key as being handled, and an overlap if
// another was already; the function it returns counts it done (once, however
// often it is called).
func (h *Handler) writeStarts(r *http.Request) func() {
	key := r.URL.Path
	if h.cfg.Protocol != ProtocolPut {
		key += "\x00" + r.Header.Get("Idempotency-Key")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writing == nil {
		h.writing = make(map[string]int)
	}
	if h.writing[key] > 0 {
		h.stats.Overlaps++
	}
	h.writing[key]++
	return sync.OnceFunc(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.writing[key]--; h.writing[key] == 0 {
			delete(h.writing, key)
		}
	})
}

// answerWatch ends a write's handling as its answer starts (or its
// connection is hung up), before the client can read it and send again.
type answerWatch struct {
	http.ResponseWriter
	answered func()
}

func (a *answerWatch) WriteHeader(status int) {
	a.answered()
	a.ResponseWriter.WriteHeader(status)
}

func (a *answerWatch) Write(b []byte) (int, error) {
	a.answered()
	return a.ResponseWriter.Write(b)
}

func (a *answerWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	a.answered()
	return http.NewResponseController(a.ResponseWriter).Hijack()
}

func (a *answerWatch) Flush() { _ = http.NewResponseController(a.ResponseWriter).Flush() }

func (a *answerWatch) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// servePut serves PUT, GET and DELETE /{key}.
func (h *Handler) servePut(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.URL.Path, "/")
	if key == "" || strings.Contains(key, "/") {
		problem(w, http.StatusNotFound, "records live at /{key}", nil)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.serveGet(w, r, key)
		return
	case http.MethodDelete:
		h.serveDelete(w, r, key)
		return
	case http.MethodPut:
	default:
		problem(w, http.StatusMethodNotAllowed, "use PUT to create, GET to read and DELETE to remove", http.Header{"Allow": {"DELETE, GET, HEAD, PUT"}})
		return
	}
	body, ok := readBody(w, r, h.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	ft, answered := h.inj.early(w, "create", key)
	if answered {
		return
	}
	full, dup, ok := validate(w, r, body, h.cfg.DuplicateIgnore)
	if !ok {
		return
	}
	if im := r.Header.Get("If-Match"); im != "" && r.Header.Get("If-None-Match") == "" {
		h.serveUpdate(w, r, key, im, body, ft)
		return
	}
	if inm := r.Header.Get("If-None-Match"); inm != "*" && !h.cfg.IgnoreIfNoneMatch {
		problem(w, http.StatusPreconditionRequired, "a create needs If-None-Match: *, an update If-Match: ETAG", nil)
		return
	}
	if h.cfg.VerifyKey {
		sum := sha256.Sum256(body)
		if hex.EncodeToString(sum[:]) != key {
			problem(w, http.StatusUnprocessableEntity, "the key is not the SHA-256 of the body", nil)
			return
		}
	}
	if h.cfg.beforeCommit != nil {
		h.cfg.beforeCommit(key)
	}
	if !h.inj.delay() || !sleep(h.cfg.LockHold, h.inj.done, r.Context().Done()) {
		problem(w, http.StatusServiceUnavailable, "the server is closing", nil)
		return
	}
	h.mu.Lock()
	existing := h.byKey[key]
	if len(existing) > 0 && !h.cfg.IgnoreIfNoneMatch {
		h.stats.Replays++
		h.mu.Unlock()
		h.inj.finish(w, r, ft, http.StatusPreconditionFailed, nil, nil)
		return
	}
	rec, err := h.create(Record{Key: key, Path: r.URL.Path, Body: body}, recordMeta{full: full, dup: dup}, key)
	h.mu.Unlock()
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	status := http.StatusCreated
	if len(existing) > 0 {
		status = http.StatusOK
	}
	out, _ := json.Marshal(map[string]string{"identifier": rec.Identifier, "key": key})
	hdr := http.Header{"Content-Type": {"application/json"}, "Location": {recordURL(r, key)}, "Etag": {etag(body)}}
	h.inj.finish(w, r, ft, status, hdr, out)
}

// etag is a record's strong ETag: its body's SHA-256, quoted (RFC 9110
// section 8.8.3), so that every version has its own.
func etag(body []byte) string {
	sum := sha256.Sum256(body)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// serveUpdate replaces the record of key with body when its ETag is the
// one If-Match names (im): 200 with the new ETag; 412 when it is not, or
// when there is no record (RFC 9110 section 13.1.1). A drop after the
// commit replaces the record, then hangs up.
func (h *Handler) serveUpdate(w http.ResponseWriter, r *http.Request, key, im string, body []byte, ft fault) {
	h.mu.Lock()
	idx := h.byKey[key]
	if len(idx) == 0 {
		h.stats.Mismatches++
		h.mu.Unlock()
		problem(w, http.StatusPreconditionFailed, "no record has this key: If-Match names no version", nil)
		return
	}
	i := idx[len(idx)-1]
	if cur := etag(h.records[i].Body); im != cur && im != "*" {
		h.stats.Mismatches++
		h.mu.Unlock()
		problem(w, http.StatusPreconditionFailed, "the record's ETag is "+cur+", not "+im, http.Header{"Etag": {cur}})
		return
	}
	if h.disk != nil {
		if err := h.disk.replace(key, body); err != nil {
			h.mu.Unlock()
			problem(w, http.StatusInternalServerError, err.Error(), nil)
			return
		}
	}
	h.records[i].Body = body
	h.stats.Updates++
	rec := h.records[i]
	h.mu.Unlock()
	out, _ := json.Marshal(map[string]string{"identifier": rec.Identifier, "key": key})
	h.inj.finish(w, r, ft, http.StatusOK, http.Header{"Content-Type": {"application/json"}, "Etag": {etag(body)}}, out)
}

// serveGet answers a read-back under put.
func (h *Handler) serveGet(w http.ResponseWriter, r *http.Request, key string) {
	ft, answered := h.inj.early(w, "read", key)
	if answered {
		return
	}
	h.mu.Lock()
	idx := h.byKey[key]
	var rec Record
	if len(idx) > 0 {
		rec = h.records[idx[len(idx)-1]]
	}
	h.mu.Unlock()
	if len(idx) == 0 {
		if ft.Kind == kindDrop {
			h.inj.finish(w, r, ft, 0, nil, nil)
			return
		}
		problem(w, http.StatusNotFound, "no record has this key", nil)
		return
	}
	out, _ := json.Marshal(struct {
		Identifier string          `json:"identifier"`
		Key        string          `json:"key"`
		Created    time.Time       `json:"created"`
		Metadata   json.RawMessage `json:"metadata"`
	}{rec.Identifier, rec.Key, rec.Created, rec.Body})
	h.inj.finish(w, r, ft, http.StatusOK, http.Header{"Content-Type": {"application/json"}, "Etag": {etag(rec.Body)}}, out)
}

// serveDelete removes the record of key under put, every version of it
// (IgnoreIfNoneMatch): 204, or 404 when there is none. Its faults are drawn
// apart from the creates' ("delete"), so that removing a record does not
// shift the faults its creates meet; a drop removes the record, then hangs
// up.
func (h *Handler) serveDelete(w http.ResponseWriter, r *http.Request, key string) {
	ft, answered := h.inj.early(w, "delete", key)
	if answered {
		return
	}
	h.mu.Lock()
	found, err := h.remove(key)
	h.mu.Unlock()
	switch {
	case err != nil:
		problem(w, http.StatusInternalServerError, err.Error(), nil)
	case found || ft.Kind == kindDrop:
		h.inj.finish(w, r, ft, http.StatusNoContent, nil, nil)
	default:
		problem(w, http.StatusNotFound, "no record has this key", nil)
	}
}

// remove deletes every record of key (put) and reports whether there was
// one. The indexes are rebuilt from the records kept. h.mu is held.
func (h *Handler) remove(key string) (bool, error) {
	if h.closed {
		return false, errors.New("the server is closed")
	}
	if len(h.byKey[key]) == 0 {
		return false, nil
	}
	if h.disk != nil {
		if err := h.disk.remove(key); err != nil {
			return false, err
		}
	}
	recs, meta := h.records, h.meta
	h.records, h.meta, h.byKey, h.byBody = nil, nil, map[string][]int{}, map[string]int{}
	for i, r := range recs {
		if r.Key == key {
			h.stats.Deletes++
			continue
		}
		h.add(r, meta[i])
	}
	return true, nil
}

// servePost serves POST {path} with an Idempotency-Key.
func (h *Handler) servePost(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		problem(w, http.StatusMethodNotAllowed, "use POST to create", http.Header{"Allow": {"POST"}})
		return
	}
	body, ok := readBody(w, r, h.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	values := r.Header.Values("Idempotency-Key")
	var key string
	switch {
	case len(values) > 0 && h.cfg.IdempotencyDisabled:
		problem(w, http.StatusNotImplemented, "this server has no idempotency store", nil)
		return
	case len(values) == 0 && !h.cfg.IdempotencyDisabled && !h.cfg.IdempotencyKeyOptional:
		problem(w, http.StatusBadRequest, "an Idempotency-Key header is required", nil)
		return
	case len(values) > 1:
		problem(w, http.StatusBadRequest, "more than one Idempotency-Key header", nil)
		return
	case len(values) == 1:
		var err error
		if key, err = parseSFString(values[0]); err != nil {
			problem(w, http.StatusBadRequest, "Idempotency-Key: "+err.Error(), nil)
			return
		}
	}
	faultKey := r.URL.Path + "\x00" + key
	if key == "" {
		sum := sha256.Sum256(body)
		faultKey = "body\x00" + hex.EncodeToString(sum[:])
	}
	ft, answered := h.inj.early(w, "create", faultKey)
	if answered {
		return
	}
	full, dup, ok := validate(w, r, body, h.cfg.DuplicateIgnore)
	if !ok {
		return
	}
	rec := Record{Key: key, Path: r.URL.Path, Body: body}
	meta := recordMeta{full: full, dup: dup}
	if key == "" {
		if !h.inj.delay() {
			problem(w, http.StatusServiceUnavailable, "the server is closing", nil)
			return
		}
		h.mu.Lock()
		rec, err := h.create(rec, meta, "")
		h.mu.Unlock()
		if err != nil {
			problem(w, http.StatusInternalServerError, err.Error(), nil)
			return
		}
		h.inj.finish(w, r, ft, http.StatusCreated, http.Header{"Content-Type": {"application/json"}}, idBody(rec.Identifier))
		return
	}
	cacheKey := r.URL.Path + "\x00" + key
	h.mu.Lock()
	now := h.now()
	if i, ok := h.result(cacheKey, now); ok {
		if h.meta[i].full != full {
			h.mu.Unlock()
			problem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was used for a different request body", nil)
			return
		}
		h.stats.Replays++
		id := h.records[i].Identifier
		h.mu.Unlock()
		h.inj.finish(w, r, ft, http.StatusCreated, replyHeader("hit"), idBody(id))
		return
	}
	if l, ok := h.locks[cacheKey]; ok && now.Before(l.expires) {
		h.stats.Conflicts++
		h.mu.Unlock()
		problem(w, http.StatusConflict, "a request with this Idempotency-Key is in flight", nil)
		return
	}
	h.lockSeq++
	token := h.lockSeq
	h.locks[cacheKey] = lock{expires: now.Add(h.cfg.LockTTL), token: token}
	h.mu.Unlock()
	release := func() {
		if h.locks[cacheKey].token == token {
			delete(h.locks, cacheKey)
		}
	}
	if h.cfg.beforeCommit != nil {
		h.cfg.beforeCommit(key)
	}
	if !h.inj.delay() || !sleep(h.cfg.LockHold, h.inj.done, r.Context().Done()) {
		h.mu.Lock()
		release()
		h.mu.Unlock()
		problem(w, http.StatusServiceUnavailable, "the server is closing", nil)
		return
	}
	h.mu.Lock()
	rec, err := h.create(rec, meta, cacheKey)
	release()
	h.mu.Unlock()
	if err != nil {
		problem(w, http.StatusInternalServerError, err.Error(), nil)
		return
	}
	h.inj.finish(w, r, ft, http.StatusCreated, replyHeader("miss"), idBody(rec.Identifier))
}

// result returns the newest record for cacheKey still within ResultTTL. h.mu is held.
func (h *Handler) result(cacheKey string, now time.Time) (int, bool) {
	idx := h.byKey[cacheKey]
	if len(idx) == 0 {
		return 0, false
	}
	i := idx[len(idx)-1]
	if !now.Before(h.records[i].Created.Add(h.cfg.ResultTTL)) {
		return 0, false
	}
	return i, true
}

// create mints an identifier, persists and indexes a new record. h.mu is held.
func (h *Handler) create(r Record, m recordMeta, indexKey string) (Record, error) {
	if h.closed {
		return Record{}, errors.New("the server is closed")
	}
	seq := h.seq + 1
	r.Identifier = mint(h.cfg.Seed, uint64(seq))
	r.Created = h.now().UTC()
	if h.disk != nil {
		if err := h.disk.insert(seq, r); err != nil {
			return Record{}, err
		}
	}
	h.seq = seq
	h.stats.Creates++
	if (indexKey != "" && len(h.byKey[indexKey]) > 0) || h.byBody[m.dup] > 0 {
		h.stats.Duplicates++
	}
	h.add(r, m)
	return r, nil
}

// add indexes a record. h.mu is held (or the Handler is not yet shared).
func (h *Handler) add(r Record, m recordMeta) {
	i := len(h.records)
	h.records = append(h.records, r)
	h.meta = append(h.meta, m)
	if h.cfg.Protocol == ProtocolPut {
		h.byKey[r.Key] = append(h.byKey[r.Key], i)
	} else if r.Key != "" {
		ck := r.Path + "\x00" + r.Key
		h.byKey[ck] = append(h.byKey[ck], i)
	}
	h.byBody[m.dup]++
}

// readBody reads the request body, answering 413 when it is larger than limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		problem(w, http.StatusBadRequest, "reading the body: "+err.Error(), nil)
		return nil, false
	}
	if int64(len(body)) > limit {
		problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is larger than %d bytes", limit), nil)
		return nil, false
	}
	return body, true
}

// validate checks the media type and the JSON of a create and returns its fingerprints.
func validate(w http.ResponseWriter, r *http.Request, body []byte, ignore []string) (full, dup string, ok bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			problem(w, http.StatusUnsupportedMediaType, "the body must be application/json", nil)
			return "", "", false
		}
	}
	full, dup, err := fingerprints(body, ignore)
	if err != nil {
		problem(w, http.StatusBadRequest, "the body is not JSON: "+err.Error(), nil)
		return "", "", false
	}
	return full, dup, true
}

// fingerprints returns the SHA-256 of the parsed body re-encoded with sorted
// member names (so whitespace and member order do not count), and the same with
// the top-level members named in ignore left out.
func fingerprints(body []byte, ignore []string) (full, dup string, err error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", "", errors.New("data after the JSON value")
	}
	full = hashJSON(v)
	m, isObject := v.(map[string]any)
	if !isObject || len(ignore) == 0 {
		return full, full, nil
	}
	kept := maps.Clone(m)
	for _, name := range ignore {
		delete(kept, name)
	}
	return full, hashJSON(kept), nil
}

func hashJSON(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// parseSFString parses an RFC 8941 Structured Field String such as "abc".
// Parameters are not accepted: the draft's key is a bare string.
func parseSFString(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if len(v) < 2 || v[0] != '"' {
		return "", errors.New(`want a quoted Structured Field string, such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	}
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		switch c := v[i]; {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", errors.New(`only \" and \\ may be escaped`)
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", errors.New("unexpected data after the string")
			}
			if b.Len() == 0 {
				return "", errors.New("the key is empty")
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("byte %#x is not allowed in a string", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("the string is not terminated")
}

// mint returns the identifier of the seq-th record: a DOI-like name under the test
// prefix 10.5072 whose suffix is a bijective mix of (seed, seq), so it is unique,
// survives restarts, and says nothing about the key.
func mint(seed int64, seq uint64) string {
	z := uint64(seed)*0x9e3779b97f4a7c15 + seq
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return "10.5072/dk." + strconv.FormatUint(z, 36)
}

func idBody(id string) []byte {
	b, _ := json.Marshal(map[string]string{"id": id})
	return b
}

func replyHeader(reply string) http.Header {
	return http.Header{"Content-Type": {"application/json"}, "Idempotency-Key-Reply": {reply}}
}

// recordURL is the absolute URL of the record for key.
func recordURL(r *http.Request, key string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: r.Host, Path: "/" + key}).String()
}

// problem writes an RFC 9457 problem+json answer.
func problem(w http.ResponseWriter, status int, detail string, hdr http.Header) {
	maps.Copy(w.Header(), hdr)
	body, _ := json.Marshal(map[string]any{
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// injectedProblem answers an injected status fault.
func injectedProblem(w http.ResponseWriter, status int) {
	detail := "injected fault"
	if status == http.StatusConflict {
		detail = "injected fault: a request with this key is in flight"
	}
	problem(w, status, detail, nil)
}
