package client

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// A deposit is a sequence of steps (create; upload file P; publish; send an
// event), which a target returns for each payload. The engine (engine.go)
// guards every step the same way; a step only says what to send and what an
// answer means. Nothing in this file sends a request or touches the store.

// step is one write of a deposit.
type step struct {
	// Label names the step in errors ("publish step"); "" for the write
	// that creates the record itself.
	Label string
	// Target and Key are the store row that guards the step. The deposit's
	// primary step is stored under the Target's own name; other durable
	// steps under a name of their own, keyed by the deposit Key unless
	// they set Key.
	Target, Key string
	// Primary marks the step whose outcome and identifier are the
	// deposit's. Its row is the deposit's intent: it is recorded before the
	// deposit's first request, whichever step sends it.
	Primary bool
	// Durable steps have a store row: intent before their first request,
	// done once confirmed, answered from the store on a re-run. A step that
	// is not Durable (an S3 file object, written conditionally) is re-sent
	// on a re-run unless a later Durable step is done; its terminal answer
	// is recorded as the deposit's failure.
	Durable bool
	// Arbitrated reports that the server itself refuses a second effect of
	// the same request (a conditional create, an Idempotency-Key), so an
	// ambiguous answer is retried as it is. Otherwise the step's check runs
	// before the request is sent again, and before it is sent at all when
	// the store shows an earlier attempt.
	Arbitrated bool
	// KeepBody keeps the exact bytes first sent in the intent row, and
	// every later attempt, after a restart too, re-sends those bytes.
	KeepBody bool
	// Retention, when set, is how long the server remembers a request;
	// resuming an uncertain step older than that is logged as a warning.
	Retention time.Duration

	// Build returns the request; prior holds the identifiers of the
	// deposit's earlier steps, in order ("" for a step that has none).
	Build func(prior []string) (request, error)
	// Judge classifies an answer to the request. It must be a pure
	// function of the answer.
	Judge func(answer) verdict
	// Check, when set, finds out whether the step took effect: after an
	// "exists" answer without an identifier, a conflict, or, for a step
	// the server does not arbitrate, an ambiguous answer.
	Check *check
	// Fallback is the identifier of a step whose answers name none (the
	// record URL).
	Fallback string

	// Settled, when set, reports that earlier steps Settled this one too (a
	// file found committed needs no upload): it returns the step's
	// identifier, and the step is confirmed without a request, as created:
	// what Settled it is this deposit's own work (a file committed on its
	// own draft).
	Settled func(prior []string) (string, bool)
	// RecordID marks the step whose identifier is the deposit's record id
	// beside the identifier its primary step minted (Result.RecordID).
	RecordID bool
	// Recheck, when set, is the store target of a row noted when this step
	// was created after its check had found nothing following an ambiguous
	// attempt: a search of an index that lags more than the settle time can
	// miss, so a later run looks again (seed.go).
	Recheck string
}

// request is one HTTP request a step or a check sends.
type request struct {
	Method, URL string
	Header      http.Header
	// Body is sent as it is; open, when set instead, streams a Body afresh
	// for every attempt (a file), size bytes long.
	Body []byte
	Open func() (io.Reader, error)
	Size int64
	// Full says that more than the answer's class is read from it (an
	// identifier, a record, a page of search hits): its body is read up
	// to maxFullAnswerBytes, else maxAnswerBytes.
	Full bool
}

// answer is what came back for one request: a response (its body read, at
// most maxAnswerBytes, or maxFullAnswerBytes for a full request) or a
// transport error.
type answer struct {
	URL    string // of the request, for resolving Location
	Status int
	Header http.Header
	Body   []byte
	Err    error
	// AfterAmbiguous says that an earlier attempt of the same request
	// was answered ambiguously, or not at all (a connection lost after
	// the request was written, which net/http may retry by itself): that
	// attempt may have taken effect.
	AfterAmbiguous bool
}

// class is what an answer means for a step, per the protocol table.
type class int

const (
	classCreated   class = iota // the request took effect
	classExists                 // the server says it had taken effect already
	classConflict               // exists only if the step's check finds it
	classRetry                  // it did not happen (429, 503, in flight): retry
	classAmbiguous              // it may have happened (5xx, timeout, dropped)
	classTerminal               // refused for good: record the failure
	classStop                   // concerns every item: stop the run
	classCanceled               // our own context ended
)

func (c class) Retryable() bool { return c == classRetry || c == classAmbiguous }

// verdict is a step's judgement of one answer.
type verdict struct {
	Class class
	// ID is the identifier the answer names, if any.
	ID string
	// Problem, when set, explains the answer better than the body's
	// Problem detail does (a WebDAV 409, an S3 error code).
	Problem string
	// Warn is logged once per client when set: something about the server
	// the user should know (it may ignore If-None-Match).
	Warn string
	// InFlight, for a retryable answer, says the server is still working on
	// this very request (an Idempotency-Key locked): retry after at least
	// this long, within the step's time budget rather than its attempts.
	InFlight time.Duration
}

// check is how the engine finds out whether a step took effect: a read-back
// of the record, a search for a marker. It sends its request (retried like
// any other) and judges the answer. After an ambiguous attempt, "absent" is
// trusted only once the check has looked again settle later, for a server
// whose reads lag its writes.
type check struct {
	Build func(prior []string) (request, error)
	Judge func(answer) finding
	// Settle is how long to wait before trusting "absent" after an
	// ambiguous attempt; 0 trusts the first look.
	Settle time.Duration
}

// findingKind is what a check found.
type findingKind int

const (
	findingPresent findingKind = iota // the step took effect: id names it
	findingAbsent                     // it did not (or cannot be read: refused)
	findingForeign                    // something that is not ours holds the name: terminal
	findingUnknown                    // no usable answer: retry or leave unresolved
)

// finding is a check's judgement of one answer.
type finding struct {
	Kind findingKind
	// ID is the identifier of what was found, if the answer names one.
	ID string
	// Problem explains a foreign record or an unusable answer.
	Problem string
	// Warn is logged once per client when set (a read the server refuses).
	Warn string
	// Class is the class of an answer that settles nothing (findingUnknown):
	// retryable, or stop.
	Class class
	// herr is the answer as an error, filled in by the engine.
	herr *HTTPError
}

// checkSteps refuses a list of steps the engine could not guard as its
// target means. Each rule names a mistake that would otherwise pass
// silently: the engine would guard something other than what the target
// declared. It runs before a deposit's first request, so a target's mistake
// is that deposit's error and nothing is sent.
func checkSteps(steps []step) error {
	if len(steps) == 0 {
		return errors.New("steps: none: a deposit sends at least one request")
	}
	primary := -1
	for i := range steps {
		s := &steps[i]
		if err := checkStep(i, s); err != nil {
			return err
		}
		if s.Primary {
			if primary >= 0 {
				return fmt.Errorf("steps: %s and %s are both primary: exactly one step's row is the deposit's intent and its identifier the deposit's", stepName(primary, &steps[primary]), stepName(i, s))
			}
			primary = i
		}
		for j := range i {
			if o := &steps[j]; s.Durable && o.Durable && s.Target == o.Target && s.Key == o.Key {
				return fmt.Errorf("steps: %s and %s share one store row (%s, %s): each durable step is guarded by a row of its own", stepName(j, o), stepName(i, s), s.Target, s.Key)
			}
		}
	}
	if primary < 0 {
		return errors.New("steps: no primary step: exactly one step's row is the deposit's intent and its identifier the deposit's")
	}
	return nil
}

// checkStep applies the rules that concern one step alone.
func checkStep(i int, s *step) error {
	name := stepName(i, s)
	switch {
	case s.Build == nil || s.Judge == nil:
		return fmt.Errorf("steps: %s: a step needs both build and judge", name)
	case !s.Primary && s.Label == "":
		return fmt.Errorf("steps: step %d has no label: every step but the primary one is named in errors", i+1)
	case s.Primary && !s.Durable:
		return fmt.Errorf("steps: %s is primary but not durable: the primary step's row is the deposit's intent", name)
	case s.Durable && (s.Target == "" || s.Key == ""):
		return fmt.Errorf("steps: %s is durable without a store row (target and key)", name)
	case s.KeepBody && !s.Primary:
		return fmt.Errorf("steps: %s keeps its body but is not primary: only the primary step's first body is kept, by the deposit's claim", name)
	case !s.Durable && !s.Arbitrated:
		return fmt.Errorf("steps: %s is neither durable nor arbitrated: with no row, nothing would record that it may have been sent, and the server would not refuse a second effect", name)
	case s.Durable && !s.Arbitrated && s.Check == nil:
		return fmt.Errorf("steps: %s is not arbitrated and has no check: after an ambiguous answer nothing could tell whether it took effect", name)
	case s.Recheck != "" && (s.Check == nil || s.Arbitrated):
		return fmt.Errorf("steps: %s has a recheck row but no check, or is arbitrated: a recheck looks again for what a check missed", name)
	case s.RecordID && !s.Durable:
		return fmt.Errorf("steps: %s names the record id but is not durable: a replay could not answer it from the store", name)
	}
	return nil
}

// stepName names step i of a list in checkSteps' errors.
func stepName(i int, s *step) string {
	if s.Label == "" {
		return fmt.Sprintf("step %d (the record)", i+1)
	}
	return fmt.Sprintf("step %d (%s)", i+1, s.Label)
}
