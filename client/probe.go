package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// ProbeVerdict is what a probe found out about an endpoint's conditional
// creates.
type ProbeVerdict string

// Verdicts of a probe that completed.
const (
	// ProbeHonoured: the first write created the probe record and the
	// second was answered "exists". The server itself prevents duplicates.
	ProbeHonoured ProbeVerdict = "honoured"
	// ProbeIgnored: both writes were accepted. The server ignores the
	// condition (If-None-Match), so only the local store prevents
	// duplicates.
	ProbeIgnored ProbeVerdict = "ignored"
)

// Probe checks, before a real batch, whether an endpoint honours the
// conditional create of its protocol: it writes a clearly named record
// twice and looks at the two answers, then deletes the record where the
// server allows it. Each request is retried as a deposit retries its
// step, within Config.Retry: a write whose answer was lost is sent again
// as the same conditional create, so the probe never makes a record
// twice where the server honours the condition. A Probe is for one Run;
// it is not safe for concurrent use.
type Probe struct {
	// URL is where the probe record is written (no credentials, no query):
	// {endpoint}/deposit-probe-{16 random hex digits}.
	URL string
	// Body is the JSON document written.
	Body []byte

	step   step
	prober driver.Prober
	http   *http.Client
	header http.Header
	policy backoff.Policy
	// record is the record's URL as requested (Probe.URL is redacted).
	record string
	// answered says that some request of this Run was answered: a dial
	// that fails then is retried, not taken for an unreachable endpoint.
	answered bool
}

// ProbeReport is the result of a completed probe.
type ProbeReport struct {
	Verdict ProbeVerdict
	// URL is where the probe record was written, as in Probe.URL.
	URL string
	// First and Second are the statuses of the answers that settled the
	// two writes (0 when none came).
	First, Second int
	// FirstTries and SecondTries describe the answer to each attempt of
	// the two writes, in order, such as "no answer (EOF)" or
	// "412 Precondition Failed"; the last is the one First or Second gives.
	FirstTries, SecondTries []string
	// FirstFound says that the first write was answered "exists" after an
	// attempt whose answer was lost: that attempt made the record.
	FirstFound bool
	// Deleted reports that no probe record is left: the removal succeeded,
	// or a read of the record found none (after a removal whose answer was
	// lost, or where no write had confirmed the record). DeleteStatus is
	// the last answer to the removal (0 when none was sent or none came).
	// DeleteRefused says the server does not allow the removal at all: it
	// answered 401, 403, 405 or 501. DeleteProblem says why the record is
	// left, when it is.
	Deleted       bool
	DeleteStatus  int
	DeleteRefused bool
	DeleteProblem string
}

// NewProbe prepares a probe of cfg.Target, whose driver must be a
// driver.Prober (the built-in put, webdav, s3 and couchdb targets; the
// others have no conditional create to probe). It uses Target, Header,
// HTTPClient and Retry (zero fields from DefaultRetry, as a deposit); the
// other fields are ignored, and no store is needed. Nothing is sent
// before Run.
func NewProbe(cfg Config) (*Probe, error) {
	if cfg.Target == nil {
		return nil, fmt.Errorf("%w: Config.Target is required", ErrConfig)
	}
	drv, err := targetDriver(cfg.Target)
	if err != nil {
		return nil, err
	}
	prober, ok := drv.(driver.Prober)
	if !ok {
		return nil, fmt.Errorf("%w: %T has no conditional create to probe: probe put, webdav, s3 or couchdb", ErrConfig, cfg.Target)
	}
	for name := range cfg.Header {
		if drv.Guards(name) {
			return nil, errHeaderGuarded(name)
		}
	}
	var random [8]byte
	_, _ = rand.Read(random[:]) // never fails (crypto/rand)
	name := "deposit-probe-" + hex.EncodeToString(random[:])
	body, _ := json.Marshal(map[string]string{
		"deposit-probe": "written twice by a deposit probe to check that this endpoint refuses a second conditional create; safe to delete",
		"name":          name,
	})
	steps, err := drv.Steps(canonical.Keyed{Key: name, Body: body}, "")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p := &Probe{Body: body, step: steps[len(steps)-1], prober: prober, header: cfg.Header.Clone(), policy: retryPolicy(cfg.Retry)}
	p.http, _ = newHTTPClient(cfg.HTTPClient, drv, -1, false)
	req, err := p.step.Build(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p.record, p.URL = req.URL, driver.RedactURL(req.URL)
	return p, nil
}

// Run writes the probe record twice and deletes it. A nil error comes with
// a verdict. Otherwise the probe could not tell: the error wraps ErrStopRun
// (credentials, endpoint, a missing collection), ErrTerminal (the server
// refused the record) or ErrUnresolved (no answer, a server error, once
// the retries are spent), and carries the *HTTPError when there was an
// answer. The record is deleted whenever it may have been created.
//
// The second write decides: the record exists before it is sent, so any
// attempt of it answered "created" says the condition is ignored, and one
// answered "exists" that it is honoured, whatever the attempts before it
// whose answers were lost. The first write only has to leave the record
// there: answered "exists" after an attempt whose answer was lost, it is
// that attempt's record.
func (p *Probe) Run(ctx context.Context) (ProbeReport, error) {
	rep := ProbeReport{URL: p.URL}
	first, err := p.write(ctx)
	rep.First, rep.FirstTries = first.last.Status, first.tries
	if err != nil {
		if first.created != nil || first.ambiguous {
			p.remove(ctx, &rep, first.created)
		}
		return rep, err
	}
	if first.cls == driver.Exists {
		if !first.ambiguous {
			return rep, fmt.Errorf("%w: the first write of a new name was answered as if the record existed "+
				"(%d): the server refuses every conditional create here, or this name was taken: %w", ErrStopRun, first.last.Status, first.herr)
		}
		rep.FirstFound = true
	}
	second, err := p.write(ctx)
	rep.Second, rep.SecondTries = second.last.Status, second.tries
	made := first.created
	switch {
	case err != nil:
	case second.cls == driver.Created:
		rep.Verdict = ProbeIgnored
		made = second.created
	default:
		rep.Verdict = ProbeHonoured
	}
	p.remove(ctx, &rep, made)
	return rep, err
}

// probeWrite is what one write of the probe record came to.
type probeWrite struct {
	last answer
	// cls is Created or Exists (a 409 the record reads back after
	// counts), or the class of the answer that ended the write.
	cls  class
	herr *HTTPError
	// created is the answer that said "created", when one did: the
	// removal is built from it.
	created *answer
	// ambiguous says that an attempt may have taken effect unanswered.
	ambiguous bool
	tries     []string
}

// write sends the probe record, as the same conditional create on every
// attempt, until an answer settles it or the retries are spent, and
// judges each answer as a deposit would.
func (p *Probe) write(ctx context.Context) (probeWrite, error) {
	req, err := p.step.Build(nil)
	if err != nil {
		return probeWrite{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	x := p.exchange()
	for {
		a, v, err := x.send(ctx, req, p.step.Judge)
		w := probeWrite{last: a, cls: v.Class, ambiguous: x.ambiguous, tries: x.tries}
		if a.Err == nil {
			w.herr = answerError(req.Method, a, v.Problem)
		}
		if err != nil {
			return w, err
		}
		switch v.Class {
		case driver.Created:
			w.created = &a
			return w, nil
		case driver.Exists:
			return w, nil
		case driver.Stop:
			return w, fmt.Errorf("%w: %w", ErrStopRun, w.reason())
		case driver.Conflict:
			// put: a 409 is "exists" only if the record reads back;
			// otherwise it is retried like a 503.
			found, err := p.readBack(ctx)
			if err != nil {
				return w, err
			}
			if found {
				w.cls = driver.Exists
				return w, nil
			}
			if err := x.retry(ctx, a); err != nil {
				return w, fmt.Errorf("%w after %d attempts: %w: answered 409 Conflict, but the record "+
					"does not read back: a deposit would retry such an item and leave it unresolved: %w", ErrUnresolved, x.sent, err, w.herr)
			}
		default:
			return w, fmt.Errorf("%w: %w", ErrTerminal, w.reason())
		}
	}
}

// reason is the last answer as an error: its *HTTPError, or the transport
// error when none came.
func (w probeWrite) reason() error {
	if w.herr != nil {
		return w.herr
	}
	return scrub(w.last.Err)
}

// readBack reports whether the probe record reads back, as the deposit's
// check would find it.
func (p *Probe) readBack(ctx context.Context) (bool, error) {
	if p.step.Check == nil {
		return false, nil
	}
	req, err := p.step.Check.Build(nil)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var f finding
	_, _, err = p.exchange().send(ctx, req, func(a answer) verdict {
		f = p.step.Check.Judge(a)
		if f.Kind == driver.Unknown {
			return verdict{Class: f.Class}
		}
		return verdict{Class: driver.Created}
	})
	if err != nil {
		return false, fmt.Errorf("read-back: %w", err)
	}
	return f.Kind == driver.Present, nil
}

// remove deletes the probe record where the server allows it, with the
// request the driver builds from the answer that created it (CouchDB
// needs the revision it carries) or, when no answer said "created", from
// a read of the record, which also tells whether there is one to delete.
// The DELETE is retried like a write; when it is not answered with
// success, a read of the record says whether it is gone (a DELETE whose
// answer was lost may have removed it). The requests of the removal share
// one elapsed budget. After an interruption each is sent once, unretried.
func (p *Probe) remove(ctx context.Context, rep *ProbeReport, created *answer) {
	policy := p.policy
	if ctx.Err() != nil {
		ctx, policy.MaxAttempts = context.WithoutCancel(ctx), 1
	}
	start := time.Now()
	exchange := func() *probeExchange { return &probeExchange{p: p, policy: policy, start: start} }
	from := answer{URL: p.record}
	if created != nil {
		from = *created
	} else {
		a, err := p.read(ctx, exchange())
		switch {
		case err == nil && gone(a):
			rep.Deleted = true
			return
		case err == nil && a.Status < 300:
			from = a
		}
	}
	req, err := p.prober.ProbeRemoval(from)
	if err != nil {
		rep.DeleteProblem = err.Error()
		return
	}
	a, v, err := exchange().send(ctx, req, func(a answer) verdict { return verdict{Class: driver.Classify(a)} })
	rep.DeleteStatus = a.Status
	switch {
	case err == nil && v.Class == driver.Created:
		rep.Deleted = true
		return
	case err == nil && refusesRemoval(a.Status):
		rep.DeleteRefused = true
		rep.DeleteProblem = answerError(req.Method, a, "").Error()
		return
	}
	if after, rerr := p.read(ctx, exchange()); rerr == nil && gone(after) {
		rep.Deleted = true
		return
	}
	if err == nil {
		err = answerError(req.Method, a, "")
	}
	rep.DeleteProblem = err.Error()
}

// refusesRemoval reports whether a DELETE answered with status is not
// allowed at all: the method (405, 501) or these credentials (401, 403).
func refusesRemoval(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// read is a GET of the probe record, retried within x.
func (p *Probe) read(ctx context.Context, x *probeExchange) (answer, error) {
	req := request{Method: http.MethodGet, URL: p.record, Full: true}
	a, _, err := x.send(ctx, req, func(a answer) verdict {
		if gone(a) || (a.Err == nil && a.Status < 300) {
			return verdict{Class: driver.Created}
		}
		return verdict{Class: driver.Classify(a)}
	})
	return a, err
}

// gone reports whether a read of the probe record says there is none.
func gone(a answer) bool {
	return a.Err == nil && (a.Status == http.StatusNotFound || a.Status == http.StatusGone)
}

// exchange starts the retry state of one request of the probe.
func (p *Probe) exchange() *probeExchange {
	return &probeExchange{p: p, policy: p.policy, start: time.Now()}
}

// probeExchange is the retry state of one request of the probe: its
// attempts count against the policy's attempt limit and its time since
// start against the elapsed limit, as one step's do in a deposit. A probe
// is one item, so there is no retry budget.
type probeExchange struct {
	p      *Probe
	policy backoff.Policy
	start  time.Time
	sent   int
	// ambiguous says that an attempt may have taken effect unanswered:
	// no answer after the request left, or a 500, 502 or 504.
	ambiguous bool
	tries     []string
}

// send sends req until judge gives its answer a class that is not
// retried (driver.Retry, driver.Ambiguous), waiting between attempts as
// the policy says. The error says why retrying stopped: ErrInterrupted
// when ctx ended, ErrUnresolved otherwise, with the last answer.
func (x *probeExchange) send(ctx context.Context, req request, judge func(answer) verdict) (answer, verdict, error) {
	for {
		x.sent++
		a := x.p.send(ctx, req.Method, req.URL, req.Header, req.Body, req.Full)
		if a.Err != nil && ctx.Err() != nil {
			return a, verdict{Class: driver.Canceled}, fmt.Errorf("%w: %w", ErrInterrupted, scrub(a.Err))
		}
		v := judge(a)
		x.tries = append(x.tries, describe(a))
		if !v.Class.Retryable() {
			return a, v, nil
		}
		unreachable := a.Err != nil && connectionNeverMade(a.Err)
		x.ambiguous = x.ambiguous || (v.Class == driver.Ambiguous && !unreachable)
		if unreachable && !x.p.answered {
			return a, v, fmt.Errorf("%w: %s %s: no answer from the endpoint: %w", ErrUnresolved, req.Method, driver.RedactURL(req.URL), scrub(a.Err))
		}
		if err := x.retry(ctx, a); err != nil {
			if errors.Is(err, ErrInterrupted) {
				return a, v, err
			}
			last := error(answerError(req.Method, a, v.Problem))
			if a.Err != nil {
				last = fmt.Errorf("%s %s: no answer: %w", req.Method, driver.RedactURL(req.URL), scrub(a.Err))
			}
			return a, v, fmt.Errorf("%w after %d attempts: %w: %w", ErrUnresolved, x.sent, err, last)
		}
	}
}

// retry waits before the next attempt after a, within the policy: the
// server's Retry-After, capped, or a jittered backoff. An error says why
// no attempt follows.
func (x *probeExchange) retry(ctx context.Context, a answer) error {
	var resp *http.Response
	if a.Err == nil {
		resp = &http.Response{StatusCode: a.Status, Header: a.Header}
	}
	wait, err := x.policy.Next(ctx, x.sent, resp, time.Since(x.start), nil)
	if err == nil {
		err = backoff.Sleep(ctx, wait)
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	return err
}

// describe is one attempt's answer for the report: "201 Created", or
// "no answer (EOF)".
func describe(a answer) string {
	if a.Err != nil {
		return "no answer (" + scrub(a.Err).Error() + ")"
	}
	return strconv.Itoa(a.Status) + " " + http.StatusText(a.Status)
}

// send sends one request, the caller's headers added.
func (p *Probe) send(ctx context.Context, method, u string, header http.Header, body []byte, full bool) answer {
	a := answer{URL: u}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		a.Err = err
		return a
	}
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	h := header.Clone()
	if h == nil {
		h = http.Header{}
	}
	for name, values := range p.header {
		if _, set := h[name]; !set {
			h[name] = values
		}
	}
	req.Header = h
	resp, err := p.http.Do(req)
	if err != nil {
		a.Err = err
		return a
	}
	p.answered = true
	a.Status, a.Header = resp.StatusCode, resp.Header
	a.Body, _ = readAnswer(resp, full)
	return a
}
