package backoff

import (
	"context"
	"fmt"
	"time"
)

// Sleep waits for d unless ctx is done first, in which case it returns
// ctx's error. It checks before waiting: when ctx is already done it returns
// ctx's error, and when ctx has a deadline that the wait would reach it
// returns at once an error wrapping [ErrDeadline] that gives the wait and the
// time left. A wait of zero or less returns nil at once.
func Sleep(ctx context.Context, d time.Duration) error {
	return sleep(ctx, d, systemClock{})
}

// sleep is Sleep with the clock injected.
func sleep(ctx context.Context, d time.Duration, clk clock) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if err := checkDeadline(ctx, d, clk.Now); err != nil {
		return err
	}
	c, stop := clk.NewTimer(d)
	defer stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c:
		return nil
	}
}

// checkDeadline returns an error wrapping ErrDeadline when a wait of d,
// started now, would reach ctx's deadline.
func checkDeadline(ctx context.Context, d time.Duration, now func() time.Time) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	if left := deadline.Sub(now()); d >= left {
		return fmt.Errorf("%w: waiting %v with %v left", ErrDeadline, d, max(left, 0).Round(time.Millisecond))
	}
	return nil
}

// clock is the time source of Sleep and Limiter; tests inject a fake one.
type clock interface {
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed and a
	// function that stops the timer.
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// systemClock is the real clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}
