package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startSleep runs sleep in a goroutine and returns its result channel.
func startSleep(ctx context.Context, d time.Duration, clk clock) <-chan error {
	done := make(chan error, 1)
	go func() { done <- sleep(ctx, d, clk) }()
	return done
}

func TestSleepReturnsWhenTheWaitIsOver(t *testing.T) {
	fc := newFakeClock(time.Now())
	done := startSleep(context.Background(), 5*time.Second, fc)

	require.Equal(t, 5*time.Second, <-fc.started)
	fc.Advance(4 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("sleep returned %v before its wait was over", err)
	default:
	}
	fc.Advance(time.Second)
	require.NoError(t, <-done)
}

func TestSleepStopsWhenCancelledMidWait(t *testing.T) {
	fc := newFakeClock(time.Now())
	ctx, cancel := context.WithCancel(context.Background())
	done := startSleep(ctx, time.Hour, fc)

	require.Equal(t, time.Hour, <-fc.started)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestSleepChecksBeforeWaiting(t *testing.T) {
	now := time.Now()
	deadlineCtx, cancel := context.WithDeadline(context.Background(), now.Add(time.Hour))
	defer cancel()
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()

	tests := []struct {
		name      string
		ctx       context.Context
		d         time.Duration
		wantErr   error
		wantTimer bool
	}{
		{"wait past the deadline fails at once", deadlineCtx, 2 * time.Hour, ErrDeadline, false},
		{"wait ending at the deadline fails at once", deadlineCtx, time.Hour, ErrDeadline, false},
		{"wait before the deadline starts", deadlineCtx, time.Hour - time.Nanosecond, nil, true},
		{"cancelled context fails at once", cancelled, time.Second, context.Canceled, false},
		{"cancelled context fails even without a wait", cancelled, 0, context.Canceled, false},
		{"zero wait returns at once", context.Background(), 0, nil, false},
		{"negative wait returns at once", context.Background(), -time.Second, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFakeClock(now)
			done := startSleep(tt.ctx, tt.d, fc)
			if tt.wantTimer {
				<-fc.started
				fc.Advance(tt.d)
			}
			require.ErrorIs(t, <-done, tt.wantErr)
			require.Equal(t, map[bool]int{false: 0, true: 1}[tt.wantTimer], fc.timerCount())
		})
	}
}

func TestSleepDeadlineErrorSaysSo(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	err := Sleep(ctx, 3*time.Hour)
	require.ErrorIs(t, err, ErrDeadline)
	require.Regexp(t, `^backoff: wait would pass the context deadline: waiting 3h0m0s with (59m\d+(\.\d+)?s|1h0m0s) left$`, err.Error())
}

func TestSleepWithTheSystemClock(t *testing.T) {
	t.Run("short wait completes", func(t *testing.T) {
		require.NoError(t, Sleep(context.Background(), time.Millisecond))
	})
	t.Run("long wait ends on cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Sleep(ctx, time.Hour) }()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}
