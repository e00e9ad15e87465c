package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/driver"
)

// defaultAttemptTimeout bounds one HTTP attempt when the caller gives no
// http.Client of its own.
const defaultAttemptTimeout = 30 * time.Second

// newHTTPClient returns the client requests go through: the caller's (its
// Transport wrapped, not modified) or a keep-alive one, wrapped by the
// target's own transport (S3's signer) where it has one, with the rate
// limit applied to every request, retries and read-backs included. rate 0
// is the target's default; a negative rate is unlimited. When adaptive is
// set, an adaptive limiter beneath that rate paces the requests too; it is
// returned so that answers can be reported to it (else nil).
//
// The client's Timeout moves into the transport, where it starts once a
// request has its slot and its turn at the rate: an attempt queued behind
// others, or paced by a throttled server, has not begun.
func newHTTPClient(base *http.Client, d driver.Driver, rate float64, adaptive bool) (*http.Client, *backoff.AdaptiveLimiter) {
	hc := copyOrDefault(base)
	timeout := hc.Timeout
	hc.Timeout = 0
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	if w, ok := d.(driver.TransportWrapper); ok {
		rt = w.WrapTransport(rt)
	}
	if r, ok := d.(driver.RateSetter); ok && rate == 0 {
		rate = r.DefaultRate()
	}
	t := &sharedTransport{next: rt, limiter: backoff.NewLimiter(max(rate, 0)), timeout: timeout}
	if t.limiter != nil {
		t.rate, t.waits = rate, newRateWaits()
	}
	if p, ok := d.(driver.RequestPacer); ok {
		t.own = p.Pacer()
	}
	if adaptive {
		t.pace = backoff.NewAdaptiveLimiter(max(rate, 0))
	}
	hc.Transport = t
	return hc, t.pace
}

// copyOrDefault returns a copy of base, or a keep-alive client with a
// timeout per attempt when base is nil.
func copyOrDefault(base *http.Client) *http.Client {
	if base != nil {
		hc := *base
		return &hc
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t, Timeout: defaultAttemptTimeout}
}

// sharedTransport is the transport every deposit of a client shares. It
// first waits for the request's own rate where the target has one (see
// driver.RequestPacer); in a batch it then takes one of the batch's
// request slots (requestSlots) for each request; it waits for the rate limiter (nil: unlimited) before each
// request; in a batch it then passes the batch's gate, which a stopped
// batch has shut, however long the request waited before; then it gives
// the attempt timeout (0: none) to send it and read
// its answer; and it deliberately has no CloseIdleConnections:
// go-retryablehttp closes its client's idle connections whenever it gives
// up on a request, which on a transport shared by a whole batch would drop
// every worker's keep-alive connection at each failure. net/http discards
// broken connections itself.
type sharedTransport struct {
	next    http.RoundTripper
	limiter *backoff.Limiter
	pace    *backoff.AdaptiveLimiter
	timeout time.Duration
	own     func(*http.Request) *backoff.Limiter // nil: no request has a rate of its own
	// rate is the limiter's, in requests per second, and waits the time
	// requests spent waiting for it; 0 and nil when unlimited.
	rate  float64
	waits *rateWaits
}

func (t *sharedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	slots, _ := req.Context().Value(slotsKey{}).(*requestSlots)
	notSent := func(err error) (*http.Response, error) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, notSentError{err}
	}
	// Every wait before the request is written ends when the batch stops.
	wctx := req.Context()
	if slots != nil {
		var cancel context.CancelFunc
		wctx, cancel = slots.waitContext(wctx)
		defer cancel()
	}
	release, err := t.await(wctx, req, slots)
	if err != nil {
		if slots.stopped() {
			err = ErrInterrupted
		}
		return notSent(err)
	}
	// The gate, right before the request is written: once the batch has
	// stopped, nothing more leaves, whatever waited until now.
	sent, ok := slots.admit()
	if !ok {
		release()
		return notSent(ErrInterrupted)
	}
	outer := req.Context()
	if t.timeout > 0 {
		ctx, cancel := context.WithTimeout(outer, t.timeout)
		req = req.WithContext(ctx)
		free := release
		release = func() { cancel(); free() }
	}
	resp, err := t.next.RoundTrip(req)
	sent()
	if err != nil {
		if outer.Err() == nil && req.Context().Err() != nil {
			err = fmt.Errorf("no answer within the attempt timeout of %s: %w", t.timeout, err)
		}
		release()
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: release}
	return resp, nil
}

// await waits for everything a request waits for before it is sent: its
// own rate where the target has one, then in a batch a request slot, then
// the client's rates. It returns the function that gives the slot back.
func (t *sharedTransport) await(ctx context.Context, req *http.Request, slots *requestSlots) (func(), error) {
	if t.own != nil {
		if err := t.own(req).Wait(ctx); err != nil {
			return nil, err
		}
	}
	release := func() {}
	if slots != nil {
		var err error
		if release, err = slots.acquire(ctx); err != nil {
			return nil, err
		}
	}
	if err := t.wait(ctx); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// notSentError is a request's end before any of it reached the network:
// the batch drained, or its context ended, while it waited for its slot or
// its turn at the rate, or it met the gate of a stopped batch. Such a
// request changed nothing on the server.
type notSentError struct{ err error }

func (e notSentError) Error() string { return e.err.Error() }
func (e notSentError) Unwrap() error { return e.err }

// neverSent reports whether err is, or wraps, a notSentError.
func neverSent(err error) bool {
	var e notSentError
	return errors.As(err, &e)
}

// wait waits for the adaptive limiter, then for the rate limiter. While
// the adaptive rate is at the rate limit (no throttle has cut it), either
// one's wait is a wait for the client's own limit, and counted as one.
func (t *sharedTransport) wait(ctx context.Context) error {
	if t.waits != nil && t.pace.Rate() >= t.rate*0.99 {
		defer t.waits.end(t.waits.begin())
	}
	if err := t.pace.Wait(ctx); err != nil {
		return err
	}
	return t.limiter.Wait(ctx)
}

// rateWaits adds up the time requests spend waiting for the client's rate
// limit, waits still going included, so that a reader can tell whether
// that limit is what paces a run: summed over requests, it grows about as
// fast as the clock (or faster, with several requests waiting) only when
// requests queue for the limit. Two uncontended locks a request.
type rateWaits struct {
	epoch time.Time
	mu    sync.Mutex
	ended time.Duration // the waits that ended
	// waiting is how many requests wait now, started the sum of their
	// start times (since epoch).
	waiting int
	started time.Duration
}

func newRateWaits() *rateWaits { return &rateWaits{epoch: time.Now()} }

// begin notes a wait starting; end(start) notes its end.
func (w *rateWaits) begin() time.Duration {
	now := time.Since(w.epoch)
	w.mu.Lock()
	w.waiting++
	w.started += now
	w.mu.Unlock()
	return now
}

func (w *rateWaits) end(start time.Duration) {
	now := time.Since(w.epoch)
	w.mu.Lock()
	w.waiting--
	w.started -= start
	w.ended += now - start
	w.mu.Unlock()
}

// total is the time waited so far.
func (w *rateWaits) total() time.Duration {
	now := time.Since(w.epoch)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended + time.Duration(w.waiting)*now - w.started
}

// slotsKey is the context key of a batch's requestSlots.
type slotsKey struct{}

// requestSlots bounds a batch's requests in flight: a request holds a slot
// from before it is sent until its answer's body is closed, and an item
// waiting to retry holds none. It is also the batch's gate: once the batch
// stops (halted ends), no request gets a slot, every wait for one, or for
// the rate, ends, and no request that waited is written; the requests
// already written finish, and are counted until their answers come.
type requestSlots struct {
	ch     chan struct{}
	halted context.Context

	mu sync.Mutex
	// sending counts the requests let through the gate whose answers (or
	// failures) have not come back.
	sending int
}

func newRequestSlots(n int, halted context.Context) *requestSlots {
	return &requestSlots{ch: make(chan struct{}, n), halted: halted}
}

// stopped reports whether the batch has stopped; a nil s (no batch) never
// does.
func (s *requestSlots) stopped() bool {
	return s != nil && s.halted.Err() != nil
}

// waitContext is ctx, ended also when the batch stops: for the waits
// before a request is sent, never for the request itself.
func (s *requestSlots) waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(s.halted, cancel)
	return wctx, func() { unhook(); cancel() }
}

// acquire waits for a slot and returns the function that gives it back.
func (s *requestSlots) acquire(ctx context.Context) (func(), error) {
	if s.stopped() {
		return nil, ErrInterrupted
	}
	select {
	case s.ch <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-s.ch }) }, nil
	case <-s.halted.Done():
		return nil, ErrInterrupted
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// admit lets one request through to be written, unless the batch has
// stopped, and returns the function to call once its answer (or its
// failure) is back. Without a batch (nil s) every request goes.
func (s *requestSlots) admit() (func(), bool) {
	if s == nil {
		return func() {}, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.halted.Err() != nil {
		return nil, false
	}
	s.sending++
	return func() {
		s.mu.Lock()
		s.sending--
		s.mu.Unlock()
	}, true
}

// awaited counts the requests let through the gate whose answers have not
// come back. Once the batch has stopped, it only falls.
func (s *requestSlots) awaited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sending
}

// releasingBody gives a request's slot back when its body is closed.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}
