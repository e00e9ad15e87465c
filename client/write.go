package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/depositkit/deposit/backoff"
)

// write sends the conditional write for one key until an answer settles it,
// reading the record back where the answer carries no identifier. For a
// dataset (dir set) under a profile that stores files, the files go first
// and the document is written last, under its own name.
func (c *Client) write(ctx context.Context, res Result, body []byte, dir string, drain <-chan struct{}) (out Result, _ error) {
	name := res.Key
	if fs, ok := c.profile.(fileStorer); ok && dir != "" {
		var err error
		if res, err = fs.putFiles(ctx, c, res, dir, body, drain); err != nil {
			return res, err
		}
		name = fs.documentName(res.Key)
	}
	files := res // requests and retries spent on the files
	recordURL := c.recordURL(name)
	method, url, header, body, err := c.profile.request(c, name, body)
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for name, values := range c.header {
		header[name] = values
	}

	x := c.newExchange(res.Key, drain)
	// Count every request of the exchange, read-backs included, whichever
	// return settles the deposit.
	defer func() { out.Requests, out.Retries = files.Requests+x.requests, files.Retries+x.retries }()
	for {
		resp, cls, err := x.do(ctx, method, url, header, body)
		if err != nil {
			return res, err
		}
		answer := readAnswer(resp)
		switch cls {
		case classCreated:
			if c.profile.conditional() && resp.StatusCode != http.StatusCreated {
				c.warnIgnored.Do(func() {
					c.log.Warn("the server answered a conditional create with a status other than 201; it may ignore If-None-Match, and then cannot prevent duplicates",
						"status", resp.StatusCode, "endpoint", redactURL(c.endpoint))
				})
			}
			if !c.profile.mints() {
				return c.confirm(ctx, res, OutcomeCreated, recordURL, resp.StatusCode)
			}
			id := identifierFrom(answer, resp.Header, c.pointers, url, recordURL, true)
			return c.confirm(ctx, res, OutcomeCreated, id, resp.StatusCode)

		case classExists:
			if !c.profile.mints() {
				return c.confirm(ctx, res, OutcomeExisting, recordURL, resp.StatusCode)
			}
			if id, ok := stringAtPointers(answer, c.pointers); ok {
				// An idempotency-key hit replays the original answer.
				return c.confirm(ctx, res, OutcomeExisting, id, resp.StatusCode)
			}
			if c.profile.keepsFirstBody() {
				id := identifierFrom(answer, resp.Header, c.pointers, url, recordURL, true)
				return c.confirm(ctx, res, OutcomeExisting, id, resp.StatusCode)
			}
			id, found, err := c.readBack(ctx, x, res.Key)
			if err != nil {
				return c.readBackFailed(ctx, res, err)
			}
			if !found {
				id = recordURL
			}
			return c.confirm(ctx, res, OutcomeExisting, id, resp.StatusCode)

		case classConflict:
			// The mission's rule: a 409 is "exists" once a read-back finds
			// the record. A 409 without one (a WebDAV missing collection, an
			// S3 write conflict) is retried like a 503.
			id, found, err := c.readBack(ctx, x, res.Key)
			if err != nil {
				return c.readBackFailed(ctx, res, err)
			}
			if found {
				return c.confirm(ctx, res, OutcomeExisting, id, resp.StatusCode)
			}
			herr := c.httpError(method, url, resp, answer)
			herr.Problem = "409 Conflict but no record found on read-back: " + herr.Problem
			wait, stop := x.mayRetry(ctx, resp, nil)
			if stop != nil {
				return res, fmt.Errorf("%w after %d attempts: %w: %w", ErrUnresolved, x.requests, stop, herr)
			}
			if err := x.sleep(ctx, wait); err != nil {
				return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			continue

		case classTerminal:
			return c.fail(ctx, res, c.httpError(method, url, resp, answer))

		case classStop:
			return res, fmt.Errorf("%w: %w", ErrStopRun, c.httpError(method, url, resp, answer))

		default: // retryable, but retrying stopped
			herr := c.httpError(method, url, resp, answer)
			return res, fmt.Errorf("%w after %d attempts: %w: %w", ErrUnresolved, x.requests, x.stopped, herr)
		}
	}
}

// readBack reads the record of key back (retried like any request) and
// returns its identifier. found is false when the server has no record or
// refuses the read (403, 405): the caller decides what that means. A record
// that the profile finds is not ours is a terminal error.
func (c *Client) readBack(ctx context.Context, x *exchange, key string) (id string, found bool, err error) {
	recordURL := c.profile.readURL(c, key)
	header := c.header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Accept", "application/json")
	resp, cls, err := x.do(ctx, http.MethodGet, recordURL, header, nil)
	if err != nil {
		return "", false, err
	}
	answer := readAnswer(resp)
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent:
		if err := c.profile.checkExisting(key, answer); err != nil {
			herr := c.httpError(http.MethodGet, recordURL, resp, answer)
			herr.Problem = err.Error()
			return "", false, fmt.Errorf("%w: %w", ErrTerminal, herr)
		}
		// A read-back that merely echoes the stored payload mints nothing:
		// the record URL it is.
		id := identifierFrom(answer, resp.Header, c.pointers, recordURL, c.recordURL(key), false)
		return id, true, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone ||
		resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMethodNotAllowed:
		c.warnReadBack.Do(func() {
			c.log.Warn("the server refused to read a record back; using record URLs as identifiers",
				"status", resp.StatusCode, "endpoint", redactURL(c.endpoint))
		})
		return "", false, nil
	case cls == classStop:
		return "", false, fmt.Errorf("%w: %w", ErrStopRun, c.httpError(http.MethodGet, recordURL, resp, answer))
	case cls.retryable():
		herr := c.httpError(http.MethodGet, recordURL, resp, answer)
		return "", false, fmt.Errorf("%w: read-back after %d attempts: %w: %w", ErrUnresolved, x.requests, x.stopped, herr)
	default:
		herr := c.httpError(http.MethodGet, recordURL, resp, answer)
		return "", false, fmt.Errorf("%w: read-back: %w", ErrUnresolved, herr)
	}
}

// readBackFailed settles a deposit whose read-back failed: a terminal
// answer (a foreign record at our name) is recorded as failed; anything else
// leaves the intent pending.
func (c *Client) readBackFailed(ctx context.Context, res Result, err error) (Result, error) {
	var herr *HTTPError
	if errors.Is(err, ErrTerminal) && errors.As(err, &herr) {
		return c.fail(ctx, res, herr)
	}
	return res, err
}

// recordURL is {endpoint}/{key}, the endpoint's query kept after the key.
func (c *Client) recordURL(key string) string {
	base, query, found := strings.Cut(c.endpoint, "?")
	if found {
		return base + "/" + key + "?" + query
	}
	return base + "/" + key
}

func (c *Client) httpError(method, url string, resp *http.Response, answer []byte) *HTTPError {
	e := &HTTPError{Method: method, URL: redactURL(url), StatusCode: resp.StatusCode, Problem: problemDetail(resp.Header, answer)}
	if d, ok := backoff.RetryAfter(resp.Header, time.Now()); ok {
		e.RetryAfter = d
	}
	return e
}

// exchange is the retry state of one deposit: every request it sends, the
// write and any read-back, counts against one attempt limit, one elapsed
// budget and the client's shared retry budget.
type exchange struct {
	c        *Client
	key      string
	drain    <-chan struct{}
	start    time.Time
	requests int
	retries  int
	// wait is the delay mayRetry chose, handed to retryablehttp's Backoff.
	wait time.Duration
	// stopped says why retrying stopped, when it did.
	stopped error
	// last is the class of the last answer.
	last class
	sent time.Time
	// spentTimeout records what the last retry cost, for the refund.
	spentTimeout bool
}

func (c *Client) newExchange(key string, drain <-chan struct{}) *exchange {
	return &exchange{c: c, key: key, drain: drain, start: time.Now()}
}

// do sends one request through go-retryablehttp, whose hooks are driven by
// our policy: CheckRetry classifies each answer and decides (attempts,
// elapsed time, deadline, budget), Backoff returns the wait it chose, and the
// last answer is always handed back, never swallowed.
func (x *exchange) do(ctx context.Context, method, url string, header http.Header, body []byte) (*http.Response, class, error) {
	var raw any
	if body != nil {
		raw = body
	}
	return x.doRaw(ctx, method, url, header, raw)
}

// doRaw is do with any body go-retryablehttp takes: nil, []byte, or a
// retryablehttp.ReaderFunc that opens the body afresh for every attempt.
func (x *exchange) doRaw(ctx context.Context, method, url string, header http.Header, raw any) (*http.Response, class, error) {
	rc := &retryablehttp.Client{
		HTTPClient:   x.c.http,
		RetryMax:     math.MaxInt32, // the policy in CheckRetry decides
		CheckRetry:   x.checkRetry,
		Backoff:      func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return x.wait },
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
		RequestLogHook: func(_ retryablehttp.Logger, _ *http.Request, _ int) {
			x.requests++
			x.sent = time.Now()
		},
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, url, raw)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrStopRun, err)
	}
	req.Header = header
	resp, err := rc.Do(req)
	if resp == nil || err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		if err == nil {
			err = errors.New("no answer")
		}
		switch {
		case x.last == classCanceled || ctx.Err() != nil:
			return nil, x.last, fmt.Errorf("%w: %w", ErrInterrupted, err)
		case x.stopped != nil:
			return nil, x.last, fmt.Errorf("%w after %d attempts: %w: %s %s: %w",
				ErrUnresolved, x.requests, x.stopped, method, redactURL(url), scrub(err))
		default:
			return nil, x.last, fmt.Errorf("%w: %s %s: %w", ErrUnresolved, method, redactURL(url), scrub(err))
		}
	}
	return resp, x.last, nil
}

// checkRetry is retryablehttp's CheckRetry hook.
func (x *exchange) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	x.last = x.c.profile.classify(ctx, resp, err)
	if resp != nil {
		x.c.answered.Store(true)
	}
	if x.c.hooks.OnRequest != nil {
		ev := RequestEvent{Key: x.key, Err: err, Duration: time.Since(x.sent)}
		if resp != nil {
			ev.Status = resp.StatusCode
			ev.Method = resp.Request.Method
		}
		x.c.hooks.OnRequest(ev)
	}
	if x.last == classCreated || x.last == classExists {
		if x.retries > 0 {
			x.c.budget.Refund(x.spentTimeout)
		} else {
			x.c.budget.Success()
		}
	}
	if !x.last.retryable() {
		return false, nil
	}
	wait, stop := x.mayRetry(ctx, resp, err)
	if stop != nil {
		return false, nil
	}
	x.wait = wait
	return true, nil
}

// mayRetry decides whether the exchange may send another request after this
// answer, and after what wait. Every bound is checked before waiting.
func (x *exchange) mayRetry(ctx context.Context, resp *http.Response, err error) (time.Duration, error) {
	stop := func(e error) (time.Duration, error) { x.stopped = e; return 0, e }
	select {
	case <-x.drain:
		return stop(ErrInterrupted)
	default:
	}
	wait, err2 := x.c.policy.Next(ctx, x.requests, resp, time.Since(x.start), nil)
	if err2 != nil {
		return stop(err2)
	}
	timeout := resp == nil && isTimeout(err)
	if berr := x.c.budget.Spend(timeout); berr != nil {
		return stop(berr)
	}
	x.spentTimeout = timeout
	x.retries++
	if x.c.hooks.OnRetry != nil {
		ev := RetryEvent{Key: x.key, Retry: x.retries, Wait: wait, Err: err}
		if resp != nil {
			ev.Status = resp.StatusCode
		}
		x.c.hooks.OnRetry(ev)
	}
	return wait, nil
}

// sleep waits before a retry the exchange decided on itself (outside
// retryablehttp), listening to the context and to the drain signal.
func (x *exchange) sleep(ctx context.Context, d time.Duration) error {
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

// scrub drops the URL from a transport error (a *url.Error carries it with
// its query string), keeping the cause.
func scrub(err error) error {
	var ue *neturl.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
