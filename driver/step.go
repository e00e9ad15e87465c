package driver

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Step is one write of a deposit: what to send and what an answer means.
// A deposit is a list of steps (create; upload file P; publish), which a
// [Driver] returns for each payload. The engine guards every step the same
// way, by the fields below, and checks the list before anything is sent
// (see the package doc for its rules). A Step is read-only once returned.
type Step struct {
	// Label names the step in errors ("publish step"); "" for the write
	// that creates the record itself.
	Label string
	// Target and Key are the store row that guards a durable step, both
	// required: the primary step's is [Driver.Name] and the deposit key
	// (canonical.Keyed.Key); another durable step's is a target of its
	// own, one of [Driver.StepTargets], and the deposit key or a key
	// derived from it (one per file of a dataset).
	Target, Key string
	// Primary marks the step whose outcome and identifier are the
	// deposit's. Its row is the deposit's intent: it is recorded before the
	// deposit's first request, whichever step sends it.
	Primary bool
	// Durable steps have a store row: intent before their first request,
	// done once confirmed, answered from the store on a re-run. A step that
	// is not durable (an S3 file object, written conditionally) is re-sent
	// on a re-run unless a later durable step is done; its terminal answer
	// is recorded as the deposit's failure.
	Durable bool
	// Arbitrated promises that the server itself refuses a second effect
	// of the same request (a conditional create, an Idempotency-Key), so
	// an ambiguous answer is retried as it is. Otherwise Check runs before
	// the request is sent again, and before it is sent at all when the
	// store shows an earlier attempt.
	Arbitrated bool
	// KeepBody keeps the payload first deposited (its Keyed.Body) in the
	// intent row: every later attempt, after a restart too, runs steps
	// built from that body, not from the one given now (which has the same
	// key, but may differ in what the key leaves out), so a Build that
	// depends only on Keyed.Body re-sends the exact bytes first sent. Only
	// the primary step may keep its body.
	KeepBody bool
	// Accepts says that the server may answer the request [Accepted]: it
	// took the request and settles it later (a publication finished in the
	// background, a queued deposit, a review sent to a curator). Such a
	// step is durable and has a Check, which the engine polls until the
	// step settles; the request is never sent again, and a later run polls
	// the check before anything else.
	Accepts bool
	// Retention, when set, is how long the server remembers a request
	// (an idempotency key); resuming an uncertain step older than that is
	// logged as a warning.
	Retention time.Duration

	// Build returns the request; prior holds the identifiers of the
	// deposit's earlier steps, in order ("" for a step that has none). An
	// error is the deposit's (the engine reports it as invalid), but for
	// one wrapping [ErrNotYet].
	Build func(prior []string) (Request, error)
	// Judge classifies an answer to the request. It must be a pure
	// function of the answer: it keeps no state between answers and does
	// not rewrite the body for a later reader.
	Judge func(Answer) Verdict
	// Check, when set, finds out whether the step took effect: after an
	// [Exists] answer without an identifier, a [Conflict], or, for a step
	// that is not Arbitrated, an [Ambiguous] answer; and it is polled
	// until a step the server [Accepted] settles.
	Check *Check
	// Fallback is the identifier of a step whose answers name none (the
	// record URL), fixed when the step is built.
	Fallback string
	// FallbackFrom, when set, is Fallback computed from the identifiers of
	// the deposit's earlier steps once they are settled (prior, as Build
	// gets them): a publish whose answer names nothing, or an [Exists]
	// that names no identifier, falls back on the record the create step
	// made. It is used in Fallback's stead; "" is no fallback.
	FallbackFrom func(prior []string) string

	// Settled, when set, reports that earlier steps settled this one too
	// (a file found committed needs no upload): it returns the step's
	// identifier, and the step is confirmed without a request, as created:
	// what settled it is this deposit's own work (a file committed on its
	// own draft).
	Settled func(prior []string) (string, bool)
	// RecordID marks the step whose identifier is the deposit's record id
	// beside the identifier its primary step minted (the client's
	// Result.RecordID).
	RecordID bool
	// Parts, when set, sends the step's body in parts that a later run
	// resumes (see [Parts]); Build may then be nil.
	Parts *Parts
	// Recheck, when set, is the store target of a row noted when this step
	// was created after its Check had found nothing following an ambiguous
	// attempt: a search of an index that lags more than Check.Settle can
	// miss, so a later run looks again.
	Recheck string
}

// FallbackID is the step's fallback identifier given the identifiers of
// the earlier steps: [Step.FallbackFrom]'s, when set, else [Step.Fallback].
func (s *Step) FallbackID(prior []string) string {
	if s.FallbackFrom != nil {
		return s.FallbackFrom(prior)
	}
	return s.Fallback
}

// ErrNotYet is wrapped by a Build error that says the step cannot be sent
// now because of what the server holds, not because of the payload (the
// one draft a record's next version may have is another deposit's, still
// open): nothing is sent, and the deposit is left unresolved, for a later
// run to build again, rather than reported invalid.
var ErrNotYet = errors.New("not yet")

// Request is one HTTP request a step or a check sends. The engine adds the
// caller's headers (never over one the driver [Driver.Guards]), retries it
// and reads its answer.
type Request struct {
	Method, URL string
	Header      http.Header
	// Body is sent as it is; Open, when set instead, streams a body afresh
	// for every attempt (a file), Size bytes long.
	Body []byte
	Open func() (io.Reader, error)
	Size int64
	// Full says that more than the answer's class is read from it (an
	// identifier, a record, a page of search hits): the engine reads its
	// body up to 16 MiB and refuses a larger one; otherwise it reads
	// 64 KiB, enough for a problem detail.
	Full bool
}

// Answer is what came back for one request: a response, its body read
// (see [Request.Full]), or a transport error.
type Answer struct {
	URL    string // of the request, for resolving Location
	Status int
	Header http.Header
	Body   []byte
	// Err is the transport error of an answer with no response (a
	// timeout, a connection lost): Status is 0 then.
	Err error
	// AfterAmbiguous says that an earlier attempt of the same request
	// was answered ambiguously, or not at all (a connection lost after
	// the request was written, which net/http may retry by itself): that
	// attempt may have taken effect, so an "exists" may be our own.
	AfterAmbiguous bool
	// Since, in an answer to a [Check]'s request, is when the step it
	// looks for was first attempted: when the store recorded the step's
	// intent, before its first request, in this run or an earlier one (the
	// row's CreatedAt, by the store's clock). A
	// record the server made before Since is not the effect of any attempt
	// of the step, so a check that pages a listing newest first may stop
	// at the first record older than Since, less a margin for the skew
	// between that clock and the server's. It is zero where what the check
	// looks for may be older than the intent (after an [Exists] or a
	// [Conflict] answer: another client's record, or one whose store was
	// lost), and for a step without a row, and in a step's own answers:
	// a check must then look at everything.
	Since time.Time
}

// Class is what an answer means for a step.
type Class int

const (
	Created   Class = iota // the request took effect
	Exists                 // the server says it had taken effect already
	Conflict               // exists only if the step's Check finds it
	Retry                  // it did not take effect (429, 503, in flight): retry
	Ambiguous              // it may have taken effect (5xx, timeout, dropped)
	Terminal               // refused for good: record the failure
	Stop                   // concerns every item (credentials, endpoint): stop the run
	Canceled               // our own context ended
	Accepted               // taken, to be settled later: poll the Check, never re-send
)

// Retryable reports whether the engine retries an answer of class c.
func (c Class) Retryable() bool { return c == Retry || c == Ambiguous }

var classNames = [...]string{"created", "exists", "conflict", "retry", "ambiguous", "terminal", "stop", "canceled", "accepted"}

// String is the class's name in lower case ("ambiguous"), for a test's
// failure or a log line; Class(n) for a value outside the constants.
func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Verdict is a step's judgement of one answer.
type Verdict struct {
	Class Class
	// ID is the identifier the answer names, if any.
	ID string
	// Problem, when set, explains the answer better than the body's
	// problem detail does (a WebDAV 409, an S3 error code).
	Problem string
	// Warn is logged once per client when set: something about the server
	// the user should know (it may ignore If-None-Match).
	Warn string
	// Tag is the server's tag of the version of the record the answer
	// created or replaced (its ETag, a CouchDB revision), "" when it names
	// none: with an identity, the next update of the object is made on the
	// condition that the server still holds that version.
	Tag string
	// InFlight, for a retryable answer, says the server is still working on
	// this very request (an Idempotency-Key locked): retry after at least
	// this long, within the step's time budget rather than its attempts.
	InFlight time.Duration
}

// Check is how the engine finds out whether a step took effect: a read-back
// of the record, a search for a marker. The engine sends its request
// (retried like any other) and judges the answer. After an ambiguous
// attempt, [Absent] is trusted only once the check has looked again Settle
// later, for a server whose reads lag its writes.
type Check struct {
	Build func(prior []string) (Request, error)
	// Judge must be a pure function of the answer, like [Step.Judge].
	Judge func(Answer) Finding
	// Settle is how long to wait before trusting [Absent] after an
	// ambiguous attempt; 0 trusts the first look.
	Settle time.Duration
	// Poll is how long, within one run, the engine polls a step the
	// server accepted and has not settled ([Accepted], [Pending]), counted
	// from the answer that said so; 0 means the client's retry policy's
	// MaxElapsed (2 minutes by default). The waits between polls are the
	// retry policy's backoff (capped by its Cap), or the Retry-After of the
	// last answer (capped by its RetryAfterCap).
	Poll time.Duration
	// SettleFromIntent counts Settle, for an attempt the store shows from
	// an earlier run or another process, from when the store recorded the
	// step's intent (before its first request, by the store's clock)
	// rather than from the check's first look in this run: a run that
	// starts Settle after the intent trusts its first look, instead of
	// waiting Settle again in every run. A later attempt than the first
	// may have been sent since the intent, so a look trusted this way may
	// come less than Settle after the last attempt: set it only where a
	// request sent again that early has no second effect (Crossref
	// refuses a deposit whose timestamp is not newer). An ambiguous
	// attempt of this run is still waited for Settle from its answer.
	SettleFromIntent bool
}

// FindingKind is what a check found.
type FindingKind int

const (
	Present FindingKind = iota // the step took effect: Finding.ID names it
	Absent                     // it did not (or cannot be read: refused)
	Foreign                    // something that is not ours holds the name: terminal
	Unknown                    // no usable answer: retry, else leave unresolved
	Pending                    // accepted, not settled yet: poll again, never re-send
)

var kindNames = [...]string{"present", "absent", "foreign", "unknown", "pending"}

// String is the kind's name in lower case ("absent"); FindingKind(n) for
// a value outside the constants.
func (k FindingKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "FindingKind(" + strconv.Itoa(int(k)) + ")"
}

// Finding is a check's judgement of one answer.
type Finding struct {
	Kind FindingKind
	// ID is the identifier of what was found, if the answer names one.
	ID string
	// Problem explains a foreign record or an unusable answer.
	Problem string
	// Warn is logged once per client when set (a read the server refuses).
	Warn string
	// Class is the class of an answer that settles nothing ([Unknown]),
	// [Classify]'s as a rule: a retryable class looks again within the
	// attempt limit, [Stop] stops the run, and any other, or the limit
	// reached, leaves the deposit unresolved. A success class ([Created],
	// [Exists], [Accepted]: what Classify makes of a 200 that is not the
	// page the check reads, a body cut short, a proxy's page) is taken as
	// [Ambiguous]: looked at again, then unresolved.
	Class Class
	// Then, when set, says that this answer settles nothing alone: the
	// engine looks further with Then, and its finding is the check's (a
	// search that missed, then the collection's listing; a listing, then
	// each record newer than the attempt). Kind is ignored then, but for
	// [Unknown], which ends the look as it always does. A Judge builds
	// Then from the answer alone, so it stays pure; it bounds its own
	// chain (the engine stops one past a thousand looks, unresolved).
	// [Check.Settle] and [Check.Poll] are the first check's: after a
	// settle wait the whole chain is looked at again.
	Then *Check
}
