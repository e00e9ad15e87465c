package client

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/jsonpointer"
	"github.com/depositkit/deposit/internal/protocol"
)

// Target is where deposits go and how each one becomes requests: one of
// [Put], [IdempotencyKey], [WebDAV], [S3], [CouchDB], [DataCite] and
// [Invenio], each a struct of its own options. A target turns a payload into
// the steps of its deposit and judges the answers; the [Client] decides when
// to send, wait, record and report. Target values are read-only once given
// to [New].
type Target interface {
	// Driver checks the target's options and returns what the engine
	// drives. Targets are defined in this package only: the step contract
	// is still young.
	Driver() (driver, error)
}

// driver is a Target ready for the engine.
type driver interface {
	// Name is the store target of the deposit's own rows: the protocol and
	// the normalised endpoint (and the DOI prefix, for DataCite), built by
	// targetName so that no credential is stored.
	Name() string
	// StepTargets are the store targets of its other durable steps.
	StepTargets() []string
	// SecretFingerprint identifies a key secret that shapes the requests
	// (never the secret); "" when none does.
	SecretFingerprint() string
	// Guards reports whether the target sets header name for exactly-once,
	// so that the caller's headers may not replace it.
	Guards(name string) bool
	// Steps returns the Steps of a deposit, or an error when the target
	// cannot take the payload (nothing is recorded then).
	Steps(k canonical.Keyed, dir string) ([]step, error)
}

// transportWrapper is a driver whose requests go through a transport of its
// own (S3's signer), wrapped around the client's.
type transportWrapper interface {
	WrapTransport(next http.RoundTripper) http.RoundTripper
}

// rateSetter is a driver with a default request rate (DataCite's published
// limit), used when Config.Rate is 0.
type rateSetter interface {
	DefaultRate() float64
}

// requestPacer is a driver that holds some of its requests to a rate of
// their own (InvenioRDM's searches). pacer returns, once per client, what
// picks a request's own limiter (nil: none). Its wait comes before the
// request takes a batch's slot or starts its attempt timeout: a request
// waiting for its rate holds nothing other requests need, and has not
// begun.
type requestPacer interface {
	Pacer() func(*http.Request) *backoff.Limiter
}

// guardsConditional reports the headers every target reserves: a caller's
// If-None-Match or If-Match would change what a write means, and an
// Idempotency-Key of the caller's would replace the one derived from the
// key.
func guardsConditional(name string) bool {
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "If-None-Match", "If-Match", "Idempotency-Key":
		return true
	}
	return false
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

func (t Put) Driver() (driver, error) {
	ep, err := endpointOf("Put.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	ptrs, err := pointers(t.IDPointer, "/identifier")
	return putDriver{endpoint: ep, pointers: ptrs, userPointer: t.IDPointer}, err
}

// pointers is the user's pointer, else the defaults.
func pointers(user string, defaults ...string) ([]string, error) {
	if user == "" {
		return defaults, nil
	}
	if _, err := jsonpointer.Parse(user); err != nil {
		return nil, fmt.Errorf("%w: IDPointer %q: %v", ErrConfig, user, err)
	}
	return []string{user}, nil
}

func (d putDriver) Name() string              { return targetName(protocol.Put, d.endpoint) }
func (d putDriver) StepTargets() []string     { return nil }
func (d putDriver) SecretFingerprint() string { return "" }
func (d putDriver) Guards(name string) bool   { return guardsConditional(name) }

func (d putDriver) Steps(k canonical.Keyed, _ string) ([]step, error) {
	url := recordURL(d.endpoint, k.Key)
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
				id, _ := stringAtPointers(a.Body, pointers)
				return verdict{Class: classExists, ID: id, Warn: missedPointer(userPointer, a.Body)}
			case http.StatusConflict:
				return verdict{Class: classConflict}
			}
		}
		v := verdict{Class: classifyCommon(a)}
		if v.Class == classCreated {
			v.ID = identifierFrom(a.Body, a.Header, pointers, a.URL, recordURL)
			v.Warn = missedPointer(userPointer, a.Body)
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
				return finding{Kind: findingUnknown, Class: classifyCommon(a)}
			}
			switch a.Status {
			case http.StatusOK, http.StatusNoContent:
				if ours != nil {
					if err := ours(a.Body); err != nil {
						return finding{Kind: findingForeign, Problem: err.Error()}
					}
				}
				// A read-back that merely echoes the stored payload mints
				// nothing: no identifier, so the step's fallback (the
				// record URL) it is.
				id, _ := stringAtPointers(a.Body, pointers)
				return finding{Kind: findingPresent, ID: id, Warn: missedPointer(userPointer, a.Body)}
			case http.StatusNotFound, http.StatusGone, http.StatusForbidden, http.StatusMethodNotAllowed:
				return finding{Kind: findingAbsent, Warn: "the server refused to read a record back; using record URLs as identifiers"}
			}
			return finding{Kind: findingUnknown, Class: classifyCommon(a)}
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

func (t IdempotencyKey) Driver() (driver, error) {
	ep, err := endpointOf("IdempotencyKey.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	ptrs, err := pointers(t.IDPointer, "/id", "/identifier")
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

func (d idempotencyKeyDriver) Name() string              { return targetName(protocol.IdempotencyKey, d.endpoint) }
func (d idempotencyKeyDriver) StepTargets() []string     { return nil }
func (d idempotencyKeyDriver) SecretFingerprint() string { return secretFingerprint(d.secret) }
func (d idempotencyKeyDriver) Guards(name string) bool   { return guardsConditional(name) }

func (d idempotencyKeyDriver) Steps(k canonical.Keyed, _ string) ([]step, error) {
	record := credential.Strip(recordURL(d.endpoint, k.Key))
	return []step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		KeepBody: true, Retention: d.retention,
		Build: func([]string) (request, error) {
			h := http.Header{}
			h.Set("Idempotency-Key", idempotencyKey(d.endpoint, k.Key, d.secret))
			h.Set("Content-Type", "application/json")
			return request{Method: http.MethodPost, URL: d.endpoint, Header: h, Body: k.Body, Full: true}, nil
		},
		Judge: func(a answer) verdict {
			v := verdict{Class: classifyCommon(a)}
			if a.Err == nil {
				switch {
				case a.Status >= 200 && a.Status < 300 && strings.EqualFold(a.Header.Get("Idempotency-Key-Reply"), "hit"):
					// The server replayed the result of an earlier request.
					v.Class = classExists
				case a.Status == http.StatusConflict:
					// The first request with this key is still in flight.
					v.Class, v.InFlight = classRetry, d.inFlight
				}
			}
			cls := v.Class
			if cls == classCreated || cls == classExists {
				v.ID = identifierFrom(a.Body, a.Header, d.pointers, a.URL, record)
				v.Warn = missedPointer(d.userPointer, a.Body)
			}
			return v
		},
		Fallback: record,
	}}, nil
}

// classifyCommon is the part of the protocol table every target shares.
func classifyCommon(a answer) class {
	if a.Err != nil {
		return classAmbiguous
	}
	switch s := a.Status; {
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

// targetName is the store target of a protocol at a normalised endpoint:
// the protocol, a space and the endpoint, with the value of each credential
// in its query (?access_token=...) replaced by its digest, so that the store
// never holds a token and an endpoint without one keeps the name earlier
// versions gave it.
func targetName(proto, endpoint string) string {
	return proto + " " + credential.Digest(endpoint)
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
	if kind := jsonKind(body); kind != "an object" && kind != "an array" {
		return fmt.Errorf("the payload is %s, not a document: want a JSON object or array", kind)
	}
	return nil
}

// jsonKind names the kind of the JSON value in canonical bytes, which begin
// with the value's first byte: "an object", "an array", "a string", "a
// number", "true", "false" or "null" ("nothing" for no bytes).
func jsonKind(body []byte) string {
	if len(body) == 0 {
		return "nothing"
	}
	switch c := body[0]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't':
		return "true"
	case c == 'f':
		return "false"
	case c == 'n':
		return "null"
	default:
		return "a number"
	}
}

// recordURL is {endpoint}/{name}, the endpoint's query kept after the name.
func recordURL(endpoint, name string) string {
	base, query, found := strings.Cut(endpoint, "?")
	if found {
		return base + "/" + name + "?" + query
	}
	return base + "/" + name
}

// errHeaderGuarded is the error for a caller's header that a target sets
// itself.
func errHeaderGuarded(name string) error {
	return fmt.Errorf("%w: Config.Header %s: the target sets this header itself to make writes exactly-once", ErrConfig, textproto.CanonicalMIMEHeaderKey(name))
}
