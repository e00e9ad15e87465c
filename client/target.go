package client

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

// Target is where deposits go and how each one becomes requests: one of
// [Put], [IdempotencyKey], [WebDAV], [S3], [CouchDB], [DataCite] and
// [Invenio], each a struct of its own options, or a target of any package
// written against the step contract of package driver. A target turns a
// payload into the steps of its deposit and judges the answers; the
// [Client] decides when to send, wait, record and report. Target values are
// read-only once given to [New].
type Target interface {
	// Driver checks the target's options and returns what the engine
	// drives; an error is a configuration error, reported by New.
	Driver() (driver.Driver, error)
}

// Put is a repository that takes a conditional create: PUT {Endpoint}/{key}
// with If-None-Match: *. 201 is created; 412, and a 409 whose read-back
// (GET {Endpoint}/{key}) finds the record, mean it exists.
type Put struct {
	// Endpoint is the collection URL. Required.
	Endpoint string
	// IDPointer is the JSON Pointer of the identifier in an answer;
	// default /identifier. Without one, the identifier is Location, else
	// the record URL. A pointer set here that names no string in a JSON
	// answer is logged once as a warning.
	IDPointer string
}

// IdempotencyKey is a repository that takes POST {Endpoint} with an
// Idempotency-Key header (IETF draft, IRI facility API): the UUIDv5 of the
// endpoint and the key, the same bytes on every retry and after a restart.
// The exact body first sent is kept in the store and re-sent on every retry.
// 409 means the first request with this key is still in flight.
type IdempotencyKey struct {
	// Endpoint is the URL POSTed to. Required.
	Endpoint string
	// IDPointer is the JSON Pointer of the identifier in an answer;
	// default /id, then /identifier.
	IDPointer string
	// KeySecret, when set, makes Idempotency-Key values an HMAC of the
	// content key, so they cannot be guessed from public content.
	KeySecret []byte
	// Retention is how long the server keeps completed idempotency keys
	// (IRI reference: 24 h, the default). Resuming an uncertain deposit
	// older than this logs a warning: the server may no longer recognise
	// the key.
	Retention time.Duration
	// InFlightWait is the least wait after a 409 (the first request with
	// this key is still in flight) that carries no Retry-After; default 1 s.
	// Such retries spend no attempt: they run until the first request
	// finishes or the retry policy's MaxElapsed is reached, so a server lock
	// held for tens of seconds (IRI: up to 60 s) is waited out.
	InFlightWait time.Duration
}

type putDriver struct {
	endpoint string
	pointers []string
	// userPointer is the IDPointer the user set, "" for the default.
	userPointer string
}

func (t Put) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("Put.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	ptrs, err := driver.Pointers(t.IDPointer, "/identifier")
	return putDriver{endpoint: ep, pointers: ptrs, userPointer: t.IDPointer}, err
}

func (d putDriver) Name() string              { return driver.TargetName(protocol.Put, d.endpoint) }
func (d putDriver) StepTargets() []string     { return nil }
func (d putDriver) SecretFingerprint() string { return "" }
func (d putDriver) Guards(name string) bool   { return driver.Guarded(name) }

func (d putDriver) Steps(k canonical.Keyed, _ string) ([]step, error) {
	url := driver.RecordURL(d.endpoint, k.Key)
	return []step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build:    conditionalPut(url, k.Body),
		Judge:    conditionalJudge(d.pointers, d.userPointer, credential.Strip(url)),
		Check:    readBack(url, d.pointers, d.userPointer, nil),
		Fallback: credential.Strip(url),
	}}, nil
}

// conditionalPut builds the conditional create of body at url: PUT with
// If-None-Match: *.
func conditionalPut(url string, body []byte) func([]string) (request, error) {
	return func([]string) (request, error) {
		h := http.Header{}
		h.Set("If-None-Match", "*")
		h.Set("Content-Type", "application/json")
		return request{Method: http.MethodPut, URL: url, Header: h, Body: body, Full: true}, nil
	}
}

// conditionalJudge judges the answers to a conditional create of a
// repository that mints identifiers. userPointer is the pointer the user
// chose, if any: an answer it names nothing in is warned about.
func conditionalJudge(pointers []string, userPointer, recordURL string) func(answer) verdict {
	return func(a answer) verdict {
		if a.Err == nil {
			switch a.Status {
			case http.StatusPreconditionFailed:
				id, _ := driver.StringAt(a.Body, pointers)
				return verdict{Class: driver.Exists, ID: id, Warn: driver.MissedPointer(userPointer, a.Body)}
			case http.StatusConflict:
				return verdict{Class: driver.Conflict}
			}
		}
		v := verdict{Class: driver.Classify(a)}
		if v.Class == driver.Created {
			v.ID = driver.Identifier(a.Body, a.Header, pointers, a.URL, recordURL)
			v.Warn = driver.MissedPointer(userPointer, a.Body)
			if a.Status != http.StatusCreated {
				v.Warn = ignoredConditionWarning
			}
		}
		return v
	}
}

// ignoredConditionWarning is logged once when a conditional create is
// answered with a success other than 201.
const ignoredConditionWarning = "the server answered a conditional create with a status other than 201; it may ignore If-None-Match, and then cannot prevent duplicates"

// readBack is the check that reads a record back at url. ours, when set,
// refuses a record that is not this deposit's (a foreign record at our
// name). A read the server refuses (403, 404, 405, 410) finds nothing. A
// record userPointer (the pointer the user chose, if any) names nothing in
// is warned about.
func readBack(url string, pointers []string, userPointer string, ours func(body []byte) error) *check {
	return &check{
		Build: func([]string) (request, error) {
			h := http.Header{}
			h.Set("Accept", "application/json")
			return request{Method: http.MethodGet, URL: url, Header: h, Full: true}, nil
		},
		Judge: func(a answer) finding {
			if a.Err != nil {
				return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
			}
			switch a.Status {
			case http.StatusOK, http.StatusNoContent:
				if ours != nil {
					if err := ours(a.Body); err != nil {
						return finding{Kind: driver.Foreign, Problem: err.Error()}
					}
				}
				// A read-back that merely echoes the stored payload mints
				// nothing: no identifier, so the step's fallback (the
				// record URL) it is.
				id, _ := driver.StringAt(a.Body, pointers)
				return finding{Kind: driver.Present, ID: id, Warn: driver.MissedPointer(userPointer, a.Body)}
			case http.StatusNotFound, http.StatusGone, http.StatusForbidden, http.StatusMethodNotAllowed:
				return finding{Kind: driver.Absent, Warn: "the server refused to read a record back; using record URLs as identifiers"}
			}
			return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
		},
	}
}

type idempotencyKeyDriver struct {
	endpoint string
	pointers []string
	// userPointer is the IDPointer the user set, "" for the default.
	userPointer string
	secret      []byte
	retention   time.Duration
	inFlight    time.Duration
}

func (t IdempotencyKey) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("IdempotencyKey.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	ptrs, err := driver.Pointers(t.IDPointer, "/id", "/identifier")
	if err != nil {
		return nil, err
	}
	d := idempotencyKeyDriver{endpoint: ep, pointers: ptrs, userPointer: t.IDPointer,
		secret: append([]byte(nil), t.KeySecret...), retention: t.Retention, inFlight: t.InFlightWait}
	if d.retention <= 0 {
		d.retention = 24 * time.Hour
	}
	if d.inFlight <= 0 {
		d.inFlight = time.Second
	}
	return d, nil
}

func (d idempotencyKeyDriver) Name() string {
	return driver.TargetName(protocol.IdempotencyKey, d.endpoint)
}
func (d idempotencyKeyDriver) StepTargets() []string     { return nil }
func (d idempotencyKeyDriver) SecretFingerprint() string { return driver.SecretFingerprint(d.secret) }
func (d idempotencyKeyDriver) Guards(name string) bool   { return driver.Guarded(name) }

func (d idempotencyKeyDriver) Steps(k canonical.Keyed, _ string) ([]step, error) {
	record := credential.Strip(driver.RecordURL(d.endpoint, k.Key))
	return []step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		KeepBody: true, Retention: d.retention,
		Build: func([]string) (request, error) {
			h := http.Header{}
			h.Set("Idempotency-Key", driver.IdempotencyKey(d.endpoint, k.Key, d.secret))
			h.Set("Content-Type", "application/json")
			return request{Method: http.MethodPost, URL: d.endpoint, Header: h, Body: k.Body, Full: true}, nil
		},
		Judge: func(a answer) verdict {
			v := verdict{Class: driver.Classify(a)}
			if a.Err == nil {
				switch {
				case a.Status >= 200 && a.Status < 300 && strings.EqualFold(a.Header.Get("Idempotency-Key-Reply"), "hit"):
					// The server replayed the result of an earlier request.
					v.Class = driver.Exists
				case a.Status == http.StatusConflict:
					// The first request with this key is still in flight.
					v.Class, v.InFlight = driver.Retry, d.inFlight
				}
			}
			cls := v.Class
			if cls == driver.Created || cls == driver.Exists {
				v.ID = driver.Identifier(a.Body, a.Header, d.pointers, a.URL, record)
				v.Warn = driver.MissedPointer(d.userPointer, a.Body)
			}
			return v
		},
		Fallback: record,
	}}, nil
}

// stepsOf is the target's steps for k. A payload that is not a document
// is refused for every target: by the target's own check where it has a
// stricter one (a record), else here.
func (c *Client) stepsOf(k canonical.Keyed, dir string) ([]step, error) {
	steps, err := c.target.Steps(k, dir)
	if err != nil {
		return nil, err
	}
	if err := checkSteps(steps); err != nil {
		// The target's own mistake, the same for every item: not this
		// payload's fault.
		return nil, fmt.Errorf("%w: the target's steps break the contract: %w", ErrStopRun, err)
	}
	if err := checkDocument(k.Body); err != nil {
		return nil, err
	}
	return steps, nil
}

// checkDocument refuses a payload that is a bare JSON string, number,
// true, false or null: a target would keep it as a document or record of
// its own, which no batch of records means. An object or an array is a
// document. The targets whose payload is a record (CouchDB, DataCite,
// InvenioRDM) refuse arrays too, each in its own check.
func checkDocument(body []byte) error {
	if kind := driver.JSONKind(body); kind != "an object" && kind != "an array" {
		return fmt.Errorf("the payload is %s, not a document: want a JSON object or array", kind)
	}
	return nil
}

// errHeaderGuarded is the error for a caller's header that a target sets
// itself.
func errHeaderGuarded(name string) error {
	return fmt.Errorf("%w: Config.Header %s: the target sets this header itself to make writes exactly-once", ErrConfig, textproto.CanonicalMIMEHeaderKey(name))
}
