package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"

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
// server allows it. A Probe is for one Run; it is not safe for concurrent
// use.
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
}

// ProbeReport is the result of a completed probe.
type ProbeReport struct {
	Verdict ProbeVerdict
	// URL is where the probe record was written, as in Probe.URL.
	URL string
	// First and Second are the statuses of the two writes.
	First, Second int
	// Deleted reports that the probe record was removed afterwards.
	// DeleteStatus is the answer to the removal (0 when none came), and
	// DeleteProblem says why it failed, if it did.
	Deleted       bool
	DeleteStatus  int
	DeleteProblem string
}

// NewProbe prepares a probe of cfg.Target, whose driver must be a
// driver.Prober (the built-in put, webdav, s3 and couchdb targets; the
// others have no conditional create to probe). It uses Target,
// Header and HTTPClient; the other fields are ignored, and no store is
// needed. Nothing is sent before Run.
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
	p := &Probe{Body: body, step: steps[len(steps)-1], prober: prober, header: cfg.Header.Clone()}
	p.http, _ = newHTTPClient(cfg.HTTPClient, drv, -1, false)
	req, err := p.step.Build(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	p.URL = driver.RedactURL(req.URL)
	return p, nil
}

// Run writes the probe record twice and deletes it. A nil error comes with
// a verdict. Otherwise the probe could not tell: the error wraps ErrStopRun
// (credentials, endpoint, a missing collection), ErrTerminal (the server
// refused the record) or ErrUnresolved (no answer, a server error), and
// carries the *HTTPError when there was an answer. The record is deleted
// whenever it may have been created.
func (p *Probe) Run(ctx context.Context) (ProbeReport, error) {
	rep := ProbeReport{URL: p.URL}
	first, err := p.write(ctx)
	rep.First = first.status
	if err != nil {
		if first.status != 0 && first.status < 300 {
			p.remove(ctx, &rep, first)
		}
		return rep, err
	}
	if first.class != driver.Created {
		return rep, fmt.Errorf("%w: the first write of a new name was answered as if the record existed "+
			"(%d): the server refuses every conditional create here, or this name was taken: %w", ErrStopRun, first.status, first.herr)
	}
	second, err := p.write(ctx)
	rep.Second = second.status
	last := first
	switch {
	case err != nil:
	case second.class == driver.Created:
		rep.Verdict = ProbeIgnored
		last = second
	case second.class == driver.Exists:
		rep.Verdict = ProbeHonoured
	case second.class == driver.Conflict:
		// put: a 409 is "exists" only if the record reads back.
		found, rerr := p.readBack(ctx)
		switch {
		case rerr != nil:
			err = rerr
		case found:
			rep.Verdict = ProbeHonoured
		default:
			err = fmt.Errorf("%w: the second write was answered 409 Conflict but the record "+
				"does not read back: a deposit would retry such an item and leave it unresolved: %w", ErrUnresolved, second.herr)
		}
	default:
		err = fmt.Errorf("%w: the second write was answered %d: neither created nor exists: %w",
			ErrUnresolved, second.status, second.herr)
	}
	p.remove(ctx, &rep, last)
	return rep, err
}

// probeAnswer is one answer to a probe write.
type probeAnswer struct {
	status int
	class  class
	answer answer
	herr   *HTTPError
}

// write sends the probe record once, without retries, and judges the
// answer as a deposit would.
func (p *Probe) write(ctx context.Context) (probeAnswer, error) {
	req, err := p.step.Build(nil)
	if err != nil {
		return probeAnswer{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	a := p.send(ctx, req.Method, req.URL, req.Header, req.Body)
	if a.Err != nil {
		if ctx.Err() != nil {
			return probeAnswer{class: driver.Canceled}, fmt.Errorf("%w: %w", ErrInterrupted, scrub(a.Err))
		}
		return probeAnswer{class: driver.Ambiguous}, fmt.Errorf("%w: %s %s: no answer from the endpoint: %w", ErrUnresolved, req.Method, p.URL, scrub(a.Err))
	}
	v := p.step.Judge(a)
	pa := probeAnswer{status: a.Status, class: v.Class, answer: a, herr: answerError(req.Method, a, v.Problem)}
	switch v.Class {
	case driver.Created, driver.Exists, driver.Conflict:
		return pa, nil
	case driver.Stop:
		return pa, fmt.Errorf("%w: %w", ErrStopRun, pa.herr)
	case driver.Terminal:
		return pa, fmt.Errorf("%w: %w", ErrTerminal, pa.herr)
	default:
		return pa, fmt.Errorf("%w: %w", ErrUnresolved, pa.herr)
	}
}

// send sends one request without retries, the caller's headers added.
func (p *Probe) send(ctx context.Context, method, u string, header http.Header, body []byte) answer {
	a := answer{URL: u}
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		a.Err = err
		return a
	}
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	if header == nil {
		header = http.Header{}
	}
	for name, values := range p.header {
		if _, set := header[name]; !set {
			header[name] = values
		}
	}
	req.Header = header
	resp, err := p.http.Do(req)
	if err != nil {
		a.Err = err
		return a
	}
	a.Status, a.Header = resp.StatusCode, resp.Header
	a.Body, _ = readAnswer(resp, false)
	return a
}

// readBack reports whether the probe record reads back, as the deposit's
// check would find it.
func (p *Probe) readBack(ctx context.Context) (bool, error) {
	if p.step.Check == nil {
		return false, nil
	}
	req, err := p.step.Check.Build(nil)
	if err != nil {
		return false, err
	}
	a := p.send(ctx, req.Method, req.URL, req.Header, nil)
	if a.Err != nil {
		return false, fmt.Errorf("%w: read-back: %w", ErrUnresolved, scrub(a.Err))
	}
	return p.step.Check.Judge(a).Kind == driver.Present, nil
}

// remove deletes the probe record where the server allows it, with the
// request the driver builds from the answer that created it (CouchDB
// needs the revision it carries).
func (p *Probe) remove(ctx context.Context, rep *ProbeReport, created probeAnswer) {
	req, err := p.prober.ProbeRemoval(created.answer)
	if err != nil {
		rep.DeleteProblem = err.Error()
		return
	}
	a := p.send(context.WithoutCancel(ctx), req.Method, req.URL, req.Header, nil)
	if a.Err != nil {
		rep.DeleteProblem = scrub(a.Err).Error()
		return
	}
	rep.DeleteStatus = a.Status
	if a.Status >= 200 && a.Status < 300 {
		rep.Deleted = true
		return
	}
	rep.DeleteProblem = answerError(http.MethodDelete, a, "").Error()
}
