// Package restart provides an HTTP server on 127.0.0.1 that can be closed
// and opened again on the same port, for tests of a repository that
// restarts mid-run: while it is closed, connections are refused.
package restart

import (
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Server serves a handler on one port of 127.0.0.1. Close closes the
// listener and every connection (requests in flight are cut off); Open
// listens on the same port again, with the same handler and so the same
// records. Server is safe for concurrent use by multiple goroutines.
type Server struct {
	// URL is http://Addr.
	URL string
	// Addr is the host and port served, the same after every Open.
	Addr string

	h   http.Handler
	mu  sync.Mutex
	srv *http.Server
}

// New serves h on a free port of 127.0.0.1.
func New(h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + ln.Addr().String(), Addr: ln.Addr().String(), h: h}
	s.serve(ln)
	return s, nil
}

func (s *Server) serve(ln net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.srv = &http.Server{Handler: s.h}
	go func() { _ = s.srv.Serve(ln) }()
}

// Close closes the listener and every connection.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.srv.Close()
}

// Open listens on the same port again.
func (s *Server) Open() error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listening on %s again: %w", s.Addr, err)
	}
	s.serve(ln)
	return nil
}
