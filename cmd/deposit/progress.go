package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/depositkit/deposit/client"
)

// Progress refresh intervals: a terminal bar is redrawn often, a log gets a
// plain line now and then.
const (
	barInterval  = 200 * time.Millisecond
	lineInterval = 5 * time.Second
)

// progress reports a run on stderr: a live one-line bar when stderr is a
// terminal, a plain line every few seconds when it is not, and log lines
// (invalid input, failures, recovered items) in between. It is safe for
// concurrent use.
type progress struct {
	w     io.Writer
	tty   bool
	width func() int // terminal width, tty only
	start time.Time
	size  int64        // input size in bytes, 0 when unknown (not a regular file)
	read  func() int64 // input bytes consumed

	requests atomic.Int64 // HTTP requests sent, counted by a client hook

	mu      sync.Mutex
	sum     client.Summary
	drawn   bool // a bar is on screen
	stopped bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// isTerminal reports whether w is a terminal, and its width function.
func isTerminal(w io.Writer) (bool, func() int) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, nil
	}
	return true, func() int {
		w, _, err := term.GetSize(int(f.Fd()))
		if err != nil || w <= 0 {
			return 80
		}
		return w
	}
}

// newProgress starts reporting on w. interval is the refresh interval; 0
// means barInterval on a terminal and lineInterval otherwise.
func newProgress(w io.Writer, size int64, read func() int64, interval time.Duration) *progress {
	tty, width := isTerminal(w)
	p := &progress{w: w, tty: tty, width: width, start: time.Now(), size: size, read: read, done: make(chan struct{})}
	switch {
	case interval > 0:
	case tty:
		interval = barInterval
	default:
		interval = lineInterval
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.tick()
			}
		}
	}()
	return p
}

// add counts one settled item.
func (p *progress) add(r client.ItemResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sum.Total++
	switch r.Outcome {
	case client.OutcomeCreated:
		p.sum.Created++
	case client.OutcomeExisting:
		p.sum.Existing++
	case client.OutcomeReplayed:
		p.sum.Replayed++
	case client.OutcomeFailed:
		p.sum.Failed++
	case client.OutcomeInvalid:
		p.sum.Invalid++
	default:
		p.sum.Unresolved++
	}
}

// Write writes log text (whole lines) above the bar. slog handlers write
// through it too.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	n, err := p.w.Write(b)
	if p.tty && !p.stopped {
		p.draw()
	}
	return n, err
}

// logf writes one log line above the bar.
func (p *progress) logf(format string, args ...any) {
	_, _ = p.Write([]byte(fmt.Sprintf(format, args...) + "\n"))
}

func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if p.tty {
		p.draw()
		return
	}
	pct := ""
	if f := p.fraction(); f >= 0 {
		pct = fmt.Sprintf(" (%.0f%% of the input read)", f*100)
	}
	fmt.Fprintf(p.w, "progress: %s%s\n", p.status(), pct)
}

// stop ends the bar; later log lines are plain.
func (p *progress) stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.done)
		p.clear()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// clear erases the bar; p.mu held.
func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

// draw redraws the bar; p.mu held. Rate and ETA come first, so a narrow
// terminal cuts the counts, not the time left.
func (p *progress) draw() {
	line := p.counts()
	if pace := p.pace(); pace != "" {
		line = pace + " | " + line
	}
	if f := p.fraction(); f >= 0 {
		const barWidth = 20
		full := int(f * barWidth)
		line = fmt.Sprintf("[%s%s] %3.0f%% %s", strings.Repeat("=", full), strings.Repeat(" ", barWidth-full), f*100, line)
	}
	if w := p.width() - 1; len(line) > w && w > 0 {
		line = line[:w]
	}
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.drawn = true
}

// fraction is the share of the input read, or -1 when the size is unknown.
func (p *progress) fraction() float64 {
	if p.size <= 0 {
		return -1
	}
	return min(1, float64(p.read())/float64(p.size))
}

// status is the progress text of a log line: counts, rate, ETA; p.mu held.
func (p *progress) status() string {
	if pace := p.pace(); pace != "" {
		return p.counts() + "; " + pace
	}
	return p.counts()
}

// counts is the items and requests so far; p.mu held.
func (p *progress) counts() string {
	s := p.sum
	done := s.Created + s.Existing + s.Replayed
	return fmt.Sprintf("%s: %d done (%d created, %d existing, %d replayed), %d failed, %d invalid, %d unresolved; %d requests",
		plural(s.Total, "item"), done, s.Created, s.Existing, s.Replayed, s.Failed, s.Invalid, s.Unresolved, p.requests.Load())
}

// pace is the rate and, when the input's size is known, the time left;
// p.mu held.
func (p *progress) pace() string {
	elapsed := time.Since(p.start)
	secs := elapsed.Seconds()
	if secs <= 0 {
		return ""
	}
	text := fmt.Sprintf("%.0f items/s", float64(p.sum.Total)/secs)
	if f := p.fraction(); f > 0 && f < 1 {
		eta := time.Duration(float64(elapsed) * (1 - f) / f)
		text += fmt.Sprintf("; ETA %s", eta.Round(time.Second))
	}
	return text
}
