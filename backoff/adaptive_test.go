package backoff

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// simServer decides whether one request, sent at a moment of simulated
// time, is throttled.
type simServer func(at time.Duration) bool

// loadLimit is a server that accepts perSecond writes a second (a token
// bucket holding a tenth of a second's worth) and throttles the rest.
func loadLimit(perSecond float64) simServer {
	burst := max(1, perSecond/10)
	tokens, last := burst, time.Duration(0)
	return func(at time.Duration) bool {
		tokens = min(burst, tokens+perSecond*(at-last).Seconds())
		last = at
		if tokens < 1 {
			return true
		}
		tokens--
		return false
	}
}

// background is a server that throttles a share of requests at random,
// whatever the rate.
func background(share float64, seed uint64) simServer {
	r := rand.New(rand.NewPCG(seed, seed))
	return func(time.Duration) bool { return r.Float64() < share }
}

// both throttles what either server throttles.
func both(a, b simServer) simServer {
	return func(at time.Duration) bool { return a(at) || b(at) }
}

// simTally counts what a simulated client sent between two moments.
type simTally struct {
	sent, throttled int
	secs            float64
}

func (s simTally) accepted() float64 { return float64(s.sent-s.throttled) / s.secs }
func (s simTally) share() float64    { return float64(s.throttled) / float64(s.sent) }

// simulate runs a client that could send capacity requests a second when
// unlimited, paced by l, against srv for the length of run on a fake clock,
// every answer arriving at once, and tallies the requests sent from the
// moment from on. It emulates neither latency nor concurrency.
func simulate(l *AdaptiveLimiter, fc *fakeClock, srv simServer, capacity float64, run, from time.Duration) simTally {
	const step = 5 * time.Millisecond
	var tally simTally
	credit := 0.0
	for at := time.Duration(0); at < run; at += step {
		credit = min(credit+min(l.Rate(), capacity)*step.Seconds(), capacity*step.Seconds()+1)
		for ; credit >= 1; credit-- {
			throttled := srv(at)
			l.Observe(throttled)
			if at >= from {
				tally.sent++
				if throttled {
					tally.throttled++
				}
			}
		}
		fc.Advance(step)
	}
	tally.secs = (run - from).Seconds()
	return tally
}

// simulateBatch runs a batch of n items paced by l against srv on a fake
// clock, a client that could send capacity requests a second when
// unlimited: a throttled item is sent again once Retry-After (wait) has
// passed, and at most pool items are under way at once (sent and not yet
// accepted), as a batch bounds the items waiting to retry. So a client
// that overshoots sits idle while its throttled items wait. It returns how
// long the batch took and tallies the requests sent from the moment from
// on.
func simulateBatch(l *AdaptiveLimiter, fc *fakeClock, srv simServer, capacity float64, n, pool int, wait, from time.Duration) (time.Duration, simTally) {
	const step = time.Millisecond
	var (
		tally  simTally
		credit float64
		wakes  []time.Duration // when each waiting item may be sent again
		ready  int             // throttled items whose wait is over
		fresh  = n             // items not yet sent
		done   int
		at     time.Duration
	)
	for ; done < n; at += step {
		for len(wakes) > 0 && wakes[0] <= at {
			wakes, ready = wakes[1:], ready+1
		}
		credit = min(credit+min(l.Rate(), capacity)*step.Seconds(), capacity*step.Seconds()+1)
		for ; credit >= 1; credit-- {
			switch {
			case ready > 0:
				ready--
			case fresh > 0 && n-fresh-done < pool:
				fresh--
			default:
				credit = min(credit, 1) // idle: nothing to send
				goto next
			}
			throttled := srv(at)
			l.Observe(throttled)
			if throttled {
				wakes = append(wakes, at+wait)
			} else {
				done++
			}
			if at >= from {
				tally.sent++
				if throttled {
					tally.throttled++
				}
			}
		}
	next:
		fc.Advance(step)
	}
	tally.secs = (at - from).Seconds()
	return at, tally
}

func TestAdaptiveLimiterConvergesNearALoadLimitWhileRetriesWait(t *testing.T) {
	for _, limit := range []float64{20, 400, 2000} {
		t.Run(fmt.Sprintf("%v a second: a batch at least 90%% of the limit, at most 5%% throttled after 3 s", limit), func(t *testing.T) {
			fc := newFakeClock(time.Now())
			l := newAdaptiveLimiter(0, fc)
			n := int(15 * limit)
			took, late := simulateBatch(l, fc, loadLimit(limit), 5000, n, 264, time.Second, 3*time.Second)
			rate := float64(n) / took.Seconds()
			t.Logf("%d items in %v: %.1f/s, %.2f%% throttled after 3 s", n, took, rate, 100*late.share())
			require.GreaterOrEqual(t, rate, 0.9*limit, "items a second, limit %v", limit)
			require.LessOrEqual(t, late.share(), 0.05, "share throttled after 3 s, limit %v", limit)
		})
	}
}

func TestAdaptiveLimiterConvergesNearALoadLimit(t *testing.T) {
	for _, limit := range []float64{20, 400, 2000} {
		t.Run(fmt.Sprintf("%v a second accepted at least 90%%, at most 5%% throttled", limit), func(t *testing.T) {
			fc := newFakeClock(time.Now())
			l := newAdaptiveLimiter(0, fc)
			got := simulate(l, fc, loadLimit(limit), 3000, 60*time.Second, 5*time.Second)
			t.Logf("accepted %.1f/s, %.2f%% throttled", got.accepted(), 100*got.share())
			require.GreaterOrEqual(t, got.accepted(), 0.9*limit, "accepted rate, limit %v", limit)
			require.LessOrEqual(t, got.share(), 0.05, "share throttled after 5 s, limit %v", limit)
		})
	}
}

func TestAdaptiveLimiterIgnoresThrottlesThatDoNotComeFromLoad(t *testing.T) {
	for _, share := range []float64{0.05, 0.15, 0.3} {
		t.Run(fmt.Sprintf("%v throttled at random keeps the rate", share), func(t *testing.T) {
			fc := newFakeClock(time.Now())
			l := newAdaptiveLimiter(0, fc)
			got := simulate(l, fc, background(share, 7), 500, 60*time.Second, 0)
			t.Logf("sent %.1f/s", float64(got.sent)/got.secs)
			require.GreaterOrEqual(t, float64(got.sent)/got.secs, 0.95*500, "send rate, background share %v", share)
			require.True(t, math.IsInf(l.Rate(), 1), "unlimited at the end, background share %v: %v", share, l.Rate())
		})
	}
}

func TestAdaptiveLimiterFindsALoadLimitAboveABackground(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newAdaptiveLimiter(0, fc)
	got := simulate(l, fc, both(loadLimit(400), background(0.1, 3)), 3000, 60*time.Second, 5*time.Second)
	t.Logf("accepted %.1f/s, %.2f%% throttled", got.accepted(), 100*got.share())
	require.GreaterOrEqual(t, got.accepted(), 0.9*400*0.9, "accepted rate")
	require.LessOrEqual(t, got.share(), 0.1+0.05, "share throttled after 5 s")
}

func TestAdaptiveLimiterGrowsBackOnceThrottlingStops(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newAdaptiveLimiter(0, fc)
	simulate(l, fc, loadLimit(100), 3000, 10*time.Second, 0)
	require.Less(t, l.Rate(), 150.0, "limited while the server throttles")
	simulate(l, fc, func(time.Duration) bool { return false }, 3000, 60*time.Second, 0)
	require.True(t, math.IsInf(l.Rate(), 1), "unlimited again: %v", l.Rate())
}

func TestAdaptiveLimiterNeverExceedsItsCeiling(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newAdaptiveLimiter(50, fc)
	require.Equal(t, 50.0, l.Rate())
	got := simulate(l, fc, loadLimit(40), 3000, 30*time.Second, 5*time.Second)
	require.GreaterOrEqual(t, got.accepted(), 0.9*40)
	require.LessOrEqual(t, float64(got.sent)/got.secs, 50.0)
	simulate(l, fc, func(time.Duration) bool { return false }, 3000, 60*time.Second, 0)
	require.Equal(t, 50.0, l.Rate(), "back at the ceiling, not above it")
}

func TestAdaptiveLimiterCutsAtMostToOneRequestASecond(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newAdaptiveLimiter(0, fc)
	require.False(t, l.AtLowest(), "at the start")
	simulate(l, fc, func(time.Duration) bool { return true }, 3000, 120*time.Second, 0)
	require.Equal(t, adaptLowest, l.Rate())
	require.True(t, l.AtLowest(), "after two minutes of throttles")
}

func TestAdaptiveLimiterStartsAtItsLowestUnderACeilingOfOneRequestASecondOrLess(t *testing.T) {
	for ceiling, lowest := range map[float64]bool{0.5: true, 1: true, 2: false, 0: false} {
		l := newAdaptiveLimiter(ceiling, newFakeClock(time.Now()))
		require.Equal(t, lowest, l.AtLowest(), "ceiling %v", ceiling)
	}
}

func TestAdaptiveLimiterWaitsAtItsCurrentRate(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newAdaptiveLimiter(0, fc)
	ctx := context.Background()
	for range 100 {
		require.NoError(t, l.Wait(ctx))
	}
	require.Equal(t, 0, fc.timerCount(), "unlimited: no waits")
	// A window of 21 answers over half a second, all throttled but the
	// first 5: the server accepted 10 a second, so the rate is cut to 9.5.
	for i := range 21 {
		if i > 0 {
			fc.Advance(25 * time.Millisecond)
		}
		l.Observe(i >= 5)
	}
	require.Equal(t, 9.5, l.Rate())
	require.NoError(t, l.Wait(ctx), "the first request at the new rate goes at once")
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	require.InDelta(t, float64(time.Second)/9.5, float64(<-fc.started), float64(time.Millisecond))
	fc.Advance(time.Second)
	require.NoError(t, <-done)
}

func TestNilAdaptiveLimiterIsUnlimited(t *testing.T) {
	var l *AdaptiveLimiter
	l.Observe(true)
	require.NoError(t, l.Wait(context.Background()))
	require.True(t, math.IsInf(l.Rate(), 1))
	require.False(t, l.AtLowest())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, l.Wait(ctx), context.Canceled)
}

// A held limiter stops probing above the limit it found: near a load limit
// its throttles stop while it keeps most of the limit, and once released it
// probes again. A hold before any limit is found changes nothing. Each
// simulation gets a server of its own: a simulation's clock starts at 0.
func TestAdaptiveLimiterHeldStopsProbingAboveTheLimitItFound(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newAdaptiveLimiter(0, fc)
	simulate(l, fc, loadLimit(400), 3000, 10*time.Second, 0)
	free := simulate(l, fc, loadLimit(400), 3000, 20*time.Second, 0)
	require.Greater(t, free.throttled, 0, "unheld, it probes above the limit now and then")

	release := l.Hold()
	simulate(l, fc, loadLimit(400), 3000, 5*time.Second, 0) // a probe under way ends with one more cut
	held := simulate(l, fc, loadLimit(400), 3000, 20*time.Second, 0)
	require.Zero(t, held.throttled, "held, it does not probe")
	require.GreaterOrEqual(t, held.accepted(), 0.9*400)

	release()
	release() // a second call does nothing
	again := simulate(l, fc, loadLimit(400), 3000, 20*time.Second, 0)
	require.Greater(t, again.throttled, 0, "released, it probes again")

	fresh := newAdaptiveLimiter(0, newFakeClock(time.Now()))
	defer fresh.Hold()()
	require.True(t, math.IsInf(fresh.Rate(), 1), "no limit found yet: a hold changes nothing")
}
