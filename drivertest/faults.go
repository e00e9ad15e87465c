package drivertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/depositkit/deposit/internal/faultspec"
)

// Faults is the faults a [Middleware] injects into the requests of any
// handler. The zero value injects none and lags nothing.
type Faults struct {
	// Spec is a fault spec in the grammar of repotest.FaultsHelp (that of
	// `deposit serve --faults`), applied to writes, and to reads with its
	// "reads" rule: drop (the handler runs, then the connection is closed
	// unanswered), reset (closed before the handler runs), 500, 502, 503,
	// 504, 409 and 429 (answered before the handler runs; 429 and 503 with
	// :retry-after=SECONDS), slow (the answer trickles), latency (a delay
	// before the handler runs), nth=N:KIND (the Nth attempt of a request).
	// "" injects none.
	Spec string
	// Seed picks the faults: each request draws one number from (Seed, its
	// class, its Key, its attempt), so concurrency and arrival order do
	// not change which request meets which fault.
	Seed int64
	// Key names what a request asks for, so that its retries are attempts
	// of one request; nil means [RequestKey]. A key must not depend on
	// anything a retry changes (a date header, a nonce).
	Key func(*http.Request) string
	// Read reports whether a request only reads (a read-back, a listing,
	// a search); nil means GET and HEAD. Every other request is a write.
	Read func(*http.Request) bool
	// Lag is how far behind the writes a read's view is: [AsOf] tells the
	// handler, for each read, the time as of which to answer it.
	Lag time.Duration
}

// Middleware injects Faults into the requests of a handler, and counts
// them. It is safe for concurrent use by multiple goroutines.
type Middleware struct {
	next   http.Handler
	faults Faults
	spec   faultspec.Spec

	mu       sync.Mutex
	attempts map[string]int // class + "\x00" + key -> requests seen
	stats    Stats
	// committed, when set, is called after a write's handler returned and
	// before its answer is sent, with the write's number (from 1); true
	// withholds the answer (the harness killed the process that asked).
	committed func(r *http.Request, write int64) bool
}

// Stats counts what a Middleware saw.
type Stats struct {
	Requests int64 // every request
	Writes   int64 // writes the handler ran (committed), faults after commit included
	Reads    int64 // reads the handler ran
	Faults   int64 // faults injected, all kinds
	// FaultsByKind counts faults by kind, as the spec names them ("drop",
	// "503").
	FaultsByKind map[string]int64
}

// Wrap returns h behind the faults. An error names the spec's bad rule
// and wraps repotest.ErrFaultSpec.
func (f Faults) Wrap(h http.Handler) (*Middleware, error) {
	spec, err := faultspec.Parse(f.Spec)
	if err != nil {
		return nil, err
	}
	if f.Key == nil {
		f.Key = RequestKey
	}
	if f.Read == nil {
		f.Read = func(r *http.Request) bool { return r.Method == http.MethodGet || r.Method == http.MethodHead }
	}
	return &Middleware{next: h, faults: f, spec: spec, attempts: map[string]int{}, stats: Stats{FaultsByKind: map[string]int64{}}}, nil
}

// RequestKey is the default [Faults.Key]: the method, the path and query,
// and a digest of the body, which a retry sends again unchanged.
func RequestKey(r *http.Request) string {
	h := sha256.New()
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			// The request is broken anyway: the handler reads what came.
			body = append(body, "\x00unread"...)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.Write(body)
	}
	return r.Method + " " + r.URL.RequestURI() + " " + hex.EncodeToString(h.Sum(nil)[:8])
}

// Stats returns a snapshot of the counters.
func (m *Middleware) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.FaultsByKind = maps.Clone(m.stats.FaultsByKind)
	return s
}

type asOfKey struct{}

// AsOf is the time as of which the handler should answer read r: now less
// the [Faults.Lag] of the Middleware in front of it (now when there is
// none, or for a write). A handler that notes when each write committed
// answers a read from the writes committed by then, as a lagging search
// index or listing would.
//
// The lag needs this hook because only the handler holds its state: the
// middleware cannot show a read what the handler held some time ago
// without a copy of every earlier state.
func AsOf(r *http.Request) time.Time {
	if t, ok := r.Context().Value(asOfKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}

// ServeHTTP numbers the request's attempt, draws its fault, and runs the
// handler unless the fault answers first.
func (m *Middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	read := m.faults.Read(r)
	class := "write"
	if read {
		class = "read"
	}
	m.mu.Lock()
	m.stats.Requests++
	m.mu.Unlock()
	var ft faultspec.Fault
	if !read || m.spec.Reads() {
		key := m.faults.Key(r)
		m.mu.Lock()
		m.attempts[class+"\x00"+key]++
		attempt := m.attempts[class+"\x00"+key]
		m.mu.Unlock()
		ft, _ = m.spec.Draw(m.faults.Seed, class, key, attempt)
	}
	switch {
	case ft.Kind == faultspec.KindReset:
		m.counted(ft)
		faultspec.HangUp(w)
		return
	case ft.Status != 0:
		m.counted(ft)
		ft.SetRetryAfter(w.Header(), time.Now())
		refuse(w, ft.Status)
		return
	}
	if read {
		m.serveRead(w, r, ft)
		return
	}
	m.serveWrite(w, r, ft)
}

// serveRead runs the handler with the read's view: as of Lag ago.
func (m *Middleware) serveRead(w http.ResponseWriter, r *http.Request, ft faultspec.Fault) {
	r = r.WithContext(context.WithValue(r.Context(), asOfKey{}, time.Now().Add(-m.faults.Lag)))
	m.mu.Lock()
	m.stats.Reads++
	m.mu.Unlock()
	if ft.Kind != faultspec.KindDrop && ft.Kind != faultspec.KindSlow {
		m.next.ServeHTTP(w, r)
		return
	}
	rec := httptest.NewRecorder()
	m.next.ServeHTTP(rec, r)
	m.finish(w, r, ft, rec)
}

// serveWrite waits the latency, runs the handler into a buffer (the write
// commits), then answers as the fault says.
func (m *Middleware) serveWrite(w http.ResponseWriter, r *http.Request, ft faultspec.Fault) {
	if !faultspec.Sleep(m.spec.Latency(), r.Context().Done(), nil) {
		return // the client gave up before the write began
	}
	rec := httptest.NewRecorder()
	m.next.ServeHTTP(rec, r)
	m.mu.Lock()
	m.stats.Writes++
	n, committed := m.stats.Writes, m.committed
	m.mu.Unlock()
	if committed != nil && committed(r, n) {
		<-r.Context().Done() // the asker is gone: its connection ends with it
		return
	}
	m.finish(w, r, ft, rec)
}

// finish sends a recorded answer, unless ft drops it or trickles it.
func (m *Middleware) finish(w http.ResponseWriter, r *http.Request, ft faultspec.Fault, rec *httptest.ResponseRecorder) {
	if ft.Kind == faultspec.KindDrop {
		m.counted(ft)
		faultspec.HangUp(w)
		return
	}
	maps.Copy(w.Header(), rec.Header())
	body := rec.Body.Bytes()
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	if ft.Kind != faultspec.KindSlow || len(body) == 0 {
		_, _ = w.Write(body)
		return
	}
	m.counted(ft)
	faultspec.Trickle(w, body, ft.Every, r.Context().Done(), nil)
}

func (m *Middleware) counted(ft faultspec.Fault) {
	m.mu.Lock()
	m.stats.Faults++
	m.stats.FaultsByKind[ft.Kind]++
	m.mu.Unlock()
}

// refuse answers an injected status as an RFC 9457 problem.
func refuse(w http.ResponseWriter, status int) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"title": http.StatusText(status), "status": status, "detail": fmt.Sprintf("injected fault: %d", status),
	})
}
