package repotest

import "sync"

// stubLife is how every API stub (DataCite, InvenioRDM, Dataverse,
// Crossref) ends: its mutex, a channel closed on Close that ends every
// wait, and whether it is closed. A stub embeds it and guards its own
// state with the same mutex.
type stubLife struct {
	mu     sync.Mutex
	done   chan struct{}
	closed bool
}

func newStubLife() stubLife { return stubLife{done: make(chan struct{})} }

// end closes done once. It is idempotent.
func (l *stubLife) end() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

// admitRequest counts a request in *requests, under the mutex, and reports
// whether the stub is still open to serve it.
func (l *stubLife) admitRequest(requests *int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	*requests++
	return !l.closed
}
