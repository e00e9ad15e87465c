package backoff_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/depositkit/deposit/backoff"
)

// The ceiling doubles with every retry up to the cap; full jitter draws the
// wait uniformly below it. A source fixed just below 1 shows the ceilings.
func ExamplePolicy_Delay() {
	p := backoff.Policy{Base: 100 * time.Millisecond, Cap: time.Second}
	top := func() float64 { return 0.9999999999 }
	for retry := 1; retry <= 6; retry++ {
		fmt.Printf("retry %d: at most %v\n", retry, p.Delay(retry, nil, top).Round(time.Millisecond))
	}
	// Output:
	// retry 1: at most 100ms
	// retry 2: at most 200ms
	// retry 3: at most 400ms
	// retry 4: at most 800ms
	// retry 5: at most 1s
	// retry 6: at most 1s
}

// A server's Retry-After replaces the jittered wait, but never exceeds the
// policy's cap.
func ExamplePolicy_Delay_retryAfter() {
	p := backoff.Policy{Cap: 20 * time.Second}
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header:     http.Header{"Retry-After": {"3600"}},
	}
	fmt.Println(p.Delay(1, resp, nil))
	// Output: 20s
}

// Next drives a retry loop: it returns the wait before each retry and a
// reason to stop once the attempts or the time run out. A source fixed at
// 0.5 keeps the output stable; a seeded *rand.Rand's Float64 works as well.
func ExamplePolicy_Next() {
	p := backoff.Policy{Base: time.Second, Cap: 4 * time.Second, MaxAttempts: 10, MaxElapsed: 5 * time.Second}
	half := func() float64 { return 0.5 }
	ctx := context.Background()
	var elapsed time.Duration
	for retry := 1; ; retry++ {
		wait, err := p.Next(ctx, retry, nil, elapsed, half)
		if err != nil {
			fmt.Println("stop:", err)
			fmt.Println("out of time:", errors.Is(err, backoff.ErrElapsedExhausted))
			break
		}
		fmt.Printf("retry %d after %v\n", retry, wait.Round(time.Millisecond))
		elapsed += wait
	}
	// Output:
	// retry 1 after 500ms
	// retry 2 after 1s
	// retry 3 after 2s
	// stop: backoff: elapsed time exhausted: waiting 2s after 3.5s would pass 5s
	// out of time: true
}

func ExampleRetryAfter() {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Mon, 30 Nov 2026 08:00:30 GMT", "Sun, 06 Nov 1994 08:49:37 GMT", "-1", "soon"} {
		d, ok := backoff.RetryAfter(http.Header{"Retry-After": {v}}, now)
		fmt.Printf("%q: %v %v\n", v, d, ok)
	}
	// Output:
	// "120": 2m0s true
	// "Mon, 30 Nov 2026 08:00:30 GMT": 30s true
	// "Sun, 06 Nov 1994 08:49:37 GMT": 0s true
	// "-1": 0s false
	// "soon": 0s false
}

// Against a server that keeps failing, a shared budget stops the retries of a
// whole batch after 100 of them (500 tokens, 5 per retry).
func ExampleBudget() {
	budget := backoff.NewBudget(0)
	retries := 0
	var err error
	for err == nil {
		if err = budget.Spend(false); err == nil {
			retries++
		}
	}
	fmt.Println(retries, "retries")
	fmt.Println(err)

	budget.Refund(false) // a retry that succeeded gives its tokens back
	fmt.Println(budget.Spend(false))
	// Output:
	// 100 retries
	// backoff: retry budget exhausted: 0 of 500 tokens left, a retry needs 5
	// <nil>
}

// A wait that cannot finish before the context's deadline fails at once.
func ExampleSleep() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := backoff.Sleep(ctx, time.Hour)
	fmt.Println(errors.Is(err, backoff.ErrDeadline))
	// Output: true
}

func ExampleNewLimiter() {
	fmt.Println(backoff.NewLimiter(0) == nil) // no rate: unlimited

	l := backoff.NewLimiter(1000) // one request per millisecond
	ctx := context.Background()
	for range 3 {
		if err := l.Wait(ctx); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("sent 3")
	// Output:
	// true
	// sent 3
}
