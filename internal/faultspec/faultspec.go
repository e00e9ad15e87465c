// Package faultspec provides the fault grammar that package repotest's
// servers and package drivertest's middleware inject: a spec parsed once,
// and a fault drawn for each request from (seed, class, key, attempt)
// alone, so concurrency does not change which request meets which fault.
package faultspec

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrSpec is wrapped by every error Parse returns.
var ErrSpec = errors.New("repotest: bad fault spec")

// Help describes the fault grammar; `deposit serve --help` prints it.
const Help = `Fault spec: comma-separated rules, applied to writes: creates (PUT or POST),
the reference repository's deletes (DELETE), and under a stub with several steps
each of them (file uploads and commits, new versions, publishes, reviews,
Crossref uploads).

  drop=P          commit the record, then close the connection without answering
  reset=P         close the connection without answering and without committing
  500=P 502=P 504=P
                  answer that status before committing
  503=P 429=P     answer that status before committing; add Retry-After with
                  :retry-after=SECONDS or :retry-after-date=SECONDS (an HTTP-date
                  that many seconds from now)
  409=P           answer 409 "in flight" (Retry-After: 1) before committing
  slow=P          commit, then trickle the response body one byte at a time,
                  :every=DURATION between bytes (default 10ms)
  latency=DURATION
                  delay every create by DURATION before it commits
  nth=N:KIND[:PARAM...]
                  the Nth request (1-based) for a key gets KIND, whatever the dice say
  reads           faults also apply to reads (GET), counted separately

P is a probability in (0,1]; the probabilities of all rules add up to at most 1.
Each request draws one number from (seed, key, attempt for that key), so the same
seed gives the same faults at any concurrency. Example:
  drop=0.15,503=0.1:retry-after=1,429=0.05,500=0.05,latency=2ms,nth=3:drop`

// Fault kinds, as written in a spec and counted by the servers that inject them.
const (
	KindDrop    = "drop"
	KindReset   = "reset"
	KindSlow    = "slow"
	KindLatency = "latency"
)

// Fault is one fault to inject: a kind and its parameters.
type Fault struct {
	Kind       string        // "drop", "reset", "slow", or a status code such as "503"
	Status     int           // for status kinds
	RetryAfter int           // seconds; -1 for none
	DateAfter  bool          // RetryAfter as an HTTP-date instead of seconds
	Every      time.Duration // slow: delay between body bytes
}

// rule is a probabilistic fault: it covers a band [lo, hi) of the unit interval.
type rule struct {
	Fault
	p float64
}

// Spec is a parsed fault spec. The zero value injects no faults.
// Spec is immutable and safe for concurrent use.
type Spec struct {
	rules   []rule
	nth     map[int]Fault
	latency time.Duration
	reads   bool
}

// Latency is the spec's latency rule: the delay before every commit.
func (f Spec) Latency() time.Duration { return f.latency }

// Reads reports whether faults apply to reads too (the reads rule).
func (f Spec) Reads() bool { return f.reads }

// Parse parses a spec in the grammar of Help. The empty spec is valid
// and injects nothing. Errors wrap ErrSpec and name the offending rule.
func Parse(spec string) (Spec, error) {
	var f Spec
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return f, nil
	}
	total := 0.0
	for i, raw := range strings.Split(spec, ",") {
		r := strings.TrimSpace(raw)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: rule %d %q: %s", ErrSpec, i+1, r, fmt.Sprintf(format, args...))
		}
		parts := strings.Split(r, ":")
		head, value, hasValue := strings.Cut(parts[0], "=")
		switch {
		case r == "":
			return Spec{}, bad("empty rule")
		case head == "reads":
			if hasValue || len(parts) > 1 {
				return Spec{}, bad("reads takes no value")
			}
			f.reads = true
		case head == KindLatency:
			d, err := time.ParseDuration(value)
			if err != nil || d < 0 || len(parts) > 1 {
				return Spec{}, bad("want latency=DURATION, such as latency=2ms")
			}
			f.latency += d
		case head == "nth":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return Spec{}, bad("want nth=N:KIND with N >= 1")
			}
			if len(parts) < 2 {
				return Spec{}, bad("want nth=N:KIND, such as nth=3:drop")
			}
			if _, dup := f.nth[n]; dup {
				return Spec{}, bad("request %d already has a fault", n)
			}
			ft, err := parseFault(parts[1], parts[2:])
			if err != nil {
				return Spec{}, bad("%v", err)
			}
			if f.nth == nil {
				f.nth = map[int]Fault{}
			}
			f.nth[n] = ft
		default:
			ft, err := parseFault(head, parts[1:])
			if err != nil {
				return Spec{}, bad("%v", err)
			}
			p, err := strconv.ParseFloat(value, 64)
			if !hasValue || err != nil || !(p > 0 && p <= 1) {
				return Spec{}, bad("want %s=P with P in (0,1]", head)
			}
			total += p
			if total > 1+1e-9 {
				return Spec{}, bad("probabilities add up to more than 1")
			}
			f.rules = append(f.rules, rule{Fault: ft, p: p})
		}
	}
	return f, nil
}

// parseFault parses a kind and its parameters.
func parseFault(kind string, params []string) (Fault, error) {
	ft := Fault{Kind: kind, RetryAfter: -1}
	switch kind {
	case KindDrop, KindReset:
	case KindSlow:
		ft.Every = 10 * time.Millisecond
	case "500", "502", "503", "504", "429", "409":
		ft.Status, _ = strconv.Atoi(kind)
		if ft.Status == http.StatusConflict {
			ft.RetryAfter = 1
		}
	default:
		return ft, fmt.Errorf("unknown fault kind %q (want drop, reset, slow, 409, 429, 500, 502, 503 or 504)", kind)
	}
	for _, p := range params {
		name, value, _ := strings.Cut(p, "=")
		switch {
		case (name == "retry-after" || name == "retry-after-date") && (kind == "429" || kind == "503"):
			n, err := strconv.Atoi(value)
			if err != nil || n < 0 {
				return ft, fmt.Errorf("want %s=SECONDS", name)
			}
			ft.RetryAfter, ft.DateAfter = n, name == "retry-after-date"
		case name == "every" && kind == KindSlow:
			d, err := time.ParseDuration(value)
			if err != nil || d < 0 {
				return ft, fmt.Errorf("want every=DURATION")
			}
			ft.Every = d
		default:
			return ft, fmt.Errorf("parameter %q does not apply to %s", p, kind)
		}
	}
	return ft, nil
}

// String returns the spec in a normal form that Parse reads back to the same Spec.
func (f Spec) String() string {
	var out []string
	for _, r := range f.rules {
		out = append(out, r.Kind+"="+strconv.FormatFloat(r.p, 'g', -1, 64)+r.params())
	}
	if f.latency > 0 {
		out = append(out, "latency="+f.latency.String())
	}
	for n := 1; len(f.nth) > 0 && n <= maxNth(f.nth); n++ {
		if ft, ok := f.nth[n]; ok {
			out = append(out, "nth="+strconv.Itoa(n)+":"+ft.Kind+ft.params())
		}
	}
	if f.reads {
		out = append(out, "reads")
	}
	return strings.Join(out, ",")
}

func maxNth(m map[int]Fault) int {
	top := 0
	for n := range m {
		top = max(top, n)
	}
	return top
}

// params renders the non-default parameters of a fault.
func (ft Fault) params() string {
	switch {
	case ft.Kind == KindSlow && ft.Every != 10*time.Millisecond:
		return ":every=" + ft.Every.String()
	case ft.RetryAfter >= 0 && ft.Status != http.StatusConflict:
		if ft.DateAfter {
			return ":retry-after-date=" + strconv.Itoa(ft.RetryAfter)
		}
		return ":retry-after=" + strconv.Itoa(ft.RetryAfter)
	}
	return ""
}

// Draw returns the fault for the attempt-th request (1-based) of class ("create" or
// "read") for key, and whether there is one. It depends only on its arguments.
func (f Spec) Draw(seed int64, class, key string, attempt int) (Fault, bool) {
	if ft, ok := f.nth[attempt]; ok {
		return ft, true
	}
	if len(f.rules) == 0 {
		return Fault{}, false
	}
	u := unit(seed, class, key, attempt)
	lo := 0.0
	for _, r := range f.rules {
		if u >= lo && u < lo+r.p {
			return r.Fault, true
		}
		lo += r.p
	}
	return Fault{}, false
}

// unit maps (seed, class, key, attempt) to a number uniform in [0, 1).
func unit(seed int64, class, key string, attempt int) float64 {
	h := sha256.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(seed))
	binary.BigEndian.PutUint64(b[8:], uint64(attempt))
	h.Write(b[:])
	h.Write([]byte(class))
	h.Write([]byte{0})
	h.Write([]byte(key))
	sum := h.Sum(nil)
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / math.Exp2(53)
}

// SetRetryAfter sets the Retry-After header of a status fault that has
// one: seconds, or an HTTP-date that many seconds after now.
func (ft Fault) SetRetryAfter(h http.Header, now time.Time) {
	switch {
	case ft.RetryAfter < 0:
	case ft.DateAfter:
		// HTTP-dates have whole seconds: round up so the wait is never shorter.
		at := now.Add(time.Duration(ft.RetryAfter)*time.Second + time.Second - 1)
		h.Set("Retry-After", at.UTC().Format(http.TimeFormat))
	default:
		h.Set("Retry-After", strconv.Itoa(ft.RetryAfter))
	}
}

// Trickle writes body a byte at a time, every apart, flushing each, until
// stop or cancel (either may be nil) is closed; the header is written.
func Trickle(w http.ResponseWriter, body []byte, every time.Duration, stop, cancel <-chan struct{}) {
	rc := http.NewResponseController(w)
	for i := range body {
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		_ = rc.Flush()
		if i < len(body)-1 && !Sleep(every, stop, cancel) {
			return
		}
	}
}

// Sleep waits for d unless stop or cancel (either may be nil) is closed first,
// and reports whether it slept fully.
func Sleep(d time.Duration, stop, cancel <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-cancel:
		return false
	}
}

// HangUp closes the connection without an answer.
func HangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 and other writers that cannot be hijacked: abort the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
