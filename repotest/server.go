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

	h      *Handler
	srv    *http.Server
	client *http.Client

	mu     sync.Mutex
	closed bool
	active sync.WaitGroup
}

// NewServer starts a Server for cfg on 127.0.0.1 with a random port.
func NewServer(cfg Config) (*Server, error) {
	h, err := NewHandler(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("repotest: listen: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.MaxIdleConnsPerHost = 64
	s := &Server{
		URL:    "http://" + ln.Addr().String(),
		h:      h,
		client: &http.Client{Transport: transport},
	}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// serve tracks the request so Close can wait for it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		problem(w, http.StatusServiceUnavailable, "the server is closed", nil)
		return
	}
	s.active.Add(1)
	s.mu.Unlock()
	defer s.active.Done()
	s.h.ServeHTTP(w, r)
}

// Client returns an HTTP client for the server. Its transport is closed by Close.
func (s *Server) Client() *http.Client { return s.client }

// Stats returns a snapshot of the server's counters.
func (s *Server) Stats() Stats { return s.h.Stats() }

// Records returns a copy of every record, in creation order.
func (s *Server) Records() []Record { return s.h.Records() }

// Close closes the listener and every connection, blocks until all requests in
// progress have returned, and closes the store. Close is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	_ = s.srv.Close()
	s.active.Wait()
	_ = s.h.Close()
	s.client.CloseIdleConnections()
}
