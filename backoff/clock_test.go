package backoff

import (
	"sync"
	"time"
)

// fakeClock is a clock whose time moves only when a test calls Advance.
// Every timer it creates is announced on started, so a test knows a wait has
// begun and how long it is. It does not emulate timers' Reset.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	started chan time.Duration
}

type fakeTimer struct {
	at      time.Time
	c       chan time.Time
	stopped bool
	fired   bool
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, started: make(chan time.Duration, 64)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	t := &fakeTimer{at: f.now.Add(d), c: make(chan time.Time, 1)}
	f.timers = append(f.timers, t)
	f.mu.Unlock()
	f.started <- d
	stop := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		active := !t.stopped && !t.fired
		t.stopped = true
		return active
	}
	return t.c, stop
}

// Advance moves the clock forward and fires the timers that are due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	for _, t := range f.timers {
		if !t.stopped && !t.fired && !t.at.After(f.now) {
			t.fired = true
			t.c <- f.now
		}
	}
}

// timerCount returns how many timers were created.
func (f *fakeClock) timerCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}
