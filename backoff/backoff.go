// Package backoff provides bounded retry waits: capped exponential backoff
// with full jitter that honours Retry-After, a retry budget shared by a
// batch, and a client-side rate limiter.
//
// A [Policy] is an immutable value: [Policy.Delay] is a pure function from a
// retry number (and the server's answer) to a wait, so nothing needs resetting
// between requests and one Policy can serve any number of goroutines.
// [Policy.Next] adds the checks a retry loop makes before it sleeps: the
// attempt limit, the elapsed-time limit and the context deadline. [Sleep]
// waits while listening to the context. A typical loop:
//
//	start := time.Now()
//	for retry := 1; ; retry++ {
//		if err := limiter.Wait(ctx); err != nil {
//			return nil, err
//		}
//		resp, err := send(ctx)
//		if !retryable(resp, err) {
//			return resp, err
//		}
//		wait, stop := policy.Next(ctx, retry, resp, time.Since(start), nil)
//		if stop == nil {
//			stop = budget.Spend(isTimeout(err))
//		}
//		if stop == nil {
//			stop = backoff.Sleep(ctx, wait)
//		}
//		if stop != nil {
//			return resp, stop // why we stopped, with the last answer kept
//		}
//	}
//
// Every wait is bounded: a Retry-After from the server replaces the jittered
// wait but is capped by [Policy.Cap] like any other (or by its own
// RetryAfterCap), and a wait that would
// pass the context deadline or the policy's elapsed limit fails at once
// instead of sleeping in vain. A [Budget] (a token bucket in the manner of the
// AWS SDK standard retry mode) turns a failing server's storm of retries into
// a trickle, and a [Limiter] keeps a batch within a server's published request
// rate. Nothing in this package logs.
package backoff

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// Defaults for the zero fields of a Policy.
const (
	defaultBase        = 100 * time.Millisecond
	defaultCap         = 20 * time.Second
	defaultMaxAttempts = 5
	defaultMaxElapsed  = 2 * time.Minute
)

// Errors that say why a retry loop stopped. They are wrapped with details;
// test for them with [errors.Is].
var (
	// ErrAttemptsExhausted means the policy's MaxAttempts have been made.
	ErrAttemptsExhausted = errors.New("backoff: attempts exhausted")
	// ErrElapsedExhausted means the next wait would pass the policy's
	// MaxElapsed, counted from the start of the operation.
	ErrElapsedExhausted = errors.New("backoff: elapsed time exhausted")
	// ErrDeadline means the wait would pass the context's deadline, so the
	// wait was not started.
	ErrDeadline = errors.New("backoff: wait would pass the context deadline")
	// ErrBudgetExhausted means the shared retry budget has too few tokens
	// left for another retry.
	ErrBudgetExhausted = errors.New("backoff: retry budget exhausted")
)

// Policy decides how long to wait before each retry and when to stop
// retrying. The zero value is ready to use; a field that is zero or negative
// takes its default.
//
// Policy is an immutable value and safe for concurrent use by multiple
// goroutines.
type Policy struct {
	// Base is the ceiling of the first retry's jittered wait; the ceiling
	// doubles with every retry up to Cap. Default 100ms.
	Base time.Duration
	// Cap bounds every wait, the server's Retry-After included unless
	// RetryAfterCap is set. Default 20s.
	Cap time.Duration
	// RetryAfterCap, when set, bounds a wait the server asked for with
	// Retry-After instead of Cap: a batch can keep its own waits short
	// while still waiting as long as a server asks. Zero means Cap.
	RetryAfterCap time.Duration
	// MaxAttempts is the number of attempts allowed for one operation,
	// counting the first: 1 means no retries. Zero (or negative) means the
	// default, 5 (the first attempt and up to 4 retries).
	MaxAttempts int
	// MaxElapsed bounds the time from the start of an operation to the start
	// of its last retry: Next refuses a wait that would pass it. Default 2m.
	MaxElapsed time.Duration
}

// WithDefaults returns p with every zero or negative field replaced by its
// default, so callers can report or derive the limits actually in force
// (for example a retry count of MaxAttempts-1 for a retrying HTTP client).
func (p Policy) WithDefaults() Policy {
	if p.Base <= 0 {
		p.Base = defaultBase
	}
	if p.Cap <= 0 {
		p.Cap = defaultCap
	}
	if p.RetryAfterCap <= 0 {
		p.RetryAfterCap = p.Cap
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = defaultMaxAttempts
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = defaultMaxElapsed
	}
	return p
}

// Delay returns the wait before retry number retry; the first retry (the
// second attempt) is retry 1, and smaller numbers count as 1 (a hook that
// counts from 0, like go-retryablehttp's Backoff, passes its number plus 1).
//
// If resp carries a valid Retry-After header (see [RetryAfter]), the wait is
// that value, capped by RetryAfterCap (by default Cap); past dates give 0. Otherwise the wait is drawn
// with full jitter, uniformly from [0, min(Cap, Base*2^(retry-1))]; the
// exponent saturates, so any retry number is safe.
//
// rnd returns numbers in [0, 1), like [math/rand/v2.Float64], which is used
// when rnd is nil; values outside that range are clamped. Pass a fixed or
// seeded source for reproducible waits.
func (p Policy) Delay(retry int, resp *http.Response, rnd func() float64) time.Duration {
	return p.delay(retry, resp, rnd, time.Now)
}

// delay is Delay with the clock injected; now is called only when resp
// carries a Retry-After header.
func (p Policy) delay(retry int, resp *http.Response, rnd func() float64, now func() time.Time) time.Duration {
	p = p.WithDefaults()
	if resp != nil && len(resp.Header["Retry-After"]) > 0 {
		if d, ok := RetryAfter(resp.Header, now()); ok {
			return min(d, p.RetryAfterCap)
		}
	}
	if rnd == nil {
		rnd = rand.Float64
	}
	return jitter(p.ceiling(retry), rnd())
}

// ceiling returns min(Cap, Base*2^(retry-1)) without overflowing; p has its
// defaults applied.
func (p Policy) ceiling(retry int) time.Duration {
	shift := max(retry, 1) - 1
	if p.Base >= p.Cap || shift >= 63 || p.Base > p.Cap>>shift {
		return p.Cap
	}
	return p.Base << shift
}

// jitter maps r in [0, 1) uniformly onto the whole nanoseconds [0, ceil]:
// r = 0 gives 0 and r just below 1 gives ceil.
func jitter(ceil time.Duration, r float64) time.Duration {
	switch {
	case !(r > 0): // also NaN
		return 0
	case r >= 1:
		return ceil
	}
	d := time.Duration(r * (float64(ceil) + 1))
	if d < 0 || d > ceil { // rounding at the top of the range
		return ceil
	}
	return d
}

// Next decides whether retry number retry may be made after resp and, if
// so, how long to wait first. elapsed is the time since the operation's
// first attempt started; rnd is as for [Policy.Delay].
//
// Next returns an error, and a zero wait, when no retry should follow:
// wrapping [ErrAttemptsExhausted] when retry+1 would pass MaxAttempts,
// [ErrElapsedExhausted] when elapsed plus the wait would pass MaxElapsed,
// [ErrDeadline] when the wait would reach ctx's deadline, or ctx's own error
// when ctx is done. A caller that sleeps only the waits Next returns never
// waits longer in total than MaxElapsed.
func (p Policy) Next(ctx context.Context, retry int, resp *http.Response, elapsed time.Duration, rnd func() float64) (time.Duration, error) {
	return p.next(ctx, retry, resp, elapsed, rnd, time.Now)
}

// next is Next with the clock injected.
func (p Policy) next(ctx context.Context, retry int, resp *http.Response, elapsed time.Duration, rnd func() float64, now func() time.Time) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p = p.WithDefaults()
	retry = max(retry, 1)
	if retry >= p.MaxAttempts {
		return 0, fmt.Errorf("%w: %d of %d attempts made", ErrAttemptsExhausted, retry, p.MaxAttempts)
	}
	wait := p.delay(retry, resp, rnd, now)
	elapsed = max(elapsed, 0)
	if wait > p.MaxElapsed-elapsed {
		return 0, fmt.Errorf("%w: waiting %v after %v would pass %v", ErrElapsedExhausted, wait, elapsed.Round(time.Millisecond), p.MaxElapsed)
	}
	if err := checkDeadline(ctx, wait, now); err != nil {
		return 0, err
	}
	return wait, nil
}
