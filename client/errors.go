package client

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors. Every error a deposit returns wraps at most one of the
// first five, so a caller can decide what to do with the item:
//
//   - ErrInvalid: the payload is not valid input; nothing was sent.
//   - ErrTerminal: the server refused the payload for good (validation, a
//     key reused with another payload, ...); it is recorded as failed and not
//     sent again unless the caller asks (RetryFailed).
//   - ErrStopRun: the answer concerns every item, not this one (credentials,
//     endpoint, a server without idempotency support); stop the batch.
//   - ErrUnresolved: the outcome is unknown (retries, time or budget ran
//     out, or the run was interrupted); the intent stays recorded as pending
//     and a later run settles it safely.
//   - ErrSettingsMismatch: the store holds keys made with other settings.
//
// ErrConfig, from New only, says the Config cannot be used.
var (
	ErrInvalid          = errors.New("invalid payload")
	ErrTerminal         = errors.New("refused by the server")
	ErrStopRun          = errors.New("run stopped")
	ErrUnresolved       = errors.New("outcome unresolved")
	ErrSettingsMismatch = errors.New("key settings differ from those recorded for this target")
	ErrConfig           = errors.New("client: invalid configuration")

	// ErrUnreachable wraps ErrStopRun: no connection to the endpoint could
	// be made (refused, or the host did not resolve) before any answer of
	// the run, or the endpoint gave no answer at all before the first item
	// ran out of retries.
	ErrUnreachable = fmt.Errorf("%w: endpoint unreachable", ErrStopRun)
	// ErrInterrupted wraps ErrUnresolved: the batch was asked to stop while
	// this item was in flight or waiting.
	ErrInterrupted = fmt.Errorf("%w: interrupted", ErrUnresolved)
)

// mismatchError is the store's settings mismatch (which names the target
// and both settings) as the client's: it is ErrSettingsMismatch too, but
// says "key settings differ" once.
type mismatchError struct{ store error }

func (e mismatchError) Error() string   { return e.store.Error() }
func (e mismatchError) Unwrap() []error { return []error{ErrSettingsMismatch, e.store} }

// HTTPError is an answer from the server that was not a success. Retrieve it
// with errors.As; it unwraps to nothing, the classification (ErrTerminal,
// ErrStopRun, ErrUnresolved) wraps it. A failure recorded by an earlier run
// is reported again as the HTTPError it was, from the store's status and
// problem.
type HTTPError struct {
	// Method and URL are the request's; "" when not known.
	Method     string
	URL        string // redacted: no user info, no query
	StatusCode int
	// Problem is the server's problem detail (RFC 9457 title and detail, or
	// the first line of the body), at most a few hundred bytes.
	Problem string
	// RetryAfter is the server's Retry-After, zero when absent or invalid.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	msg := strconv.Itoa(e.StatusCode)
	if req := strings.TrimSpace(e.Method + " " + e.URL); req != "" {
		msg = req + ": " + msg
	}
	text := http.StatusText(e.StatusCode)
	if text != "" && !strings.HasPrefix(e.Problem, text) {
		msg += " " + text
	}
	if e.Problem != "" {
		msg += ": " + e.Problem
	}
	return msg
}

// NotSettledError is why a deposit whose step the server accepted is
// unresolved: polling its check within the step's budget never saw it
// settle (a publication still locked, a deposit still queued). It is
// wrapped with ErrUnresolved (or ErrInterrupted); a later run polls again
// and never re-sends the request.
type NotSettledError struct {
	Polls   int
	Elapsed time.Duration
	// Last is the last poll's problem ("dataset doi:... is locked"), if
	// it named one.
	Last string
}

func (e *NotSettledError) Error() string {
	s := fmt.Sprintf("accepted, not yet settled after %d polls in %v", e.Polls, e.Elapsed.Round(time.Millisecond))
	if e.Last != "" {
		s += " (" + e.Last + ")"
	}
	return s
}
