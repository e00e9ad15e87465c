// Package idempotencykey provides the idempotency-key target: a
// repository that takes POST with an Idempotency-Key header (IETF draft,
// IRI facility API).
package idempotencykey

import (
	"net/http"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

// Target is a repository that takes POST {Endpoint} with an
// Idempotency-Key header (IETF draft, IRI facility API): the UUIDv5 of the
// endpoint and the key, the same bytes on every retry and after a restart.
// The exact body first sent is kept in the store and re-sent on every retry.
// 409 means the first request with this key is still in flight.
type Target struct {
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

type idempotencyKeyDriver struct {
	endpoint string
	pointers []string
	// userPointer is the IDPointer the user set, "" for the default.
	userPointer string
	secret      []byte
	retention   time.Duration
	inFlight    time.Duration
}

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("idempotencykey.Target.Endpoint", t.Endpoint)
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

func (d idempotencyKeyDriver) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	record := credential.Strip(driver.RecordURL(d.endpoint, k.Key))
	return []driver.Step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		KeepBody: true, Retention: d.retention,
		Build: func([]string) (driver.Request, error) {
			h := http.Header{}
			h.Set("Idempotency-Key", driver.IdempotencyKey(d.endpoint, k.Key, d.secret))
			h.Set("Content-Type", "application/json")
			return driver.Request{Method: http.MethodPost, URL: d.endpoint, Header: h, Body: k.Body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := driver.Verdict{Class: driver.Classify(a)}
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
