package backoff

import (
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The adaptive limiter's constants.
const (
	// adaptWindow and adaptAnswers bound a window from below: it closes at
	// the first answer after both are reached.
	adaptWindow  = 500 * time.Millisecond
	adaptAnswers = 20
	// adaptCut is the rate a cut leaves, as a share of the rate the server
	// accepted during the window that throttled.
	adaptCut = 0.95
	// adaptSlow is the growth per second near the last confirmed limit (up
	// to adaptNear times it); adaptFast is the growth elsewhere.
	adaptSlow = 0.05
	adaptFast = 0.25
	adaptNear = 1.1
	// adaptMargin is the least excess over the background share of
	// throttles that counts as a burst; the noise of a small window
	// (3 standard errors) raises it.
	adaptMargin = 0.02
	// adaptLowest is the lowest rate a cut leaves, in requests per second
	// (or the ceiling, when that is lower).
	adaptLowest = 1.0
	// adaptBackground bounds the background share of throttles: a share
	// above it that does not fall at a lower rate is a server asking every
	// client to slow down, not a background, and the cut stays.
	adaptBackground = 0.5
)

// AdaptiveLimiter is a [Limiter] whose rate follows the server, in the
// manner of the AWS SDK's adaptive retry mode: a batch's send rate drops
// when the server throttles (429, 503) and grows back as answers succeed.
// Every answer is reported to [AdaptiveLimiter.Observe].
//
// Not every throttle comes from load. A server may throttle a steady share
// of requests whatever the rate (a busy shared service, random 503s), and
// slowing down for those only makes the batch slower. So the limiter works
// in windows of at least 500 ms and 20 answers, and it keeps a background
// share of throttles that does not depend on the rate (0 at first). A window
// whose share of throttles is clearly above the background (by 2 points or
// 3 standard errors, whichever is more) is a burst: the rate is cut to 95%
// of the rate the server accepted in that window, its estimate of the
// server's limit, measured between the window's first throttle and its
// last, while the server was refusing, and only over the time the client
// was sending (not while every item waited out a Retry-After). The next
// window tests the cut: when the share fell, the throttles came from load
// and the cut stays; when it did not fall, they did not, and the rate
// before the cut comes back while the share of both windows becomes the
// background. Quiet windows grow the rate: by 5% a second near the last
// confirmed limit (to 10% above it), by 25% a second elsewhere, until it
// reaches the ceiling or, without one, until the batch sends less than half
// of it and it limits nothing. A share above one half is never taken for a
// background: a server that throttles most requests at any rate is slowed
// down to, at the lowest, 1 request per second ([AdaptiveLimiter.AtLowest]).
//
// A nil *AdaptiveLimiter is unlimited and ignores what it observes.
// AdaptiveLimiter is safe for concurrent use by multiple goroutines.
type AdaptiveLimiter struct {
	lim *rate.Limiter
	clk clock

	mu sync.Mutex
	c  control
}

// NewAdaptiveLimiter returns an adaptive limiter that starts at ceiling and
// never exceeds it: the ceiling is a rate the caller was given (a published
// limit, a user's choice), in requests per second. A ceiling of zero or
// less, NaN or +Inf means none: the limiter starts unlimited.
func NewAdaptiveLimiter(ceiling float64) *AdaptiveLimiter {
	return newAdaptiveLimiter(ceiling, systemClock{})
}

// newAdaptiveLimiter is NewAdaptiveLimiter with the clock injected.
func newAdaptiveLimiter(ceiling float64, clk clock) *AdaptiveLimiter {
	if !(ceiling > 0) {
		ceiling = math.Inf(1)
	}
	c := control{ceiling: ceiling, limit: ceiling}
	return &AdaptiveLimiter{lim: rate.NewLimiter(limitOf(ceiling), 1), clk: clk, c: c}
}

// limitOf converts a rate to x/time/rate's, +Inf to rate.Inf.
func limitOf(perSecond float64) rate.Limit {
	if math.IsInf(perSecond, 1) {
		return rate.Inf
	}
	return rate.Limit(perSecond)
}

// Wait blocks until the next request may be sent at the current rate or ctx
// is done, as [Limiter.Wait] does.
func (l *AdaptiveLimiter) Wait(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l == nil {
		return nil
	}
	return wait(ctx, l.lim, l.clk)
}

// Observe reports one answer from the server: throttled when it was a 429
// or a 503, the answers that ask a client to slow down. Answers that never
// came (a dropped connection) are not reported.
func (l *AdaptiveLimiter) Observe(throttled bool) {
	if l == nil {
		return
	}
	now := l.clk.Now()
	l.mu.Lock()
	limit, changed := l.c.observe(now, throttled)
	l.mu.Unlock()
	if changed {
		l.lim.SetLimitAt(now, limitOf(limit))
	}
}

// Rate returns the current rate in requests per second, +Inf when it is
// unlimited; for a nil limiter, +Inf.
func (l *AdaptiveLimiter) Rate() float64 {
	if l == nil {
		return math.Inf(1)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.limit
}

// Hold stops the rate from growing past the level its last confirmed cut
// left (95% of the limit it found) until the returned func is called;
// holds nest. A batch that has read all of its input holds: finding a
// higher limit then gains it little, and a throttle would keep its last
// items waiting out a Retry-After after every other item is done. Before
// any confirmed cut, a hold changes nothing. For a nil limiter, a no-op.
func (l *AdaptiveLimiter) Hold() (release func()) {
	if l == nil {
		return func() {}
	}
	l.mu.Lock()
	l.c.holds++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.c.holds--
			l.mu.Unlock()
		})
	}
}

// AtLowest reports whether the rate is as low as the limiter cuts it: 1
// request per second, or the ceiling when that is lower. A server that
// still throttles most requests then is not answered by slowing down; a
// caller should bound its retries some other way. For a nil limiter, false.
func (l *AdaptiveLimiter) AtLowest() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.limit <= l.c.lowest()
}

// control is the adaptive limiter's state machine, a pure function of the
// answers and the times they were observed.
type control struct {
	ceiling float64 // +Inf for none
	limit   float64 // the current rate; +Inf for unlimited
	floor   float64 // the background share of throttles
	knee    float64 // the accepted rate at the last confirmed cut; 0 before one
	holds   int     // callers of Hold that have not released it

	// The current window, from the first answer on.
	start     time.Time
	answers   int
	throttles int
	// last is when the last answer came (of any window), and busy the
	// window's time without its idle gaps (see idleGap).
	last time.Time
	busy time.Duration
	// At the window's first and last throttles: the busy time so far and
	// how many answers were not throttles. See acceptedRate.
	busyFirst, busyLast         time.Duration
	acceptedFirst, acceptedLast int

	// A cut under test: the rate before it, the share and answers of the
	// window that caused it, and the rate the server accepted then.
	testing  bool
	before   float64
	share0   float64
	n0       int
	accepted float64
}

// observe counts one answer and, when it closes a window, returns the new
// rate and whether it changed.
func (c *control) observe(now time.Time, throttled bool) (float64, bool) {
	if c.start.IsZero() {
		c.start, c.last = now, now
	}
	if gap := now.Sub(c.last); gap <= c.idleGap() {
		c.busy += gap
	}
	c.last = now
	c.answers++
	if throttled {
		if c.throttles == 0 {
			c.busyFirst, c.acceptedFirst = c.busy, c.answers-1
		}
		c.throttles++
		c.busyLast, c.acceptedLast = c.busy, c.answers-c.throttles
	}
	d := now.Sub(c.start)
	if d < adaptWindow || c.answers < adaptAnswers {
		return c.limit, false
	}
	secs := d.Seconds()
	n := c.answers
	share := float64(c.throttles) / float64(n)
	sent := float64(n) / secs
	accepted := c.acceptedRate()
	c.start, c.answers, c.throttles, c.busy = now, 0, 0, 0
	old := c.limit

	if c.testing {
		c.testing = false
		noise := 3 * math.Sqrt(c.share0*(1-c.share0)/float64(c.n0)+share*(1-share)/float64(n))
		fell := share < c.share0/2 || c.share0-share > max(adaptMargin, noise)
		if !fell && c.share0 < adaptBackground {
			// Not load: the rate before the cut comes back, and this
			// share is the background.
			c.floor = (c.share0*float64(c.n0) + share*float64(n)) / float64(c.n0+n)
			c.limit = c.before
			return c.limit, c.limit != old
		}
		c.knee = c.accepted
	}

	p := max(c.floor, 0.01)
	if share > c.floor+max(adaptMargin, 3*math.Sqrt(p*(1-p)/float64(n))) {
		c.testing, c.before, c.share0, c.n0, c.accepted = true, c.limit, share, n, accepted
		cut := accepted * adaptCut
		if accepted == 0 {
			cut = sent / 2
		}
		c.limit = min(c.limit, max(cut, c.lowest()))
		return c.limit, c.limit != old
	}

	if share < c.floor {
		c.floor += (share - c.floor) / 10
	}
	if !math.IsInf(c.limit, 1) {
		g := adaptFast
		if c.knee > 0 && c.limit < c.knee*adaptNear {
			g = adaptSlow
		}
		c.limit *= 1 + g*secs
		if c.limit >= c.ceiling || (math.IsInf(c.ceiling, 1) && old > 2*sent) {
			c.limit = c.ceiling
		}
		if c.holds > 0 && c.knee > 0 {
			c.limit = min(c.limit, max(old, c.knee*adaptCut))
		}
	}
	return c.limit, c.limit != old
}

// lowest is the lowest rate a cut leaves.
func (c *control) lowest() float64 { return min(adaptLowest, c.ceiling) }

// idleGap is the longest gap between two answers that counts as busy
// time: 100 ms, or four intervals at the current rate when that is longer.
// A longer gap is a client with nothing to send (every item waiting out
// Retry-After), not a server that accepts little.
func (c *control) idleGap() time.Duration {
	g := adaptWindow / 5
	if !math.IsInf(c.limit, 1) {
		g = max(g, time.Duration(4*float64(time.Second)/c.limit))
	}
	return g
}

// acceptedRate estimates the rate the server accepted during the window,
// over its busy time: a client that sent nothing for a while (its items
// waiting out Retry-After) says nothing about the server meanwhile.
// Between the window's first throttle and its last the server was
// refusing: what it accepted meanwhile is its limit (for a token bucket,
// exactly its refill), not inflated by the burst it let through before the
// first throttle. When the server accepted fewer than 10 answers in that
// span, too few to measure (a server that counts writes per fixed interval
// accepts none between its throttles), the estimate is what it accepted
// over the window's busy time.
func (c *control) acceptedRate() float64 {
	busy := max(c.busy, time.Millisecond).Seconds()
	whole := float64(c.answers-c.throttles) / busy
	span := c.busyLast - c.busyFirst
	between := c.acceptedLast - c.acceptedFirst
	if c.throttles < 2 || span <= 0 || between < adaptAnswers/2 {
		return whole
	}
	return float64(between) / span.Seconds()
}
