package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
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

	c    *Client
	name string
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

// NewProbe prepares a probe of cfg's endpoint. It uses Endpoint, Protocol
// (put, webdav, s3 or couchdb: the others have no conditional create to
// probe), Header, HTTPClient and AWS; the other fields are ignored, and no
// store is needed. Nothing is sent before Run.
func NewProbe(cfg Config) (*Probe, error) {
	proto, err := ParseProtocol(string(cfg.Protocol))
	if err != nil {
		return nil, err
	}
	switch proto {
	case ProtocolPut, ProtocolWebDAV, ProtocolS3, ProtocolCouchDB:
	default:
		return nil, fmt.Errorf("probe: protocol %s has no conditional create to probe: use put, webdav, s3 or couchdb", proto)
	}
	endpoint, err := normalizeEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	base := cfg.HTTPClient
	if proto == ProtocolS3 {
		if base, err = signingHTTPClient(base, cfg.AWS); err != nil {
			return nil, err
		}
	}
	c := &Client{
		endpoint: endpoint,
		protocol: proto,
		profile:  newProfile(proto),
		header:   cfg.Header.Clone(),
		http:     newHTTPClient(base, 0),
	}
	var random [8]byte
	_, _ = rand.Read(random[:]) // never fails (crypto/rand)
	name := "deposit-probe-" + hex.EncodeToString(random[:])
	body, _ := json.Marshal(map[string]string{
		"deposit-probe": "written twice by `deposit probe` to check that this endpoint refuses a second conditional create; safe to delete",
		"name":          name,
	})
	return &Probe{URL: redactURL(c.recordURL(name)), Body: body, c: c, name: name}, nil
}

// Run writes the probe record twice and deletes it. A nil error comes with
// a verdict. Otherwise the probe could not tell: the error wraps ErrStopRun
// (credentials, endpoint, a missing collection), ErrTerminal (the server
// refused the record) or ErrUnresolved (no answer, a server error), carries
// the *HTTPError when there was an answer, and says what the answer means.
// The record is deleted whenever it may have been created.
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
	if first.class != classCreated {
		return rep, p.explain(first, fmt.Errorf("%w: the first write of a new name was answered as if the record existed "+
			"(%d): the server refuses every conditional create here, or this name was taken", ErrStopRun, first.status))
	}
	second, err := p.write(ctx)
	rep.Second = second.status
	last := first
	switch {
	case err != nil:
	case second.class == classCreated:
		rep.Verdict = ProbeIgnored
		last = second
	case second.class == classExists:
		rep.Verdict = ProbeHonoured
	case second.class == classConflict:
		// put: a 409 is "exists" only if the record reads back.
		found, rerr := p.readBack(ctx)
		switch {
		case rerr != nil:
			err = rerr
		case found:
			rep.Verdict = ProbeHonoured
		default:
			err = p.explain(second, fmt.Errorf("%w: the second write was answered 409 Conflict but the record "+
				"does not read back: deposit would retry such an item and leave it unresolved", ErrUnresolved))
		}
	default:
		err = p.explain(second, fmt.Errorf("%w: the second write was answered %d: neither created nor exists",
			ErrUnresolved, second.status))
	}
	p.remove(ctx, &rep, last)
	return rep, err
}

// probeAnswer is one answer to a probe write.
type probeAnswer struct {
	status int
	class  class
	body   []byte
	herr   *HTTPError
}

// write sends the probe record once, without retries, and classifies the
// answer as a deposit would.
func (p *Probe) write(ctx context.Context) (probeAnswer, error) {
	method, u, header, body, err := p.c.profile.request(p.c, p.name, p.Body)
	if err != nil {
		return probeAnswer{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for name, values := range p.c.header {
		header[name] = values
	}
	resp, err := p.send(ctx, method, u, header, body)
	cls := p.c.profile.classify(ctx, resp, err)
	if err != nil {
		if cls == classCanceled {
			return probeAnswer{class: cls}, fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		return probeAnswer{class: cls}, fmt.Errorf("%w: %s %s: %w: no answer from the endpoint: check the URL, "+
			"the network and that the server is running", ErrUnresolved, method, p.URL, scrub(err))
	}
	a := probeAnswer{status: resp.StatusCode, class: cls}
	a.body = readAnswer(resp)
	a.herr = p.c.httpError(method, u, resp, a.body)
	switch cls {
	case classCreated, classExists, classConflict:
		return a, nil
	case classStop:
		return a, p.explain(a, fmt.Errorf("%w: %w", ErrStopRun, a.herr))
	case classTerminal:
		return a, p.explain(a, fmt.Errorf("%w: %w", ErrTerminal, a.herr))
	default:
		return a, p.explain(a, fmt.Errorf("%w: %w", ErrUnresolved, a.herr))
	}
}

// explain adds what an answer's status means for the user to err.
func (p *Probe) explain(a probeAnswer, err error) error {
	var meaning string
	switch s := a.status; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		meaning = "the server refused the credentials: give them with --header 'Authorization: ...'"
		if p.c.protocol == ProtocolS3 {
			meaning = "the server refused the credentials or the signature: check AWS_ACCESS_KEY_ID, " +
				"AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION"
		}
	case s == http.StatusNotFound:
		meaning = "the endpoint does not exist: check --endpoint"
		switch p.c.protocol {
		case ProtocolS3:
			meaning = "no such bucket: --endpoint must be the bucket URL, path style (https://host/bucket)"
		case ProtocolCouchDB:
			meaning = "no such database: --endpoint must be the database URL, and the database must exist"
		}
	case s == http.StatusMethodNotAllowed:
		meaning = "the server does not accept PUT at this URL: it is not a writable collection"
	case s == http.StatusNotImplemented:
		meaning = "the server does not support this request"
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		meaning = "the server is busy or unavailable: try again later"
	case s >= 500 && (p.c.protocol == ProtocolPut || p.c.protocol == ProtocolWebDAV):
		meaning = "the server failed: check that the collection exists (nginx answers 500 for a " +
			"missing directory), then try again and look at the server's logs"
	case s >= 500:
		meaning = "the server failed: try again later, and look at its logs"
	case s >= 400 && a.class == classTerminal:
		meaning = "the server refused the probe record itself"
	}
	if meaning == "" {
		return err
	}
	return fmt.Errorf("%w (%s)", err, meaning)
}

// send sends one request without retries.
func (p *Probe) send(ctx context.Context, method, u string, header http.Header, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	req.Header = header
	return p.c.http.Do(req)
}

// readBack reports whether the probe record reads back.
func (p *Probe) readBack(ctx context.Context) (bool, error) {
	resp, err := p.send(ctx, http.MethodGet, p.c.recordURL(p.name), p.plainHeader(), nil)
	if err != nil {
		return false, fmt.Errorf("%w: read-back: %w", ErrUnresolved, scrub(err))
	}
	readAnswer(resp)
	return resp.StatusCode == http.StatusOK, nil
}

// remove deletes the probe record where the server allows it. CouchDB needs
// the revision, which the create answer carries.
func (p *Probe) remove(ctx context.Context, rep *ProbeReport, created probeAnswer) {
	u := p.c.recordURL(p.name)
	if p.c.protocol == ProtocolS3 {
		u = s3ObjectURL(p.c, p.name)
	}
	if p.c.protocol == ProtocolCouchDB {
		var doc struct {
			Rev string `json:"rev"`
		}
		if json.Unmarshal(created.body, &doc) != nil || doc.Rev == "" {
			rep.DeleteProblem = "the create answer carried no revision to delete"
			return
		}
		u += "?rev=" + url.QueryEscape(doc.Rev)
	}
	resp, err := p.send(context.WithoutCancel(ctx), http.MethodDelete, u, p.plainHeader(), nil)
	if err != nil {
		rep.DeleteProblem = scrub(err).Error()
		return
	}
	answer := readAnswer(resp)
	rep.DeleteStatus = resp.StatusCode
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		rep.Deleted = true
		return
	}
	rep.DeleteProblem = p.c.httpError(http.MethodDelete, u, resp, answer).Error()
}

// plainHeader is the user's headers, for the read-back and the removal.
func (p *Probe) plainHeader() http.Header {
	h := p.c.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	return h
}
