package backoff

import (
	"context"
	"math"

	"golang.org/x/time/rate"
)

// Limiter spaces requests to a rate given in requests per second, for
// servers with a published limit (DataCite: 3000 requests per 5 minutes, so
// 10 per second). It allows no bursts: requests are let through one at a
// time at even intervals, so no window of any length sees more than its
// share plus one.
//
// A nil *Limiter is unlimited. Limiter is safe for concurrent use by
// multiple goroutines; waiters are served in the order they arrive.
type Limiter struct {
	lim *rate.Limiter
	clk clock
}

// NewLimiter returns a limiter that lets perSecond requests through per
// second; fractions are allowed (2.5, or 0.1 for one request every ten
// seconds). A rate of zero or less, NaN or +Inf means unlimited: NewLimiter
// returns nil, which is ready to use.
func NewLimiter(perSecond float64) *Limiter {
	return newLimiter(perSecond, systemClock{})
}

// newLimiter is NewLimiter with the clock injected.
func newLimiter(perSecond float64, clk clock) *Limiter {
	if !(perSecond > 0) || math.IsInf(perSecond, 1) {
		return nil
	}
	return &Limiter{lim: rate.NewLimiter(rate.Limit(perSecond), 1), clk: clk}
}

// Wait blocks until the next request may be sent or ctx is done. It returns
// ctx's error when ctx is done, even for a nil Limiter, and, without
// waiting, an error wrapping [ErrDeadline] when the wait would reach ctx's
// deadline. A wait that does not complete gives its turn back.
func (l *Limiter) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l == nil {
		return nil
	}
	return wait(ctx, l.lim, l.clk)
}

// wait takes lim's next turn, sleeping until it comes; a wait that does not
// complete gives its turn back.
func wait(ctx context.Context, lim *rate.Limiter, clk clock) error {
	now := clk.Now()
	r := lim.ReserveN(now, 1) // always OK: one token, burst 1
	d := r.DelayFrom(now)
	if d == 0 {
		return nil
	}
	if err := sleep(ctx, d, clk); err != nil {
		r.CancelAt(clk.Now())
		return err
	}
	return nil
}
