package repotest

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/depositkit/deposit/internal/faultspec"
)

// ErrFaultSpec is wrapped by every error ParseFaults returns.
var ErrFaultSpec = faultspec.ErrSpec

// FaultsHelp describes the fault grammar; `deposit serve --help` prints it.
const FaultsHelp = faultspec.Help

// Faults is a parsed fault spec. The zero value injects no faults.
// Faults is immutable and safe for concurrent use. Its String method
// returns the spec in a normal form that ParseFaults reads back to the
// same Faults. Package drivertest applies the same grammar to any handler.
type Faults = faultspec.Spec

// ParseFaults parses a spec in the grammar of FaultsHelp. The empty spec is valid
// and injects nothing. Errors wrap ErrFaultSpec and name the offending rule.
func ParseFaults(spec string) (Faults, error) { return faultspec.Parse(spec) }

// fault is one fault to inject: a kind and its parameters.
type fault = faultspec.Fault

// Fault kinds, as written in a spec and as counted in Stats.FaultsByKind.
const (
	kindDrop = faultspec.KindDrop
	kindSlow = faultspec.KindSlow
)

// sleep waits for d unless stop or cancel (either may be nil) is closed first,
// and reports whether it slept fully.
func sleep(d time.Duration, stop, cancel <-chan struct{}) bool {
	return faultspec.Sleep(d, stop, cancel)
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) { faultspec.HangUp(w) }

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
		faults: f, seed: seed, latency: latency + f.Latency(), now: now, done: done, refuse: refuse, mu: mu,
		attempts: map[string]int{}, byKind: map[string]int64{},
	}
}

// early numbers a request for (class, key), draws its fault, and injects the
// fault if it strikes before anything commits (reset, a status). It returns the
// fault, zero if none, and whether it answered the request. A "read" draws
// nothing unless the spec has the reads rule.
func (in *injector) early(w http.ResponseWriter, class, key string) (fault, bool) {
	if class == "read" && !in.faults.Reads() {
		return fault{}, false
	}
	in.mu.Lock()
	ak := class + "\x00" + key
	in.attempts[ak]++
	attempt := in.attempts[ak]
	in.mu.Unlock()
	ft, _ := in.faults.Draw(in.seed, class, key, attempt)
	return in.apply(w, ft)
}

// apply injects ft if it strikes before anything commits (reset, a status),
// and reports whether it answered the request.
func (in *injector) apply(w http.ResponseWriter, ft fault) (fault, bool) {
	switch {
	case ft.Kind == faultspec.KindReset:
		in.counted(ft)
		hangUp(w)
		return ft, true
	case ft.Status != 0:
		in.counted(ft)
		ft.SetRetryAfter(w.Header(), in.now())
		in.refuse(w, ft.Status)
		return ft, true
	}
	return ft, false
}

// counted counts ft as injected.
func (in *injector) counted(ft fault) {
	in.mu.Lock()
	in.count++
	in.byKind[ft.Kind]++
	in.mu.Unlock()
}

// delay sleeps for the latency before a commit and reports whether it slept
// fully. Only Close ends it: a client that gives up does not stop a commit.
func (in *injector) delay() bool { return sleep(in.latency, in.done, nil) }

// finish writes an answer, unless ft drops it or trickles its body.
func (in *injector) finish(w http.ResponseWriter, r *http.Request, ft fault, status int, hdr http.Header, body []byte) {
	if ft.Kind == kindDrop {
		in.counted(ft)
		hangUp(w)
		return
	}
	maps.Copy(w.Header(), hdr)
	if body != nil {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	if ft.Kind != kindSlow || len(body) == 0 {
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	in.counted(ft)
	w.WriteHeader(status)
	faultspec.Trickle(w, body, ft.Every, r.Context().Done(), in.done)
}
