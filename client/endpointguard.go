package client

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ErrEndpointUnavailable wraps ErrStopRun: the endpoint had answered
// earlier, then stopped accepting connections (refused them, no longer
// resolved, failed its TLS handshake) for longer than
// Config.EndpointOutage. The requests it refused never reached it; the
// items left are unresolved, and a later run settles them safely once it
// answers again.
var ErrEndpointUnavailable = fmt.Errorf("%w: the endpoint is unavailable", ErrStopRun)

// DefaultEndpointOutage is how long an outage of the endpoint is waited
// out when Config.EndpointOutage is zero: a server's restart, or a
// deployment that replaces it, takes seconds to tens of seconds.
const DefaultEndpointOutage = time.Minute

// endpointOutageError is an outage of the endpoint given up: it refused
// connections for waited, longer than the budget; last is the last
// refusal.
type endpointOutageError struct {
	waited time.Duration
	last   error
}

func (e *endpointOutageError) Error() string {
	return fmt.Sprintf("no connection for %s: %v", e.waited.Round(time.Millisecond), scrub(e.last))
}

func (e *endpointOutageError) Unwrap() []error { return []error{ErrEndpointUnavailable, e.last} }

// EndpointOutageEvent is the endpoint, which had answered, refusing a
// connection (the start of an outage, reported once), or answering again
// (Done).
type EndpointOutageEvent struct {
	// Err is the failure that began the outage: a connection refused, a
	// host that no longer resolves, a TLS handshake that failed.
	Err error
	// Budget is how long the outage is waited out (Config.EndpointOutage).
	Budget time.Duration
	// Done: the endpoint answered again, after Waited.
	Done   bool
	Waited time.Duration
}

// endpointGuard waits out an outage of the endpoint: once it has answered,
// a request that never reached it (no connection was made) is sent again
// after a capped backoff, for up to budget from the first such request,
// counting no attempt and spending no retry budget, since it cost the
// server nothing. Safe for concurrent use.
type endpointGuard struct {
	budget time.Duration // <= 0: not waited out
	hook   func(EndpointOutageEvent)
	log    func(msg string, args ...any)

	down atomic.Bool // an outage is under way: answered has work to do

	mu    sync.Mutex
	since time.Time     // when the outage began; zero when none is under way
	back  chan struct{} // closed when the endpoint answers again
	// stopped holds the drains of the batches a deposit of which gave
	// the outage up.
	stopped map[<-chan struct{}]bool
}

func newEndpointGuard(budget time.Duration, hook func(EndpointOutageEvent), log func(string, ...any)) *endpointGuard {
	return &endpointGuard{budget: budget, hook: hook, log: log}
}

// answered ends an outage, if one is under way, for an answer to a
// request sent at sent: the endpoint answered one sent since the outage
// began. An answer to a request sent before (in flight while a server
// shut down gracefully) says nothing of the connections it takes now.
func (g *endpointGuard) answered(sent time.Time) {
	if !g.down.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.since.IsZero() || sent.Before(g.since) {
		return
	}
	waited := time.Since(g.since)
	close(g.back)
	g.since, g.back, g.stopped = time.Time{}, nil, nil
	g.down.Store(false)
	// Said under the lock, so that an outage is said to end after it is
	// said to begin.
	g.log("the endpoint answers again", "waited", waited)
	if g.hook != nil {
		g.hook(EndpointOutageEvent{Done: true, Waited: waited, Budget: g.budget})
	}
}

// refused is a request that never reached the endpoint, the n-th of its
// exchange in a row, after the endpoint had answered; drain is its
// batch's (nil outside one). It returns how long to wait before sending it
// again, and a channel closed should the endpoint answer meanwhile; or,
// once the outage has lasted the budget, an error wrapping
// ErrEndpointUnavailable, for the first deposit of a batch that finds so
// (and for every deposit outside one), and for its batch's others
// ErrInterrupted: the batch stops on the first's, which alone says why.
func (g *endpointGuard) refused(drain <-chan struct{}, err error, n int) (time.Duration, <-chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	began := g.since.IsZero()
	if began {
		g.since, g.back, g.stopped = time.Now(), make(chan struct{}), nil
		g.down.Store(true)
	}
	waited, back := time.Since(g.since), g.back
	if waited >= g.budget {
		if drain != nil && g.stopped[drain] {
			return 0, nil, fmt.Errorf("%w: the run stops: the endpoint accepted no connection for %s", ErrInterrupted, g.budget)
		}
		if drain != nil {
			if g.stopped == nil {
				g.stopped = map[<-chan struct{}]bool{}
			}
			g.stopped[drain] = true
		}
		return 0, nil, &endpointOutageError{waited: waited, last: err}
	}
	if began {
		g.log("the endpoint stopped accepting connections; waiting for it", "budget", g.budget, "error", scrub(err))
		if g.hook != nil {
			g.hook(EndpointOutageEvent{Err: scrub(err), Budget: g.budget})
		}
	}
	wait := min(outageFirstWait<<min(n, 10), outageMaxWait, g.budget-waited)
	// Jittered, so that the deposits waiting do not come back at once.
	wait = max(wait/2+rand.N(wait/2+1), time.Millisecond)
	return wait, back, nil
}
