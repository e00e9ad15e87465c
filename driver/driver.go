package driver

import (
	"net/http"
	"net/textproto"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
)

// Driver is a target ready for the engine: it names the store rows that
// guard its deposits and turns each payload into steps. A Driver carries
// its own configuration and never calls back into the engine. It must be
// safe for concurrent use by multiple goroutines.
type Driver interface {
	// Name is the store target of the deposit's own rows: the protocol
	// and the normalised endpoint (and anything else that tells two
	// repositories apart, such as a DOI prefix), built with [TargetName]
	// so that no credential is stored. It must not change between runs:
	// a store finds a deposit's outcome under it.
	Name() string
	// StepTargets are the store targets of its other durable steps.
	StepTargets() []string
	// SecretFingerprint identifies a key secret that shapes the requests
	// (never the secret itself); "" when none does. A store used with
	// another secret is refused.
	SecretFingerprint() string
	// Guards reports whether the driver sets header name itself for
	// exactly-once (If-None-Match, Idempotency-Key), so that the caller's
	// headers may not replace it.
	Guards(name string) bool
	// Steps returns the steps of the deposit of k, or an error when the
	// driver cannot take the payload (nothing is recorded then). dir is
	// the directory of a dataset's files, "" for a payload that is not a
	// dataset.
	Steps(k canonical.Keyed, dir string) ([]Step, error)
}

// Guarded reports whether name is a header every built-in target reserves,
// for a [Driver.Guards] to start from: a caller's If-None-Match or
// If-Match would change what a write means, and an Idempotency-Key of the
// caller's would replace the one derived from the key.
func Guarded(name string) bool {
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "If-None-Match", "If-Match", "Idempotency-Key":
		return true
	}
	return false
}

// TransportWrapper is a Driver whose requests go through a transport of
// its own (S3's signer). The engine wraps it around its own transport,
// once per client, so the driver's transport sees every attempt.
type TransportWrapper interface {
	WrapTransport(next http.RoundTripper) http.RoundTripper
}

// RateSetter is a Driver with a default request rate, per second (a
// repository's published limit). The engine uses it when the client's
// configured rate is 0.
type RateSetter interface {
	DefaultRate() float64
}

// RequestPacer is a Driver that holds some of its requests to a rate of
// their own (a search endpoint's limit). The engine calls Pacer once per
// client; what it returns picks a request's own limiter (nil: none). The
// engine waits for that limiter before the request takes a slot of the
// batch or starts its attempt timeout: a request waiting for its rate
// holds nothing other requests need, and has not begun.
type RequestPacer interface {
	Pacer() func(*http.Request) *backoff.Limiter
}
