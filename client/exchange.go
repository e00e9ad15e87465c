package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	neturl "net/url"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/driver"
)

// exchange is the retry state of one step: the write's attempts count
// against the attempt limit, and each look of a check against one of its
// own (see looks); every request against one elapsed budget, and retries
// against the client's shared retry budget. Every wait between attempts is the
// exchange's own (sleep), decided by package backoff and ended by the
// context or the batch's drain; go-retryablehttp sends, rewinds bodies and
// calls back, but never waits on its own.
type exchange struct {
	c        *Client
	key      string
	drain    <-chan struct{}
	start    time.Time
	requests int
	retries  int
	// inFlight counts the answers that said the request is still in flight
	// on the server: they spend no attempt and no retry budget.
	inFlight int
	// looks counts the check requests that spend none of the step's
	// attempts: every attempt of a look that read its answer (found,
	// absent, pending, foreign), so a check of several requests, each
	// retried within the attempt limit, leaves the write its own.
	looks int
	// since is what a check's answers carry as driver.Answer.Since: when
	// the step they look for was first attempted, zero when what they
	// look for may be older.
	since time.Time
	// stopped says why retrying stopped, when it did.
	stopped error
	// effect says that a request sent may have taken effect: any answer
	// but one that proves it changed nothing (see madeNoChange).
	effect bool
	sent   time.Time
	// unreached counts the requests that never reached the endpoint
	// during an outage of it: they spend no attempt, and outageWaited,
	// the time waited for it, none of the elapsed limit.
	unreached    int
	outageWaited time.Duration
	// spent says that a retry of this exchange took from the retry
	// budget; spentTimeout records what the last one cost, for the refund.
	spent        bool
	spentTimeout bool
}

func (c *Client) newExchange(key string, drain <-chan struct{}) *exchange {
	return &exchange{c: c, key: key, drain: drain, start: time.Now()}
}

// do sends req through go-retryablehttp until judge settles an answer or
// retrying stops, and returns the last answer and its class. judge sees
// every answer, its body already read; retryable answers are retried after
// the exchange's own wait, except ambiguous ones when retryAmbiguous is false
// (the caller reconciles before sending again). A transport error that ends
// the exchange is returned as an error wrapping ErrUnresolved or
// ErrInterrupted.
//
// Each answer says whether an earlier attempt of req was ambiguous
// (answer.afterAmbiguous): the attempts do retries itself, and those
// net/http makes unseen (a request with an Idempotency-Key, written to a
// kept-alive connection that closed before any answer, is sent again on
// another), so the caller can tell an "exists" that may answer its own
// earlier attempt from one that cannot.
func (x *exchange) do(ctx context.Context, req request, retryAmbiguous bool, judge func(answer) verdict) (answer, class, error) {
	t := &attempts{x: x, req: req, retryAmbiguous: retryAmbiguous, judge: judge}
	ctx = t.traced(ctx)
	rc := &retryablehttp.Client{
		HTTPClient:   x.c.http,
		RetryMax:     math.MaxInt32, // checkRetry decides
		CheckRetry:   t.checkRetry,
		Backoff:      func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return 0 },
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		RequestLogHook: func(_ retryablehttp.Logger, _ *http.Request, _ int) {
			x.requests++
			x.sent = time.Now()
		},
	}
	hreq, err := retryablehttp.NewRequestWithContext(ctx, req.Method, req.URL, requestBody(req))
	if err != nil {
		return t.last, t.cls, fmt.Errorf("%w: %w", ErrStopRun, err)
	}
	hreq.Header = req.Header
	resp, err := rc.Do(hreq)
	if resp != nil {
		resp.Body.Close()
	}
	return t.ended(ctx, resp != nil && err == nil, err)
}

// attempts is the state of one do: the answers to req so far, as
// go-retryablehttp's CheckRetry (checkRetry) sees them one by one.
type attempts struct {
	x              *exchange
	req            request
	retryAmbiguous bool
	judge          func(answer) verdict

	last     answer
	cls      class
	v        verdict
	tooLarge error
	// ambiguous: an attempt so far may have taken effect unanswered.
	ambiguous bool
	// retrying: the answer checkRetry sees is a retry's (x.retries
	// counted it when it was decided on).
	retrying bool
	// unanswered says that a request was written and got no answer
	// before another connection was taken for req: an attempt cut
	// off, whichever retried it.
	unanswered        atomic.Bool
	written, answered atomic.Int32
	// conns counts the connections taken for req, connsSeen that count at
	// the last answer: an attempt during which it did not grow wrote
	// nothing to any connection.
	conns     atomic.Int32
	connsSeen int32
	// connFailed counts the dials and TLS handshakes that failed,
	// connFailedSeen that count at the last answer.
	connFailed     atomic.Int32
	connFailedSeen int32
}

// traced returns ctx with the trace that counts requests written and
// answered, to tell when a connection is taken while one went unanswered.
func (t *attempts) traced(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			t.conns.Add(1)
			if t.written.Load() > t.answered.Load() {
				t.unanswered.Store(true)
			}
		},
		WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil {
				t.written.Add(1)
			}
		},
		GotFirstResponseByte: func() { t.answered.Add(1) },
		ConnectDone: func(_, _ string, err error) {
			if err != nil {
				t.connFailed.Add(1)
			}
		},
		TLSHandshakeDone: func(_ tls.ConnectionState, err error) {
			if err != nil {
				t.connFailed.Add(1)
			}
		},
	})
}

// reached reports whether the attempt just answered with err may have
// reached the server. One that did not took no connection (net/http
// reports each one taken, before it writes anything to it: a request is
// never written before its TLS handshake is done), and failed because no
// connection could be made: the dial or DNS failed, or the TLS handshake.
// The error says so by its type; the trace too, for failures no type
// names (a handshake that timed out). An attempt that took a connection
// is not one: net/http may have written the request to a kept-alive
// connection that closed, then failed to dial another. A transport that
// reports no trace has only the error's type to go by. (Go's
// src/net/http/transport.go: getConn reports GotConn once it holds a
// connection, which dialConn returns only after addTLS finished the
// handshake; persistConn.roundTrip writes after that.)
func (t *attempts) reached(err error) bool {
	conns, failed := t.conns.Load(), t.connFailed.Load()
	tookConn, connFailed := conns != t.connsSeen, failed != t.connFailedSeen
	t.connsSeen, t.connFailedSeen = conns, failed
	if err == nil {
		return true
	}
	return tookConn || !(connectionNeverMade(err) || connFailed)
}

// checkRetry reads and judges one answer (resp or err) and says whether
// req is sent again, after the exchange's own wait.
func (t *attempts) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	x, req := t.x, t.req
	retry := t.retrying
	t.retrying = false
	t.ambiguous = t.ambiguous || t.unanswered.Load()
	t.last = answer{URL: req.URL, Err: err, AfterAmbiguous: t.ambiguous}
	reached := t.reached(err)
	if resp != nil {
		t.last.Status, t.last.Header = resp.StatusCode, resp.Header
		t.last.Body, t.tooLarge = readAnswer(resp, req.Full)
		resp.Body = http.NoBody // read once, here; the engine keeps the bytes
		x.c.answered.Store(true)
		x.c.endpoint.answered(x.sent)
	}
	if t.tooLarge != nil {
		// Nothing can be read from it, and asking again would get the
		// same: the run stops. The request may have taken effect.
		x.effect = true
		x.requestDone(t.last, req.Method)
		return false, nil
	}
	switch {
	case err != nil && ctx.Err() != nil:
		t.cls, t.v = driver.Canceled, verdict{}
	case !reached:
		// It did not take effect, whatever the judge would make of a
		// transport error: sent again, even to a step that reconciles
		// ambiguous answers first.
		t.cls, t.v = driver.Retry, verdict{Class: driver.Retry}
	default:
		t.v = t.judge(t.last)
		t.cls = t.v.Class
	}
	if t.ambiguous || !madeNoChange(t.last, t.cls) {
		x.effect = true
		t.ambiguous = t.ambiguous || t.cls == driver.Ambiguous
	}
	if t.last.Err == nil {
		x.c.pace.Observe(throttled(t.last, t.cls))
	}
	if neverSent(err) {
		x.requests-- // counted as it was queued; it never left
		if retry {
			x.retries-- // and so the retry was none
		}
	} else {
		x.requestDone(t.last, req.Method)
	}
	if t.cls == driver.Created || t.cls == driver.Exists {
		x.settled()
	}
	if !t.cls.Retryable() || (t.cls == driver.Ambiguous && !t.retryAmbiguous) {
		return false, nil
	}
	if !reached {
		return x.unreachedRetry(ctx, t.last), nil
	}
	wait, stop := x.mayRetry(ctx, t.last, t.v.InFlight)
	if stop != nil {
		return false, nil
	}
	if err := x.sleep(ctx, wait); err != nil {
		x.retries-- // decided on, never sent
		x.stopped = ErrInterrupted
		return false, nil
	}
	t.retrying = true
	return true, nil
}

// unreachedRetry decides whether a request that never reached the
// endpoint (answer a) is sent again, and waits first. Before any answer of
// the run, it is not: the endpoint is unreachable (a typo in it, a server
// not running, a scheme it does not speak), and retrying would only repeat
// that for every item. After one, the endpoint is waited out
// (endpointGuard), the wait holding no request slot, counting no attempt
// and none of the elapsed limit.
func (x *exchange) unreachedRetry(ctx context.Context, a answer) bool {
	select {
	case <-x.drain:
		x.stopped = ErrInterrupted
		return false
	default:
	}
	if !x.c.answered.Load() {
		x.stopped = ErrUnreachable
		return false
	}
	x.unreached++
	wait, back, err := x.c.endpoint.refused(x.drain, a.Err, x.unreached)
	if err != nil {
		x.stopped = err
		return false
	}
	x.retries++
	x.c.log.Debug("retry", "key", x.key, "retry", x.retries, "wait", wait, "unreached", true)
	if x.c.hooks.OnRetry != nil {
		x.c.hooks.OnRetry(RetryEvent{Key: x.key, Retry: x.retries, Wait: wait, Err: a.Err})
	}
	start := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	defer func() { x.outageWaited += time.Since(start) }()
	select {
	case <-t.C:
	case <-back:
	case <-ctx.Done():
		x.stopped = ErrInterrupted
		return false
	case <-x.drain:
		x.stopped = ErrInterrupted
		return false
	}
	return true
}

// ended is do's result once go-retryablehttp returned: answered says it
// returned an answer, err is its error otherwise.
func (t *attempts) ended(ctx context.Context, answered bool, err error) (answer, class, error) {
	x, req, last, cls := t.x, t.req, t.last, t.cls
	if t.tooLarge != nil {
		return last, driver.Stop, fmt.Errorf("%w: %s %s: %w", ErrStopRun, req.Method, driver.RedactURL(req.URL), t.tooLarge)
	}
	if answered {
		return last, cls, nil
	}
	if cls == driver.Terminal {
		// The judge found the transport error itself terminal: a body
		// that could not be sent as promised (a file changed since it was
		// hashed), which no retry would send otherwise.
		return last, cls, nil
	}
	if cls == driver.Ambiguous && !t.retryAmbiguous && x.stopped == nil && ctx.Err() == nil {
		// A dropped connection to a step that reconciles: the caller looks
		// for its effect before sending again.
		return last, cls, nil
	}
	if err == nil {
		err = errors.New("no answer")
	}
	switch {
	case cls == driver.Canceled || ctx.Err() != nil || errors.Is(x.stopped, ErrInterrupted):
		return last, driver.Canceled, fmt.Errorf("%w: %w", ErrInterrupted, scrub(err))
	case x.stopped != nil:
		return last, cls, fmt.Errorf("%w after %d attempts: %w: %s %s: %w",
			ErrUnresolved, x.requests, x.stopped, req.Method, driver.RedactURL(req.URL), scrub(err))
	default:
		return last, cls, fmt.Errorf("%w: %s %s: %w", ErrUnresolved, req.Method, driver.RedactURL(req.URL), scrub(err))
	}
}

// requestBody is what go-retryablehttp sends for req, rewound for every
// attempt. A body of length 0 is no body at all: net/http sends any other
// empty body chunked, without Content-Length, which S3 refuses (411
// MissingContentLength), while for no body it sends Content-Length: 0 with a
// PUT or a POST.
func requestBody(req request) any {
	switch {
	case req.Open != nil:
		return retryablehttp.ReaderFunc(func() (io.Reader, error) {
			r, err := req.Open()
			if err != nil {
				return nil, err
			}
			if lr, ok := r.(interface{ Len() int }); ok && lr.Len() == 0 {
				if c, ok := r.(io.Closer); ok {
					c.Close()
				}
				return http.NoBody, nil
			}
			return r, nil
		})
	case len(req.Body) > 0:
		return req.Body
	}
	return nil
}

// madeNoChange reports whether an answer of class cls proves that its
// request changed nothing on the server: the request never left the
// batch's queue, or never reached the server (a transport error checkRetry
// classed driver.Retry), or the server said it did not run (driver.Retry:
// a 429, a 503, a 409 "in flight" under Idempotency-Key), or refused in a
// way that concerns every item (driver.Stop: credentials, a missing
// endpoint).
func madeNoChange(a answer, cls class) bool {
	if a.Err != nil && neverSent(a.Err) {
		return true
	}
	return cls == driver.Stop || cls == driver.Retry
}

// connectionNeverMade reports whether err says no connection to the
// server was made: the host did not resolve, the dial failed (refused,
// unreachable, timed out), or the TLS handshake did (the server speaks
// plain HTTP, or another protocol; its certificate is not trusted; it
// sent an alert).
func connectionNeverMade(err error) bool {
	var (
		dns    *net.DNSError
		op     *net.OpError
		header tls.RecordHeaderError
		alert  tls.AlertError
		verify *tls.CertificateVerificationError
	)
	switch {
	case errors.As(err, &dns), errors.As(err, &header), errors.As(err, &alert), errors.As(err, &verify):
		return true
	case errors.Is(err, http.ErrSchemeMismatch):
		return true
	}
	return errors.As(err, &op) && op.Op == "dial"
}

// requestDone reports one request to the OnRequest hook and, at Debug, to
// the log (URL redacted, transport errors scrubbed of it).
func (x *exchange) requestDone(a answer, method string) {
	took := time.Since(x.sent)
	if x.c.debug() {
		args := []any{"key", x.key, "method", method, "url", driver.RedactURL(a.URL), "status", a.Status, "took", took}
		if a.Err != nil {
			args = append(args, "error", scrub(a.Err).Error())
		}
		x.c.log.Debug("request", args...)
	}
	if x.c.hooks.OnRequest != nil {
		x.c.hooks.OnRequest(RequestEvent{Key: x.key, Method: method, Status: a.Status, Err: a.Err, Duration: took})
	}
}

// throttled reports whether an answer asks the client to slow down: a 429
// or a 503 to be retried.
func throttled(a answer, cls class) bool {
	return a.Err == nil && cls == driver.Retry &&
		(a.Status == http.StatusTooManyRequests || a.Status == http.StatusServiceUnavailable)
}

// settled credits the retry budget for an exchange that succeeded.
func (x *exchange) settled() {
	switch {
	case x.spent:
		x.c.budget.Refund(x.spentTimeout)
	case x.retries == 0:
		x.c.budget.Success()
	}
}

// mayRetry decides whether the exchange may send another request after a,
// and after what wait. Every bound is checked before waiting. inFlight, when
// set, says the server is still working on this very request: the retry then
// waits at least that long (unless Retry-After says otherwise) and is bounded
// by the elapsed limit only, spending no attempt and no retry budget, so a
// lock held for tens of seconds is waited out. Under an adaptive rate a
// throttle's retry spends no retry budget either: the rate, which throttles
// lower for the whole batch, is what keeps their retries from becoming a
// storm, and a batch's first seconds against a server's limit would
// otherwise drain the budget before the rate has adapted. Once the rate is
// as low as it goes, throttles spend the budget again, and when it runs out
// the run stops (ErrStopRun): a server that throttles every request even
// then would otherwise be crawled at a request a second, item after item.
func (x *exchange) mayRetry(ctx context.Context, a answer, inFlight time.Duration) (time.Duration, error) {
	stop := func(e error) (time.Duration, error) { x.stopped = e; return 0, e }
	select {
	case <-x.drain:
		return stop(ErrInterrupted)
	default:
	}
	var resp *http.Response
	if a.Err == nil {
		resp = &http.Response{StatusCode: a.Status, Header: a.Header}
	}
	if inFlight > 0 {
		x.inFlight++
	}
	elapsed := time.Since(x.start) - x.outageWaited
	wait, err := x.c.policy.Next(ctx, x.requests-x.inFlight-x.looks-x.unreached, resp, elapsed, nil)
	if err != nil {
		return stop(err)
	}
	if inFlight > 0 {
		if _, given := backoff.RetryAfter(a.Header, time.Now()); !given && wait < inFlight {
			wait = inFlight
			if limit := x.c.policy.WithDefaults().MaxElapsed; elapsed+wait > limit {
				return stop(fmt.Errorf("%w: waiting %v for a request in flight after %v would pass %v",
					backoff.ErrElapsedExhausted, wait, elapsed.Round(time.Millisecond), limit))
			}
		}
	} else if paced := x.c.pace != nil && throttled(a, driver.Retry); !paced || x.c.pace.AtLowest() {
		timeout := a.Err != nil && isTimeout(a.Err)
		if berr := x.c.budget.Spend(timeout); berr != nil {
			if paced {
				return stop(fmt.Errorf("%w: throttled at the lowest adaptive rate: %w", ErrStopRun, berr))
			}
			return stop(berr)
		}
		x.spent, x.spentTimeout = true, timeout
	}
	x.retries++
	x.c.log.Debug("retry", "key", x.key, "retry", x.retries, "wait", wait, "after_status", a.Status, "in_flight", inFlight > 0)
	if x.c.hooks.OnRetry != nil {
		x.c.hooks.OnRetry(RetryEvent{Key: x.key, Retry: x.retries, Wait: wait, Status: a.Status, Err: a.Err})
	}
	return wait, nil
}

// sleep is every wait of a deposit: it ends early, with an error, when the
// context ends or the batch drains.
func (x *exchange) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	startsWaiting(ctx)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-x.drain:
		return ErrInterrupted
	}
}

// checked is what a check found, with the answer as an error for a
// foreign finding (herr), which the engine records as the step's failure.
type checked struct {
	finding
	herr *HTTPError
	// header is the answer's, whose Retry-After paces the next poll of a
	// pending step.
	header http.Header
}

// maxCheckHops bounds a check's chain of further looks (Finding.Then): a
// driver whose chain never ends would otherwise hold its item forever.
const maxCheckHops = 1000

// runCheck runs a step's check: it sends the check's request (retried like
// any other) and returns what the check found, following the further looks
// a finding asks for (Finding.Then). afterAmbiguous asks for the check's
// settle time before an "absent" is trusted: a server whose reads lag its
// writes may not show yet what an ambiguous attempt created; the whole
// chain is looked at again then.
func (x *exchange) runCheck(ctx context.Context, chk *check, prior []string, afterAmbiguous bool) (checked, error) {
	var settle time.Duration
	if afterAmbiguous {
		settle = chk.Settle
	}
	return x.settleCheck(ctx, chk, prior, settle)
}

// recheck is runCheck after an attempt the store shows, of an earlier run
// or another process, whose intent it recorded at intent: a check that
// counts its settle time from the intent (Check.SettleFromIntent) waits
// only what is left of it, and trusts its first look once none is; never
// more than Settle, whatever the store's clock says.
func (x *exchange) recheck(ctx context.Context, chk *check, prior []string, intent time.Time) (checked, error) {
	settle := chk.Settle
	if chk.SettleFromIntent && !intent.IsZero() {
		settle = min(settle, time.Until(intent.Add(chk.Settle)))
	}
	return x.settleCheck(ctx, chk, prior, settle)
}

// settleCheck runs chk and, when it finds nothing, looks again settle
// later, once; settle <= 0 trusts the first look.
func (x *exchange) settleCheck(ctx context.Context, chk *check, prior []string, settle time.Duration) (checked, error) {
	settled := settle <= 0
	for {
		f, err := x.followCheck(ctx, chk, prior)
		if err != nil || f.Kind != driver.Absent || settled {
			return f, err
		}
		settled = true
		if err := x.sleep(ctx, settle); err != nil {
			return f, fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
	}
}

// followCheck runs chk, then each further check its findings name, and
// returns the last finding.
func (x *exchange) followCheck(ctx context.Context, chk *check, prior []string) (checked, error) {
	for hop := 0; ; hop++ {
		f, err := x.lookOnce(ctx, chk, prior)
		if err != nil || f.Then == nil {
			return f, err
		}
		if hop+1 >= maxCheckHops {
			return f, fmt.Errorf("%w: the check looked %d times and settled nothing", ErrUnresolved, maxCheckHops)
		}
		chk = f.Then
	}
}

// lookOnce sends one check's request and judges its answer.
func (x *exchange) lookOnce(ctx context.Context, chk *check, prior []string) (checked, error) {
	req, err := chk.Build(prior)
	if err != nil {
		return checked{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	req.Header = x.c.withUserHeader(req.Header)
	// The look's retries are counted from 0 (each request of a check has
	// the attempt limit, as the write does), and a look that read its
	// answer gives back every attempt it took.
	looks, start := x.looks, x.requests-x.inFlight-x.unreached
	x.looks = start
	defer func() { x.looks = looks }()
	var f checked
	a, cls, err := x.do(ctx, req, true, func(a answer) verdict {
		a.Since = x.since
		f.finding = chk.Judge(a)
		if f.Kind == driver.Unknown {
			return verdict{Class: unusableLook(f.Class)}
		}
		return verdict{Class: driver.Created} // settles the check's own exchange
	})
	if err != nil {
		return f, err
	}
	if f.Kind != driver.Unknown {
		looks += x.requests - x.inFlight - x.unreached - start
	}
	if f.Warn != "" {
		x.c.warnOnce(f.Warn, "status", a.Status, "endpoint", driver.RedactURL(a.URL))
	}
	herr := answerError(req.Method, a, f.Problem)
	f.header = a.Header
	switch f.Kind {
	case driver.Foreign:
		f.herr = herr
	case driver.Unknown:
		f.Then = nil
		switch {
		case cls == driver.Stop:
			return f, fmt.Errorf("%w: %w", ErrStopRun, herr)
		case cls == driver.Canceled:
			return f, fmt.Errorf("%w: %w", ErrInterrupted, herr)
		case errors.Is(x.stopped, ErrStopRun):
			return f, fmt.Errorf("%w: read-back after %d attempts: %w", x.stopped, x.requests, herr)
		case x.stopped != nil:
			return f, fmt.Errorf("%w: read-back after %d attempts: %w: %w", ErrUnresolved, x.requests, x.stopped, herr)
		default:
			return f, fmt.Errorf("%w: read-back: %w", ErrUnresolved, herr)
		}
	}
	return f, nil
}

// unusableLook is the class of a look its check could not use, judged c:
// a success (a 200 that is not the page the check reads, a body cut short)
// is ambiguous, looked at again within the look's attempt limit; any
// other class is what it is.
func unusableLook(c class) class {
	switch c {
	case driver.Created, driver.Exists, driver.Accepted:
		return driver.Ambiguous
	}
	return c
}

// unresolved is the error of a step whose retrying stopped at last (an
// *HTTPError, or what the transport said): ErrUnresolved, or ErrStopRun
// when what stopped it concerns every item.
func (x *exchange) unresolved(last error) error {
	if x.stopped == nil {
		return fmt.Errorf("%w: %w", ErrUnresolved, last)
	}
	if errors.Is(x.stopped, ErrInterrupted) {
		return fmt.Errorf("%w: %w", ErrInterrupted, last)
	}
	if errors.Is(x.stopped, ErrStopRun) {
		return fmt.Errorf("%w after %d attempts: %w", x.stopped, x.requests, last)
	}
	return fmt.Errorf("%w after %d attempts: %w: %w", ErrUnresolved, x.requests, x.stopped, last)
}

// answerError is an answer as an error. problem, when set, is the step's
// own explanation; else the body's problem detail.
func answerError(method string, a answer, problem string) *HTTPError {
	if problem == "" {
		problem = driver.Problem(a.Header, a.Body)
	}
	e := &HTTPError{Method: method, URL: driver.RedactURL(a.URL), StatusCode: a.Status, Problem: problem}
	if d, ok := backoff.RetryAfter(a.Header, time.Now()); ok {
		e.RetryAfter = d
	}
	return e
}

// maxAnswerBytes bounds how much of a response body is read when only its
// class and problem detail matter: enough for a problem detail.
const maxAnswerBytes = 64 << 10

// maxFullAnswerBytes bounds the body of an answer read for more than its
// class (driver.Request.Full): a limit no real answer reaches (a page of 100
// InvenioRDM records is well under 1 MiB, a record with 100 file entries
// about 100 KiB). A larger body is refused (errAnswerTooLarge) rather than
// read cut.
const maxFullAnswerBytes = 16 << 20

// errAnswerTooLarge is an answer read for more than its class whose body
// is larger than maxFullAnswerBytes.
var errAnswerTooLarge = fmt.Errorf("the answer is larger than %d MiB, more than any answer the client reads; refused", maxFullAnswerBytes>>20)

// readAnswer reads a response body and closes it: at most maxAnswerBytes,
// or for a full request (read for more than its class) the whole body up
// to maxFullAnswerBytes, with errAnswerTooLarge beyond. A body cut by the
// connection is returned as far as it came.
func readAnswer(resp *http.Response, full bool) ([]byte, error) {
	defer resp.Body.Close()
	if !full {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		// Drain a little more so the connection can be reused.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		return b, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxFullAnswerBytes+1))
	if len(b) > maxFullAnswerBytes {
		return nil, errAnswerTooLarge
	}
	return b, nil
}

// isTimeout reports whether err is a timeout, which costs more retry budget
// than other failures (AWS standard retry mode).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// scrub drops the URL from a transport error (a *url.Error carries it with
// its query string), keeping the cause.
func scrub(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
