package backoff

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewLimiterWithoutARateIsUnlimited(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		require.Nil(t, NewLimiter(rate), "rate %v", rate)
	}
}

func TestNilLimiterNeverWaits(t *testing.T) {
	var l *Limiter
	for range 1000 {
		require.NoError(t, l.Wait(context.Background()))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, l.Wait(ctx), context.Canceled)
}

// startWait runs l.Wait in a goroutine and returns its result channel.
func startWait(ctx context.Context, l *Limiter) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	return done
}

func TestLimiterSpacesRequests(t *testing.T) {
	tests := []struct {
		name      string
		perSecond float64
		interval  time.Duration
	}{
		{"two per second wait half a second", 2, 500 * time.Millisecond},
		{"fractional rate waits longer than a second", 0.4, 2500 * time.Millisecond},
		{"DataCite's limit waits 100ms", 3000.0 / 300, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeClock(time.Now())
			l := newLimiter(tt.perSecond, fc)
			ctx := context.Background()

			require.NoError(t, l.Wait(ctx), "the first request goes at once")
			require.Equal(t, 0, fc.timerCount())
			for range 3 {
				done := startWait(ctx, l)
				require.Equal(t, tt.interval, <-fc.started)
				fc.Advance(tt.interval)
				require.NoError(t, <-done)
			}
			fc.Advance(10 * tt.interval)
			require.NoError(t, l.Wait(ctx), "an idle limiter allows one request at once, no burst")
			done := startWait(ctx, l)
			require.Equal(t, tt.interval, <-fc.started)
			fc.Advance(tt.interval)
			require.NoError(t, <-done)
		})
	}
}

func TestLimiterChecksTheDeadlineBeforeWaiting(t *testing.T) {
	now := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel()
	fc := newFakeClock(now.Add(time.Hour - 100*time.Millisecond))
	l := newLimiter(2, fc)

	require.NoError(t, l.Wait(ctx))
	err := l.Wait(ctx)
	require.ErrorIs(t, err, ErrDeadline)
	require.Equal(t, 0, fc.timerCount(), "no wait was started")

	// The refused request gave its turn back: the next one waits one
	// interval, not two.
	done := startWait(context.Background(), l)
	require.Equal(t, 500*time.Millisecond, <-fc.started)
	fc.Advance(500 * time.Millisecond)
	require.NoError(t, <-done)
}

func TestLimiterStopsWhenCancelledMidWait(t *testing.T) {
	fc := newFakeClock(time.Now())
	l := newLimiter(0.5, fc)
	require.NoError(t, l.Wait(context.Background()))

	ctx, cancel := context.WithCancel(context.Background())
	done := startWait(ctx, l)
	require.Equal(t, 2*time.Second, <-fc.started)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	// The cancelled wait gave its turn back.
	done = startWait(context.Background(), l)
	require.Equal(t, 2*time.Second, <-fc.started)
	fc.Advance(2 * time.Second)
	require.NoError(t, <-done)
}

func TestLimiterSharedByGoroutines(t *testing.T) {
	// 40 requests at 4000 per second take about 10ms of real time.
	l := NewLimiter(4000)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for range 8 {
		wg.Go(func() {
			for range 5 {
				errs <- l.Wait(context.Background())
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func BenchmarkLimiterWait(b *testing.B) {
	b.Run("nil", func(b *testing.B) {
		var l *Limiter
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Wait(ctx)
		}
	})
	b.Run("rate too high to wait", func(b *testing.B) {
		l := NewLimiter(1e12)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Wait(ctx)
		}
	})
}
