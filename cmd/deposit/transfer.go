package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/depositkit/deposit/client"
)

// fileLineAfter is how long a file is sent before the progress gives it a
// line of its own: a large file otherwise sits behind "0 items" for as
// long as it takes.
const fileLineAfter = 3 * time.Second

// transfers follows the dataset files being sent (client.Hooks.OnTransfer):
// the bytes sent in all, and each file in flight, for the bytes, rate and
// time left the progress shows. It is safe for concurrent use.
type transfers struct {
	mu     sync.Mutex
	sent   int64     // bytes read to be sent, retries' again
	first  time.Time // the first byte's time, for the rate
	active map[string]*transfer
	logf   func(format string, args ...any)
}

// transfer is one file in flight.
type transfer struct {
	key, label       string
	size, held, sent int64
	began            time.Time
	said             bool // its own line was written
}

// event takes one client.TransferEvent.
func (ts *transfers) event(e client.TransferEvent) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	id := e.Key + "\x00" + e.Label
	t := ts.active[id]
	switch {
	case e.Begin:
		if ts.active == nil {
			ts.active = map[string]*transfer{}
		}
		ts.active[id] = &transfer{key: e.Key, label: e.Label, size: e.Size, held: e.Held, began: time.Now()}
	case e.Done:
		if t != nil && t.said && ts.logf != nil {
			took := time.Since(t.began)
			ts.logf("%s of item %s: %s sent in %s (%s/s)", t.label, shortKey(t.key), bytesText(t.sent), took.Round(time.Second), bytesText(int64(float64(t.sent)/max(took.Seconds(), 0.001))))
		}
		delete(ts.active, id)
	case e.Sent > 0:
		if ts.first.IsZero() {
			ts.first = time.Now()
		}
		ts.sent += e.Sent
		if t != nil {
			t.sent += e.Sent
		}
	}
}

// tick gives each file sent for longer than fileLineAfter its line.
func (ts *transfers) tick() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.active {
		if t.said || time.Since(t.began) < fileLineAfter || ts.logf == nil {
			continue
		}
		t.said = true
		held := ""
		if t.held > 0 {
			held = fmt.Sprintf(", %s of it held from an earlier run", bytesText(t.held))
		}
		ts.logf("%s of item %s: sending %s%s", t.label, shortKey(t.key), bytesText(t.size), held)
	}
}

// total is the bytes sent so far.
func (ts *transfers) total() int64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.sent
}

// text is the bytes part of the progress: "1.5 GiB sent, 48 MiB/s, 40s
// left for 2 files" (the time left that of the files in flight, at the
// rate so far); "" before a byte was sent.
func (ts *transfers) text(now time.Time) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.sent == 0 {
		return ""
	}
	text := bytesText(ts.sent) + " sent"
	elapsed := now.Sub(ts.first).Seconds()
	if elapsed <= 0.5 {
		return text
	}
	rate := float64(ts.sent) / elapsed
	text += ", " + bytesText(int64(rate)) + "/s"
	var left int64
	for _, t := range ts.active {
		left += max(0, t.size-t.held-t.sent)
	}
	if n := len(ts.active); n > 0 && rate > 0 {
		text += fmt.Sprintf(", %s left for %s", time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second), plural(n, "file"))
	}
	return text
}

// bytesText is n bytes in binary units: "512 B", "3.0 MiB", "1.25 GiB".
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTP"[exp]) + "iB"
}

// sizeFlag is a size in bytes given with a binary unit or none ("64MiB",
// "5GiB", "8388608"), or "off" (-1); 0 when not given.
type sizeFlag struct{ n int64 }

func (f *sizeFlag) String() string {
	switch {
	case f == nil || f.n == 0:
		return ""
	case f.n < 0:
		return "off"
	}
	return strconv.FormatInt(f.n, 10)
}

func (f *sizeFlag) Set(s string) error {
	if s == "off" {
		f.n = -1
		return nil
	}
	num, mult := s, int64(1)
	for i, u := range []string{"KiB", "MiB", "GiB"} {
		if n, ok := strings.CutSuffix(s, u); ok {
			num, mult = n, int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(num, "B"), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("want a size such as 64MiB, 1GiB or 8388608 bytes, or off")
	}
	f.n = n * mult
	return nil
}
