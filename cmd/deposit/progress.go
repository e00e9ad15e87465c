package main

import (
	"fmt"
	"io"
	"iter"
	"os"
	"strconv"
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

	requests  atomic.Int64 // HTTP requests sent, counted by a client hook
	files     transfers    // dataset files being sent, by a client hook
	itemsRead atomic.Int64 // items the run has read from the input
	// waiting counts the deposits waiting for a key another process
	// leases, waitUntil the latest end of those leases (p.mu), waitSaid
	// whether the run has said why it waits.
	waiting   atomic.Int64
	waitUntil time.Time
	waitSaid  atomic.Bool

	mu      sync.Mutex
	sum     client.Summary
	pace    pacing
	drawn   bool // a bar is on screen
	stopped bool
	// halting: the run stops sending (an interrupt), so no ETA is shown.
	halting bool
	// outage: the endpoint stopped accepting connections and the run
	// waits for it, so the ETA says nothing; "waiting for the endpoint"
	// stands in its place until it answers again.
	outage bool
	done   chan struct{}
	wg     sync.WaitGroup
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
	p.files.logf = p.logf
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

// add counts one settled item. A follow-up replaces an item counted
// unresolved.
func (p *progress) add(r client.ItemResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Outcome == client.OutcomeSkipped {
		return
	}
	if r.FollowUp {
		p.sum.Total--
		p.sum.Unresolved--
	}
	p.sum.Total++
	switch r.Outcome {
	case client.OutcomeCreated:
		p.sum.Created++
	case client.OutcomeExisting:
		p.sum.Existing++
	case client.OutcomeReplayed:
		p.sum.Replayed++
	case client.OutcomeUpdated:
		p.sum.Updated++
	case client.OutcomeStale:
		p.sum.Stale++
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

// leaseWait follows the deposits waiting for another process's lease
// (client.Hooks.OnLeaseWait). The first wait is said on a line of its own,
// since a re-run after a kill can otherwise sit silent for a lease's length.
// Only waits are counted, not every key met leased: a key whose holder the
// store proves dead (a local SQLite store, see dedup.SQLite.OwnerGone) is
// taken over at once and never waited for.
func (p *progress) leaseWait(e client.LeaseWaitEvent) {
	if e.Done {
		p.waiting.Add(-1)
		return
	}
	p.waiting.Add(1)
	p.mu.Lock()
	if e.Until.After(p.waitUntil) {
		p.waitUntil = e.Until
	}
	p.mu.Unlock()
	if !p.waitSaid.Swap(true) {
		p.logf("waiting for keys whose lease another process holds (a run still going, or one that ended without releasing them and left no lock to tell it: an older deposit's, or any on PostgreSQL): each is taken over when its lease ends, by %s if its holder is gone (--lease)",
			e.Until.Local().Format("15:04:05"))
	}
}

// stopping writes line, the acknowledgement of an interrupt, above the
// bar, and from then on shows "stopping" where the ETA was: the run no
// longer goes where the ETA says.
func (p *progress) stopping(line string) {
	p.mu.Lock()
	p.halting = true
	p.mu.Unlock()
	p.logf("%s", line)
}

// endpointOutage returns the hook that says when the endpoint, which had
// answered, stops accepting connections and when it answers again.
func (p *progress) endpointOutage(endpoint string) func(client.EndpointOutageEvent) {
	return func(e client.EndpointOutageEvent) {
		p.mu.Lock()
		p.outage = !e.Done
		p.mu.Unlock()
		if e.Done {
			p.logf("the endpoint %s answers again, after %s; the run goes on", redact(endpoint), e.Waited.Round(time.Millisecond))
			return
		}
		p.logf("the endpoint %s stopped accepting connections (%s); waiting up to %s for it to answer again (--endpoint-outage)",
			redact(endpoint), lastAnswer(e.Err), e.Budget)
	}
}

// logf writes one log line above the bar.
func (p *progress) logf(format string, args ...any) {
	_, _ = p.Write([]byte(fmt.Sprintf(format, args...) + "\n"))
}

func (p *progress) tick() {
	p.files.tick()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.pace.sample(time.Since(p.start))
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

// followRate lets the progress say when the client's own rate limit paces
// the run: rateWait is the client's (client.Client.RateWait); given says
// that --rate set the limit, else it is the default of protocol.
func (p *progress) followRate(given bool, protocol string, rateWait func() (float64, time.Duration)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pace = pacing{given: given, protocol: protocol, wait: rateWait}
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

// draw redraws the bar; p.mu held.
func (p *progress) draw() {
	fmt.Fprint(p.w, "\r\033[K"+p.bar(time.Since(p.start), p.width()))
	p.drawn = true
}

// Parts of the bar, in the order they are dropped when the terminal is too
// narrow for all of them: detail first, the failed and unresolved counts
// never.
const (
	partPaceWhy   = 1 << iota // " (the client's limit, not the server's)"
	partRequests              // "; 42 requests"
	partBytes                 // "; 1.5 GiB sent, 48 MiB/s, 40s left for 1 file"
	partBreakdown             // " (1 created, 0 existing, 1 replayed)"
	partPace                  // " at --rate 1.5/s"
	partGraphic               // "[=====     ]"
	partRate                  // "3 items/s"
	partTotal                 // "3 items: "
	partInvalid               // ", 1 invalid"
	partETA                   // "ETA 12s"
	partPercent               // "25%"
	partDone                  // "2 done, "
	partAll       = 1<<iota - 1
)

// bar is the bar's text after elapsed on a terminal columns wide, its last
// column left free so that the cursor does not wrap; p.mu held. Parts are
// dropped in their order (see partRequests) until the rest fits, so the
// failed and unresolved counts stay on screen however narrow the terminal
// (the line is cut only when they alone do not fit).
func (p *progress) bar(elapsed time.Duration, columns int) string {
	width := columns - 1
	var line string
	for drop := 0; ; drop = drop<<1 | 1 {
		line = p.barText(elapsed, partAll&^drop)
		if len(line) <= width || drop == partAll {
			break
		}
	}
	if len(line) > width && width > 0 {
		line = line[:width]
	}
	return line
}

// barText is the bar with the parts in show; p.mu held.
func (p *progress) barText(elapsed time.Duration, show int) string {
	var head, pace []string
	if f := p.fraction(); f >= 0 {
		switch {
		case show&partGraphic != 0:
			const barWidth = 20
			full := int(f * barWidth)
			head = append(head, "["+strings.Repeat("=", full)+strings.Repeat(" ", barWidth-full)+"]",
				fmt.Sprintf("%3.0f%%", f*100))
		case show&partPercent != 0:
			head = append(head, fmt.Sprintf("%.0f%%", f*100))
		}
	}
	if rate, ok := p.rate(elapsed); ok && show&partRate != 0 {
		pace = append(pace, rate)
	}
	if eta, ok := p.eta(elapsed); ok && show&partETA != 0 {
		pace = append(pace, "ETA "+eta.String())
	}
	if word := p.waitWord(); word != "" && show&partETA != 0 {
		pace = append(pace, word)
	}
	if len(pace) > 0 {
		head = append(head, strings.Join(pace, "; ")+p.pace.note(show&partPace != 0, show&partPaceWhy != 0))
	}
	counts := p.countsText(show)
	if len(head) == 0 {
		return counts
	}
	return strings.Join(head, " ") + " | " + counts
}

// countsText is the items and requests so far, with the parts in show;
// p.mu held.
func (p *progress) countsText(show int) string {
	s := p.sum
	var b strings.Builder
	if show&partTotal != 0 {
		b.WriteString(plural(s.Total, "item") + ": ")
	}
	if show&partDone != 0 {
		fmt.Fprintf(&b, "%d done", s.Created+s.Existing+s.Replayed+s.Updated+s.Stale)
		if show&partBreakdown != 0 {
			fmt.Fprintf(&b, " (%d created, %d existing, %d replayed", s.Created, s.Existing, s.Replayed)
			if s.Updated+s.Stale > 0 {
				fmt.Fprintf(&b, ", %d updated, %d stale", s.Updated, s.Stale)
			}
			b.WriteString(")")
		}
		b.WriteString(", ")
	}
	fmt.Fprintf(&b, "%d failed", s.Failed)
	if show&partInvalid != 0 {
		fmt.Fprintf(&b, ", %d invalid", s.Invalid)
	}
	fmt.Fprintf(&b, ", %d unresolved", s.Unresolved)
	if show&partBytes != 0 {
		if bytes := p.files.text(time.Now()); bytes != "" {
			fmt.Fprintf(&b, "; %s", bytes)
		}
	}
	if show&partRequests != 0 {
		fmt.Fprintf(&b, "; %s", plural(int(p.requests.Load()), "request"))
		if w := int(p.waiting.Load()); w > 0 {
			fmt.Fprintf(&b, "; %d waiting for another process's lease (until %s)", w, p.waitUntil.Local().Format("15:04:05"))
		}
	}
	return b.String()
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
	elapsed := time.Since(p.start)
	var pace []string
	if rate, ok := p.rate(elapsed); ok {
		pace = append(pace, rate)
	}
	if eta, ok := p.eta(elapsed); ok {
		pace = append(pace, "ETA "+eta.String())
	}
	if word := p.waitWord(); word != "" {
		pace = append(pace, word)
	}
	text := p.countsText(partAll)
	if len(pace) > 0 {
		// The first line the client's limit paces says why; later lines
		// just name the limit.
		text += "; " + strings.Join(pace, "; ") + p.pace.note(true, !p.pace.explained)
		p.pace.explained = p.pace.explained || p.pace.paced
	}
	return text
}

// waitWord is what the progress shows where the ETA was while the run
// does not go where the ETA says: "stopping" after an interrupt, "waiting
// for the endpoint" in an outage of it; "" otherwise. p.mu held.
func (p *progress) waitWord() string {
	switch {
	case p.halting:
		return "stopping"
	case p.outage:
		return "waiting for the endpoint"
	}
	return ""
}

// rate is the items settled per second; p.mu held.
func (p *progress) rate(elapsed time.Duration) (string, bool) {
	if elapsed <= 0 {
		return "", false
	}
	return fmt.Sprintf("%.0f items/s", float64(p.sum.Total)/elapsed.Seconds()), true
}

// eta is the time left, to the second: the items not yet settled (those
// read so far, scaled by the share of the input read), each taking as long
// as the items sent so far took. Replays and invalid lines cost next to
// nothing, so they count in neither: a run that begins with replays does
// not promise the new items at the replays' pace. Unknown until the size
// of the input is known and an item was sent, and none once the run
// stops sending; p.mu held.
func (p *progress) eta(elapsed time.Duration) (time.Duration, bool) {
	if p.waitWord() != "" {
		return 0, false
	}
	f, read := p.fraction(), p.itemsRead.Load()
	sent := p.sum.Total - p.sum.Replayed - p.sum.Stale - p.sum.Invalid
	if f <= 0 || read == 0 || sent <= 0 {
		return 0, false
	}
	left := float64(read)/f - float64(p.sum.Total)
	if left <= 0 {
		return 0, false
	}
	per := float64(elapsed) / float64(sent)
	return time.Duration(left * per).Round(time.Second), true
}

// count passes items on, counting them as read: the ETA's estimate of how
// many the input holds.
func (p *progress) count(items iter.Seq[client.Item]) iter.Seq[client.Item] {
	return func(yield func(client.Item) bool) {
		for it := range items {
			p.itemsRead.Add(1)
			if !yield(it) {
				return
			}
		}
	}
}

// paceWindow is how far back the progress looks to tell whether the
// client's rate limit paces the run.
const paceWindow = 10 * time.Second

// pacedShare is the share of the time over paceWindow that the run's
// requests, summed, must have spent waiting for the client's rate limit
// for the progress to say that the limit paces the run. Waiting half the
// time or more, requests queue for the limit: the server could take them
// faster. A run paced by the server (or by its own concurrency) waits next
// to nothing, since it sends below the limit.
const pacedShare = 0.5

// pacing follows how long a run's requests wait for the client's rate
// limit, to say when that limit, not the server, sets the pace. The zero
// value says nothing.
type pacing struct {
	given    bool   // --rate set the limit
	protocol string // whose default the limit is otherwise
	wait     func() (float64, time.Duration)
	rate     float64 // the limit, requests per second; 0 when unlimited
	samples  []paceSample
	// paced: the requests waited for the limit pacedShare of the time
	// over the last paceWindow; explained: a plain progress line said why.
	paced, explained bool
}

// paceSample is the time requests had waited for the limit at elapsed.
type paceSample struct{ elapsed, waited time.Duration }

// sample takes the time waited so far at elapsed and decides paced over
// the window: the oldest sample kept is the last one at least paceWindow
// old, so the window spans at least paceWindow once the run is that old.
func (pc *pacing) sample(elapsed time.Duration) {
	if pc.wait == nil {
		return
	}
	var waited time.Duration
	pc.rate, waited = pc.wait()
	if pc.rate <= 0 {
		return
	}
	if len(pc.samples) == 0 {
		pc.samples = append(pc.samples, paceSample{}) // the run's start
	}
	pc.samples = append(pc.samples, paceSample{elapsed, waited})
	for len(pc.samples) > 2 && elapsed-pc.samples[1].elapsed >= paceWindow {
		pc.samples = pc.samples[1:]
	}
	base := pc.samples[0]
	span := elapsed - base.elapsed
	pc.paced = span > 0 && float64(waited-base.waited) >= pacedShare*float64(span)
}

// note is what follows the pace when the client's limit paces the run:
// which limit (with limit), and why it matters (with why); "" otherwise.
func (pc *pacing) note(limit, why bool) string {
	if !pc.paced || !limit {
		return ""
	}
	rate := strconv.FormatFloat(pc.rate, 'g', 3, 64) + "/s"
	text := " at --rate " + rate
	if !pc.given {
		text = " at " + rate + ", the " + pc.protocol + " default of --rate"
	}
	if why {
		text += " (the client's limit, not the server's)"
	}
	return text
}
