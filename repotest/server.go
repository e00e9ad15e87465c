package repotest

import (
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Server is a reference repository listening on 127.0.0.1 with a random port, for
// tests: create it with NewServer, point a client at URL, and Close it. Server is
// safe for concurrent use by multiple goroutines.
type Server struct {
	// URL is the base URL, "http://127.0.0.1:PORT" with no trailing slash. Under
	// put, records live at URL/{key}; under idempotency-key, POST to URL (or to
	// any path below it: the path names the resource).
	URL string

	h  *Handler
	lo *loopback
}

// NewServer starts a Server for cfg on 127.0.0.1 with a random port.
func NewServer(cfg Config) (*Server, error) {
	h, err := NewHandler(cfg)
	if err != nil {
		return nil, err
	}
	lo, err := startLoopback(h, func(w http.ResponseWriter, _ *http.Request) {
		problem(w, http.StatusServiceUnavailable, "the server is closed", nil)
	})
	if err != nil {
		_ = h.Close()
		return nil, err
	}
	return &Server{URL: lo.url, h: h, lo: lo}, nil
}

// Client returns an HTTP client for the server. Its transport is closed by Close.
func (s *Server) Client() *http.Client { return s.lo.client }

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats { return s.h.Stats() }

// Records returns a copy of every record, in creation order.
func (s *Server) Records() []Record { return s.h.Records() }

// Close closes the listener and every connection, blocks until all requests in
// progress have returned, and closes the store. Close is idempotent.
func (s *Server) Close() { s.lo.close(nil, s.h.Close) }

// loopback serves an http.Handler on 127.0.0.1 with a random port, for the
// servers of this package. It tracks the requests in flight so that closing can
// wait for them, and answers with refuse once shut.
type loopback struct {
	url    string // "http://127.0.0.1:PORT"
	h      http.Handler
	refuse http.HandlerFunc
	srv    *http.Server
	client *http.Client // for url, with no proxy

	mu     sync.Mutex
	closed bool
	active sync.WaitGroup
}

// startLoopback starts serving h; refuse answers the requests that arrive once
// the loopback is shut.
func startLoopback(h http.Handler, refuse http.HandlerFunc) (*loopback, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("repotest: listen: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 64
	lo := &loopback{url: "http://" + ln.Addr().String(), h: h, refuse: refuse, client: &http.Client{Transport: transport}}
	lo.srv = &http.Server{Handler: http.HandlerFunc(lo.serve)}
	go func() { _ = lo.srv.Serve(ln) }()
	return lo, nil
}

// serve tracks the request so drain can wait for it.
func (lo *loopback) serve(w http.ResponseWriter, r *http.Request) {
	lo.mu.Lock()
	if lo.closed {
		lo.mu.Unlock()
		lo.refuse(w, r)
		return
	}
	lo.active.Add(1)
	lo.mu.Unlock()
	defer lo.active.Done()
	lo.h.ServeHTTP(w, r)
}

// shut refuses every later request and reports whether this call shut it.
func (lo *loopback) shut() bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if lo.closed {
		return false
	}
	lo.closed = true
	return true
}

// close shuts lo once: first ends what the requests in flight may wait for
// (an API stub's Close), then the listener and every connection are closed
// and those requests waited for, then last runs (closing a store they
// use). Either may be nil; a later call does nothing.
func (lo *loopback) close(first, last func() error) {
	if !lo.shut() {
		return
	}
	if first != nil {
		_ = first()
	}
	lo.drain()
	if last != nil {
		_ = last()
	}
}

// drain closes the listener and every connection, waits for the requests in
// flight, and closes the client's idle connections.
func (lo *loopback) drain() {
	_ = lo.srv.Close()
	lo.active.Wait()
	lo.client.CloseIdleConnections()
}
