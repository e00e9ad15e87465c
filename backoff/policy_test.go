package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"testing/quick"
	"time"

	"github.com/stretchr/testify/require"
)

// almostOne is the largest float64 below 1: the top of a random source.
var almostOne = math.Nextafter(1, 0)

func fixed(r float64) func() float64 { return func() float64 { return r } }

func respWith(values ...string) *http.Response {
	h := http.Header{}
	for _, v := range values {
		h.Add("Retry-After", v)
	}
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: h}
}

func TestWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Policy
		want Policy
	}{
		{"zero value takes every default", Policy{},
			Policy{Base: 100 * time.Millisecond, Cap: 20 * time.Second, RetryAfterCap: 20 * time.Second, MaxAttempts: 5, MaxElapsed: 2 * time.Minute}},
		{"negative values take the defaults", Policy{Base: -1, Cap: -1, RetryAfterCap: -1, MaxAttempts: -1, MaxElapsed: -1},
			Policy{Base: 100 * time.Millisecond, Cap: 20 * time.Second, RetryAfterCap: 20 * time.Second, MaxAttempts: 5, MaxElapsed: 2 * time.Minute}},
		{"set values are kept", Policy{Base: time.Second, Cap: time.Minute, MaxAttempts: 1, MaxElapsed: time.Hour},
			Policy{Base: time.Second, Cap: time.Minute, RetryAfterCap: time.Minute, MaxAttempts: 1, MaxElapsed: time.Hour}},
		{"RetryAfterCap is kept apart from Cap", Policy{Cap: 2 * time.Second, RetryAfterCap: time.Minute},
			Policy{Base: 100 * time.Millisecond, Cap: 2 * time.Second, RetryAfterCap: time.Minute, MaxAttempts: 5, MaxElapsed: 2 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.in.WithDefaults())
		})
	}
}

func TestDelayBoundsPerRetry(t *testing.T) {
	p := Policy{} // Base 100ms, Cap 20s
	tests := []struct {
		retry int
		max   time.Duration
	}{
		{math.MinInt, 100 * time.Millisecond},
		{0, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{5, 1600 * time.Millisecond},
		{8, 12800 * time.Millisecond},
		{9, 20 * time.Second},
		{10, 20 * time.Second},
		{63, 20 * time.Second},
		{64, 20 * time.Second},
		{65, 20 * time.Second},
		{1000, 20 * time.Second},
		{math.MaxInt, 20 * time.Second},
	}
	for _, tt := range tests {
		t.Run("retry "+strconv.Itoa(tt.retry)+" waits at most "+tt.max.String(), func(t *testing.T) {
			require.Equal(t, time.Duration(0), p.Delay(tt.retry, nil, fixed(0)))
			require.Equal(t, tt.max, p.Delay(tt.retry, nil, fixed(almostOne)))
			require.Equal(t, (tt.max+1)/2, p.Delay(tt.retry, nil, fixed(0.5)))
			for range 100 {
				d := p.Delay(tt.retry, nil, nil)
				require.GreaterOrEqual(t, d, time.Duration(0))
				require.LessOrEqual(t, d, tt.max)
			}
		})
	}
}

func TestDelayCeilingNeverOverflows(t *testing.T) {
	tests := []struct {
		name  string
		p     Policy
		retry int
		want  time.Duration
	}{
		{"base above cap waits at most cap", Policy{Base: time.Minute, Cap: time.Second}, 1, time.Second},
		{"largest cap doubles up to bit 62", Policy{Base: 1, Cap: math.MaxInt64}, 63, 1 << 62},
		{"largest cap saturates at bit 63", Policy{Base: 1, Cap: math.MaxInt64}, 64, math.MaxInt64},
		{"largest base and cap stay at cap", Policy{Base: math.MaxInt64, Cap: math.MaxInt64}, math.MaxInt, math.MaxInt64},
		{"odd base stops at cap before overflow", Policy{Base: 3, Cap: math.MaxInt64}, 63, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, tt.p.Delay(tt.retry, nil, fixed(1)))
			d := tt.p.Delay(tt.retry, nil, fixed(almostOne))
			require.LessOrEqual(t, d, tt.want)
			require.GreaterOrEqual(t, d, tt.want-tt.want>>40, "near the top of the range")
		})
	}
}

func TestDelayClampsABadRandomSource(t *testing.T) {
	p := Policy{Base: time.Second, Cap: time.Second}
	tests := []struct {
		name string
		r    float64
		want time.Duration
	}{
		{"negative gives zero", -1, 0},
		{"NaN gives zero", math.NaN(), 0},
		{"one gives the ceiling", 1, time.Second},
		{"above one gives the ceiling", 7, time.Second},
		{"+Inf gives the ceiling", math.Inf(1), time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, p.Delay(1, nil, fixed(tt.r)))
		})
	}
}

func TestDelayHonoursRetryAfterCappedByPolicy(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p := Policy{Base: time.Second, Cap: 30 * time.Second}
	tests := []struct {
		name string
		resp *http.Response
		want time.Duration
	}{
		{"seconds replace the jittered wait", respWith("3"), 3 * time.Second},
		{"zero seconds mean retry at once", respWith("0"), 0},
		{"seconds beyond the cap are capped", respWith("3600"), 30 * time.Second},
		{"date in the past means retry at once", respWith(now.Add(-time.Hour).Format(http.TimeFormat)), 0},
		{"date within the cap is waited for", respWith(now.Add(12 * time.Second).Format(http.TimeFormat)), 12 * time.Second},
		{"date far in the future is capped", respWith(now.AddDate(1, 0, 0).Format(http.TimeFormat)), 30 * time.Second},
		{"garbage falls back to jitter", respWith("soon"), time.Second},
		{"empty value falls back to jitter", respWith(""), time.Second},
		{"negative seconds fall back to jitter", respWith("-5"), time.Second},
		{"no header falls back to jitter", respWith(), time.Second},
		{"no response falls back to jitter", nil, time.Second},
		{"several values take the longest valid", respWith("2", "junk", "7"), 7 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, p.delay(1, tt.resp, fixed(almostOne), clock))
		})
	}
}

// With RetryAfterCap, the server's Retry-After is bounded by it, and the
// jittered waits still by Cap.
func TestRetryAfterCapBoundsOnlyTheServersWaits(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p := Policy{Base: time.Second, Cap: 2 * time.Second, RetryAfterCap: 20 * time.Second}
	require.Equal(t, 9*time.Second, p.delay(1, respWith("9"), fixed(almostOne), clock), "a Retry-After past Cap is waited for")
	require.Equal(t, 20*time.Second, p.delay(1, respWith("3600"), fixed(almostOne), clock), "and bounded by RetryAfterCap")
	require.Less(t, p.delay(8, nil, fixed(almostOne), clock), 2*time.Second+time.Nanosecond, "a jittered wait is bounded by Cap")
	require.Equal(t, 2*time.Second, Policy{Cap: 2 * time.Second}.delay(1, respWith("9"), fixed(almostOne), clock), "without it, Cap bounds Retry-After too")
}

func TestDelayWithRealClockCapsAFarDate(t *testing.T) {
	p := Policy{Cap: 5 * time.Second}
	resp := respWith(time.Now().AddDate(10, 0, 0).UTC().Format(http.TimeFormat))
	require.Equal(t, 5*time.Second, p.Delay(1, resp, nil))
}

func TestNextStopsAfterMaxAttempts(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		lastRetry   int // the last retry allowed; 0 for none
	}{
		{"one attempt allows no retries", 1, 0},
		{"three attempts allow two retries", 3, 2},
		{"zero means five attempts, four retries", 0, 4},
		{"negative means five attempts, four retries", -2, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Policy{MaxAttempts: tt.maxAttempts}
			for retry := 1; retry <= tt.lastRetry; retry++ {
				_, err := p.Next(context.Background(), retry, nil, 0, fixed(0))
				require.NoError(t, err, "retry %d", retry)
			}
			wait, err := p.Next(context.Background(), tt.lastRetry+1, nil, 0, fixed(0))
			require.ErrorIs(t, err, ErrAttemptsExhausted)
			require.Equal(t, time.Duration(0), wait)
		})
	}
}

func TestNextErrorsSayWhyTheyStopped(t *testing.T) {
	_, err := Policy{MaxAttempts: 3}.Next(context.Background(), 3, nil, 0, nil)
	require.EqualError(t, err, "backoff: attempts exhausted: 3 of 3 attempts made")

	_, err = Policy{Base: time.Second, MaxElapsed: time.Minute}.Next(context.Background(), 1, nil, 59500*time.Millisecond, fixed(almostOne))
	require.EqualError(t, err, "backoff: elapsed time exhausted: waiting 1s after 59.5s would pass 1m0s")
}

func TestNextKeepsWithinMaxElapsed(t *testing.T) {
	p := Policy{Base: 200 * time.Millisecond, Cap: time.Second, MaxElapsed: time.Second}
	tests := []struct {
		name    string
		elapsed time.Duration
		resp    *http.Response
		r       float64
		want    time.Duration
		wantErr error
	}{
		{"wait that ends exactly at the limit is allowed", 800 * time.Millisecond, nil, almostOne, 200 * time.Millisecond, nil},
		{"wait that passes the limit is refused", 900 * time.Millisecond, nil, almostOne, 0, ErrElapsedExhausted},
		{"short jitter still fits", 900 * time.Millisecond, nil, 0.25, 50 * time.Millisecond, nil},
		{"Retry-After that passes the limit is refused", 500 * time.Millisecond, respWith("1"), 0, 0, ErrElapsedExhausted},
		{"elapsed beyond the limit refuses even no wait", 1001 * time.Millisecond, nil, 0, 0, ErrElapsedExhausted},
		{"negative elapsed counts as zero", -time.Hour, nil, almostOne, 200 * time.Millisecond, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, err := p.Next(context.Background(), 1, tt.resp, tt.elapsed, fixed(tt.r))
			require.ErrorIs(t, err, tt.wantErr)
			require.Equal(t, tt.want, wait)
		})
	}
}

func TestNextChecksTheContextBeforeWaiting(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	p := Policy{Base: time.Hour, Cap: 3 * time.Hour, MaxElapsed: 10 * time.Hour}

	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel()

	t.Run("wait that passes the deadline is refused", func(t *testing.T) {
		wait, err := p.next(ctx, 1, respWith("7200"), 0, nil, clock)
		require.ErrorIs(t, err, ErrDeadline)
		require.EqualError(t, err, "backoff: wait would pass the context deadline: waiting 2h0m0s with 1h0m0s left")
		require.Equal(t, time.Duration(0), wait)
	})
	t.Run("wait that ends at the deadline is refused", func(t *testing.T) {
		_, err := p.next(ctx, 1, respWith("3600"), 0, nil, clock)
		require.ErrorIs(t, err, ErrDeadline)
	})
	t.Run("wait before the deadline is allowed", func(t *testing.T) {
		wait, err := p.next(ctx, 1, respWith("3599"), 0, nil, clock)
		require.NoError(t, err)
		require.Equal(t, 3599*time.Second, wait)
	})
	t.Run("cancelled context stops at once", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(context.Background())
		ccancel()
		_, err := p.Next(cctx, 1, nil, 0, nil)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// randomResponse returns nil, a response without Retry-After, or one with a
// random Retry-After in any form, valid or not.
func randomResponse(rng *rand.Rand, now time.Time) *http.Response {
	switch rng.IntN(8) {
	case 0:
		return nil
	case 1:
		return respWith()
	case 2:
		return respWith(strconv.FormatInt(rng.Int64N(1000), 10))
	case 3:
		return respWith(strconv.FormatUint(rng.Uint64(), 10) + "999")
	case 4:
		return respWith(now.Add(time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour).Format(http.TimeFormat))
	case 5:
		return respWith(now.Add(time.Duration(rng.Int64N(int64(48*time.Hour))) - 24*time.Hour).Format(time.ANSIC))
	case 6:
		return respWith("-" + strconv.Itoa(rng.IntN(100)))
	default:
		return respWith(strconv.Itoa(rng.IntN(10)), "garbage", strconv.Itoa(rng.IntN(100)))
	}
}

func TestPropertyDelayWithinZeroAndCap(t *testing.T) {
	now := time.Now()
	check := func(base, cap int64, retry int, r float64, seed uint64) bool {
		p := Policy{Base: time.Duration(base), Cap: time.Duration(cap)}
		rng := rand.New(rand.NewPCG(seed, 1))
		d := p.delay(retry, randomResponse(rng, now), fixed(r), func() time.Time { return now })
		return d >= 0 && d <= p.WithDefaults().Cap
	}
	require.NoError(t, quick.Check(check, &quick.Config{MaxCount: 20000}))
}

func TestPropertyWaitsFollowingNextStayWithinBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261130, 4))
	now := time.Now()
	clock := func() time.Time { return now }
	for i := range 5000 {
		p := Policy{
			Base:        time.Duration(rng.Int64N(int64(time.Minute))),
			Cap:         time.Duration(rng.Int64N(int64(time.Hour))),
			MaxAttempts: rng.IntN(30) - 2,
			MaxElapsed:  time.Duration(rng.Int64N(int64(10 * time.Minute))),
		}
		limits := p.WithDefaults()
		var elapsed, waited time.Duration
		attempts := 1
		for retry := 1; ; retry++ {
			elapsed += time.Duration(rng.Int64N(int64(5 * time.Second))) // the attempt itself
			wait, err := p.next(context.Background(), retry, randomResponse(rng, now), elapsed, rng.Float64, clock)
			if err != nil {
				require.Equal(t, time.Duration(0), wait)
				break
			}
			require.GreaterOrEqual(t, wait, time.Duration(0), "case %d: %+v", i, p)
			require.LessOrEqual(t, wait, limits.Cap, "case %d: %+v", i, p)
			elapsed += wait
			waited += wait
			attempts++
			require.LessOrEqual(t, elapsed, limits.MaxElapsed, "case %d: %+v", i, p)
		}
		require.LessOrEqual(t, waited, limits.MaxElapsed, "case %d: %+v", i, p)
		require.LessOrEqual(t, attempts, limits.MaxAttempts, "case %d: %+v", i, p)
	}
}

func BenchmarkDelay(b *testing.B) {
	p := Policy{}
	b.Run("jitter", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			_ = p.Delay(i%20+1, nil, nil)
		}
	})
	b.Run("retry-after seconds", func(b *testing.B) {
		resp := respWith("7")
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Delay(1, resp, nil)
		}
	})
	b.Run("retry-after date", func(b *testing.B) {
		resp := respWith(time.Now().Add(time.Minute).UTC().Format(http.TimeFormat))
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Delay(1, resp, nil)
		}
	})
	b.Run("parallel jitter", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				_ = p.Delay(i%20+1, nil, nil)
			}
		})
	})
}

func BenchmarkNext(b *testing.B) {
	p := Policy{MaxAttempts: 100, MaxElapsed: time.Hour}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, _ = p.Next(ctx, i%20+1, nil, time.Second, nil)
	}
}
