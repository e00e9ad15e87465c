package repotest

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrFaultSpec is wrapped by every error ParseFaults returns.
var ErrFaultSpec = errors.New("repotest: bad fault spec")

// FaultsHelp describes the fault grammar; `deposit serve --help` prints it.
const FaultsHelp = `Fault spec: comma-separated rules, applied to writes: creates (PUT or POST),
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

// Fault kinds, as written in a spec and as counted in Stats.FaultsByKind.
const (
	kindDrop    = "drop"
	kindReset   = "reset"
	kindSlow    = "slow"
	kindLatency = "latency"
)

// fault is one fault to inject: a kind and its parameters.
type fault struct {
	kind       string        // "drop", "reset", "slow", or a status code such as "503"
	status     int           // for status kinds
	retryAfter int           // seconds; -1 for none
	dateAfter  bool          // retryAfter as an HTTP-date instead of seconds
	every      time.Duration // slow: delay between body bytes
}

// rule is a probabilistic fault: it covers a band [lo, hi) of the unit interval.
type rule struct {
	fault
	p float64
}

// Faults is a parsed fault spec. The zero value injects no faults.
// Faults is immutable and safe for concurrent use.
type Faults struct {
	rules   []rule
	nth     map[int]fault
	latency time.Duration
	reads   bool
}

// ParseFaults parses a spec in the grammar of FaultsHelp. The empty spec is valid
// and injects nothing. Errors wrap ErrFaultSpec and name the offending rule.
func ParseFaults(spec string) (Faults, error) {
	var f Faults
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return f, nil
	}
	total := 0.0
	for i, raw := range strings.Split(spec, ",") {
		r := strings.TrimSpace(raw)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: rule %d %q: %s", ErrFaultSpec, i+1, r, fmt.Sprintf(format, args...))
		}
		parts := strings.Split(r, ":")
		head, value, hasValue := strings.Cut(parts[0], "=")
		switch {
		case r == "":
			return Faults{}, bad("empty rule")
		case head == "reads":
			if hasValue || len(parts) > 1 {
				return Faults{}, bad("reads takes no value")
			}
			f.reads = true
		case head == kindLatency:
			d, err := time.ParseDuration(value)
			if err != nil || d < 0 || len(parts) > 1 {
				return Faults{}, bad("want latency=DURATION, such as latency=2ms")
			}
			f.latency += d
		case head == "nth":
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return Faults{}, bad("want nth=N:KIND with N >= 1")
			}
			if len(parts) < 2 {
				return Faults{}, bad("want nth=N:KIND, such as nth=3:drop")
			}
			if _, dup := f.nth[n]; dup {
				return Faults{}, bad("request %d already has a fault", n)
			}
			ft, err := parseFault(parts[1], parts[2:])
			if err != nil {
				return Faults{}, bad("%v", err)
			}
			if f.nth == nil {
				f.nth = map[int]fault{}
			}
			f.nth[n] = ft
		default:
			ft, err := parseFault(head, parts[1:])
			if err != nil {
				return Faults{}, bad("%v", err)
			}
			p, err := strconv.ParseFloat(value, 64)
			if !hasValue || err != nil || !(p > 0 && p <= 1) {
				return Faults{}, bad("want %s=P with P in (0,1]", head)
			}
			total += p
			if total > 1+1e-9 {
				return Faults{}, bad("probabilities add up to more than 1")
			}
			f.rules = append(f.rules, rule{fault: ft, p: p})
		}
	}
	return f, nil
}

// parseFault parses a kind and its parameters.
func parseFault(kind string, params []string) (fault, error) {
	ft := fault{kind: kind, retryAfter: -1}
	switch kind {
	case kindDrop, kindReset:
	case kindSlow:
		ft.every = 10 * time.Millisecond
	case "500", "502", "503", "504", "429", "409":
		ft.status, _ = strconv.Atoi(kind)
		if ft.status == http.StatusConflict {
			ft.retryAfter = 1
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
			ft.retryAfter, ft.dateAfter = n, name == "retry-after-date"
		case name == "every" && kind == kindSlow:
			d, err := time.ParseDuration(value)
			if err != nil || d < 0 {
				return ft, fmt.Errorf("want every=DURATION")
			}
			ft.every = d
		default:
			return ft, fmt.Errorf("parameter %q does not apply to %s", p, kind)
		}
	}
	return ft, nil
}

// String returns the spec in a normal form that ParseFaults reads back to the same Faults.
func (f Faults) String() string {
	var out []string
	for _, r := range f.rules {
		out = append(out, r.kind+"="+strconv.FormatFloat(r.p, 'g', -1, 64)+r.params())
	}
	if f.latency > 0 {
		out = append(out, "latency="+f.latency.String())
	}
	for n := 1; len(f.nth) > 0 && n <= maxNth(f.nth); n++ {
		if ft, ok := f.nth[n]; ok {
			out = append(out, "nth="+strconv.Itoa(n)+":"+ft.kind+ft.params())
		}
	}
	if f.reads {
		out = append(out, "reads")
	}
	return strings.Join(out, ",")
}

func maxNth(m map[int]fault) int {
	top := 0
	for n := range m {
		top = max(top, n)
	}
	return top
}

// params renders the non-default parameters of a fault.
func (ft fault) params() string {
	switch {
	case ft.kind == kindSlow && ft.every != 10*time.Millisecond:
		return ":every=" + ft.every.String()
	case ft.retryAfter >= 0 && ft.status != http.StatusConflict:
		if ft.dateAfter {
			return ":retry-after-date=" + strconv.Itoa(ft.retryAfter)
		}
		return ":retry-after=" + strconv.Itoa(ft.retryAfter)
	}
	return ""
}

// draw returns the fault for the attempt-th request (1-based) of class ("create" or
// "read") for key, and whether there is one. It depends only on its arguments.
func (f Faults) draw(seed int64, class, key string, attempt int) (fault, bool) {
	if ft, ok := f.nth[attempt]; ok {
		return ft, true
	}
	if len(f.rules) == 0 {
		return fault{}, false
	}
	u := unit(seed, class, key, attempt)
	lo := 0.0
	for _, r := range f.rules {
		if u >= lo && u < lo+r.p {
			return r.fault, true
		}
		lo += r.p
	}
	return fault{}, false
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

// injector applies a Faults to the requests of one server: it numbers the
// attempts per (class, key), counts the faults it injects, delays commits, and
// refuses, drops or trickles answers. Its maps and counters are guarded by mu,
// the owner's mutex, so the owner's Stats stay one snapshot.
type injector struct {
	faults  Faults
	seed    int64
	latency time.Duration                           // before every commit: the config's plus the spec's
	now     func() time.Time                        // for Retry-After dates
	done    <-chan struct{}                         // closed when the owner closes: ends every wait
	refuse  func(w http.ResponseWriter, status int) // writes a status fault's answer in the owner's format
	mu      *sync.Mutex

	attempts map[string]int   // class + "\x00" + key -> requests seen
	count    int64            // faults injected, all kinds
	byKind   map[string]int64 // faults injected by kind
}

// newInjector returns an injector for f that delays every commit by latency
// plus the spec's latency rule.
func newInjector(f Faults, seed int64, latency time.Duration, now func() time.Time, done <-chan struct{},
	refuse func(http.ResponseWriter, int), mu *sync.Mutex) *injector {
	return &injector{
		faults: f, seed: seed, latency: latency + f.latency, now: now, done: done, refuse: refuse, mu: mu,
		attempts: map[string]int{}, byKind: map[string]int64{},
	}
}

// early numbers a request for (class, key), draws its fault, and injects the
// fault if it strikes before anything commits (reset, a status). It returns the
// fault, zero if none, and whether it answered the request. A "read" draws
// nothing unless the spec has the reads rule.
func (in *injector) early(w http.ResponseWriter, class, key string) (fault, bool) {
	if class == "read" && !in.faults.reads {
		return fault{}, false
	}
	in.mu.Lock()
	ak := class + "\x00" + key
	in.attempts[ak]++
	attempt := in.attempts[ak]
	in.mu.Unlock()
	ft, _ := in.faults.draw(in.seed, class, key, attempt)
	return in.apply(w, ft)
}

// apply injects ft if it strikes before anything commits (reset, a status),
// and reports whether it answered the request.
func (in *injector) apply(w http.ResponseWriter, ft fault) (fault, bool) {
	switch {
	case ft.kind == kindReset:
		in.counted(ft)
		hangUp(w)
		return ft, true
	case ft.status != 0:
		in.counted(ft)
		if ft.retryAfter >= 0 {
			if ft.dateAfter {
				// HTTP-dates have whole seconds: round up so the wait is never shorter.
				at := in.now().Add(time.Duration(ft.retryAfter)*time.Second + time.Second - 1)
				w.Header().Set("Retry-After", at.UTC().Format(http.TimeFormat))
			} else {
				w.Header().Set("Retry-After", strconv.Itoa(ft.retryAfter))
			}
		}
		in.refuse(w, ft.status)
		return ft, true
	}
	return ft, false
}

// counted counts ft as injected.
func (in *injector) counted(ft fault) {
	in.mu.Lock()
	in.count++
	in.byKind[ft.kind]++
	in.mu.Unlock()
}

// delay sleeps for the latency before a commit and reports whether it slept
// fully. Only Close ends it: a client that gives up does not stop a commit.
func (in *injector) delay() bool { return sleep(in.latency, in.done, nil) }

// finish writes an answer, unless ft drops it or trickles its body.
func (in *injector) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, hdr http.Header, body []byte) {
	if ft.kind == kindDrop {
		in.counted(ft)
		hangUp(w)
		return
	}
	maps.Copy(w.Header(), hdr)
	if body != nil {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	if ft.kind != kindSlow || len(body) == 0 {
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	in.counted(ft)
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	for i := range body {
		if _, err := w.Write(body[i : i+1]); err != nil {
			return
		}
		_ = rc.Flush()
		if i < len(body)-1 && !sleep(ft.every, r.Context().Done(), in.done) {
			return
		}
	}
}

// sleep waits for d unless stop or cancel (either may be nil) is closed first,
// and reports whether it slept fully.
func sleep(d time.Duration, stop, cancel <-chan struct{}) bool {
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

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// HTTP/2 and other writers that cannot be hijacked: abort the stream instead.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
