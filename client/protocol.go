package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Protocol names how a deposit becomes a request and how each answer is
// classified.
type Protocol string

// The protocols of the design's table.
const (
	// ProtocolPut is a conditional create: PUT {endpoint}/{key} with
	// If-None-Match: *. 412 and a confirmed 409 mean the record exists.
	ProtocolPut Protocol = "put"
	// ProtocolIdempotencyKey is POST {endpoint} with an Idempotency-Key
	// header (IETF draft, IRI facility API). 409 means the first request
	// with this key is still in flight.
	ProtocolIdempotencyKey Protocol = "idempotency-key"
	// ProtocolWebDAV is ProtocolPut for a WebDAV server: a 409 means the
	// parent collection is missing, which stops the run. Nothing is minted:
	// the identifier is the record URL.
	ProtocolWebDAV Protocol = "webdav"
	// ProtocolS3 is PutObject with If-None-Match: * to the bucket URL
	// {endpoint}/{key} (path style), signed with AWS Signature V4 from
	// Config.AWS. 412 means the object exists; the identifier is the object
	// URL.
	ProtocolS3 Protocol = "s3"
	// ProtocolCouchDB is PUT {database}/{key} to CouchDB (or PouchDB
	// Server): 201 or 202 created, 409 exists. The payload must be a JSON
	// object; the identifier is the document URL.
	ProtocolCouchDB Protocol = "couchdb"
)

// ParseProtocol returns the protocol named s; "" is ProtocolPut.
func ParseProtocol(s string) (Protocol, error) {
	switch Protocol(s) {
	case "", ProtocolPut:
		return ProtocolPut, nil
	case ProtocolIdempotencyKey, ProtocolWebDAV, ProtocolS3, ProtocolCouchDB, ProtocolDataCite:
		return Protocol(s), nil
	}
	return "", fmt.Errorf("unknown protocol %q: want put, idempotency-key, webdav, s3, couchdb or datacite", s)
}

// class is what an answer means for a deposit, per the protocol table.
type class int

const (
	classCreated   class = iota // the record was created by this request
	classExists                 // the server says the record already exists
	classConflict               // put 409: exists only if a read-back finds it
	classRetry                  // the operation did not happen (429, 503, in flight): retry
	classAmbiguous              // it may have happened (5xx, timeout, dropped): retry, same key
	classTerminal               // refused for good: record the failure
	classStop                   // about every item: stop the run
	classCanceled               // our own context ended
)

func (c class) retryable() bool { return c == classRetry || c == classAmbiguous }

// profile says how a deposit becomes a request and what each answer means
// for one kind of target; the engine (keys, store, retries, budget) is the
// same for all. Profiles are stateless values; embed baseProfile for the
// defaults of a minting, unconditional target and override what differs.
type profile interface {
	// request returns the write for key: method, URL, headers and the
	// bytes to send, made from the canonical body.
	request(c *Client, key string, body []byte) (method, url string, header http.Header, send []byte, err error)
	// classify maps an answer (or a transport error) to its class.
	classify(ctx context.Context, resp *http.Response, err error) class
	// readURL is where the record of key is read back.
	readURL(c *Client, key string) string
	// idPointers are the JSON Pointers tried, in order, for the identifier
	// in an answer when the user names none.
	idPointers() []string
	// mints reports whether the server mints identifiers. When it does not
	// (a storage target), the record URL is the identifier and nothing is
	// read back.
	mints() bool
	// keepsFirstBody reports whether the exact body first sent for a key
	// must be kept and re-sent on every retry, after a restart too.
	keepsFirstBody() bool
	// conditional reports whether the write is a conditional create, so a
	// 200 or 204 suggests the server ignored the condition.
	conditional() bool
	// checkExisting inspects a record read back after an "exists" answer
	// and returns an error when it is not ours (a foreign record at our
	// name); nil when it is ours or the profile cannot tell.
	checkExisting(key string, answer []byte) error
}

// newProfile returns the profile of a protocol.
func newProfile(p Protocol) profile {
	switch p {
	case ProtocolIdempotencyKey:
		return idempotencyKeyProfile{}
	case ProtocolWebDAV:
		return webdavProfile{}
	case ProtocolS3:
		return s3Profile{}
	case ProtocolCouchDB:
		return couchdbProfile{}
	case ProtocolDataCite:
		return dataciteProfile{} // New completes it: setupDataCite
	}
	return putProfile{}
}

// baseProfile holds the defaults profiles embed.
type baseProfile struct{}

func (baseProfile) readURL(c *Client, key string) string          { return c.recordURL(key) }
func (baseProfile) idPointers() []string                          { return []string{"/identifier"} }
func (baseProfile) mints() bool                                   { return true }
func (baseProfile) keepsFirstBody() bool                          { return false }
func (baseProfile) conditional() bool                             { return false }
func (baseProfile) checkExisting(key string, answer []byte) error { return nil }

// putProfile is the conditional PUT of the design's table.
type putProfile struct{ baseProfile }

func (putProfile) request(c *Client, key string, body []byte) (string, string, http.Header, []byte, error) {
	h := http.Header{}
	h.Set("If-None-Match", "*")
	h.Set("Content-Type", "application/json")
	return http.MethodPut, c.recordURL(key), h, body, nil
}

func (putProfile) classify(ctx context.Context, resp *http.Response, err error) class {
	if err == nil && resp.StatusCode == http.StatusPreconditionFailed {
		return classExists
	}
	if err == nil && resp.StatusCode == http.StatusConflict {
		return classConflict
	}
	return classifyCommon(ctx, resp, err)
}

func (putProfile) conditional() bool { return true }

// idempotencyKeyProfile is POST with an Idempotency-Key (IETF draft, IRI).
type idempotencyKeyProfile struct{ baseProfile }

func (idempotencyKeyProfile) request(c *Client, key string, body []byte) (string, string, http.Header, []byte, error) {
	h := http.Header{}
	h.Set("Idempotency-Key", idempotencyKey(c.endpoint, key, c.secret))
	h.Set("Content-Type", "application/json")
	return http.MethodPost, c.endpoint, h, body, nil
}

func (idempotencyKeyProfile) classify(ctx context.Context, resp *http.Response, err error) class {
	if err == nil {
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300 &&
			strings.EqualFold(resp.Header.Get("Idempotency-Key-Reply"), "hit"):
			// The server replayed the result of an earlier request.
			return classExists
		case resp.StatusCode == http.StatusConflict:
			// The first request with this key is still in flight.
			return classRetry
		}
	}
	return classifyCommon(ctx, resp, err)
}

func (idempotencyKeyProfile) idPointers() []string { return []string{"/id", "/identifier"} }
func (idempotencyKeyProfile) keepsFirstBody() bool { return true }

// classifyCommon is the part of the protocol table every profile shares.
func classifyCommon(ctx context.Context, resp *http.Response, err error) class {
	if err != nil {
		if ctx.Err() != nil {
			return classCanceled
		}
		return classAmbiguous
	}
	switch s := resp.StatusCode; {
	case s == http.StatusCreated || s == http.StatusOK || s == http.StatusNoContent:
		return classCreated
	case s == http.StatusUnauthorized || s == http.StatusForbidden || s == http.StatusNotFound ||
		s == http.StatusNotImplemented:
		return classStop
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		return classRetry
	case s >= 500:
		return classAmbiguous
	case s >= 400:
		return classTerminal
	default:
		// 1xx, 3xx the HTTP client did not follow, other 2xx: not a
		// confirmation. Ambiguous, so the attempt limit settles it.
		return classAmbiguous
	}
}

// isTimeout reports whether err is a timeout, which costs more retry budget
// than other failures (AWS standard retry mode).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}
