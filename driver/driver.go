package driver

import (
	"net/http"
	"net/textproto"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
)

// Driver is a target ready for the engine: it names the store rows that
// guard its deposits and turns each payload into steps. A Driver carries
// its own configuration and never calls back into the engine. It must be
// safe for concurrent use by multiple goroutines.
type Driver interface {
	// Name is the store target of the deposit's own rows: the protocol
	// and the normalised endpoint (and anything else that tells two
	// repositories apart, such as a DOI prefix), built with [TargetName]
	// so that no credential is stored. It must not change between runs:
	// a store finds a deposit's outcome under it.
	Name() string
	// StepTargets are the store targets of its other durable steps,
	// each named by [StepTarget] from Name and the step's name, so that
	// `deposit status` counts their rows as steps, not deposits.
	StepTargets() []string
	// SecretFingerprint identifies a key secret that shapes the requests
	// (never the secret itself); "" when none does. A store used with
	// another secret is refused.
	SecretFingerprint() string
	// Guards reports whether the driver sets header name itself for
	// exactly-once (If-None-Match, Idempotency-Key), so that the caller's
	// headers may not replace it.
	Guards(name string) bool
	// Steps returns the steps of the deposit of k, or an error when the
	// driver cannot take the payload (nothing is recorded then). dir is
	// the directory of a dataset's files, "" for a payload that is not a
	// dataset.
	Steps(k canonical.Keyed, dir string) ([]Step, error)
}

// Guarded reports whether name is a header every built-in target reserves,
// for a [Driver.Guards] to start from: a caller's If-None-Match or
// If-Match would change what a write means, and an Idempotency-Key of the
// caller's would replace the one derived from the key.
func Guarded(name string) bool {
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "If-None-Match", "If-Match", "Idempotency-Key":
		return true
	}
	return false
}

// TransportWrapper is a Driver whose requests go through a transport of
// its own (S3's signer). The engine wraps it around its own transport,
// once per client, so the driver's transport sees every attempt.
type TransportWrapper interface {
	WrapTransport(next http.RoundTripper) http.RoundTripper
}

// RateSetter is a Driver with a default request rate, per second (a
// repository's published limit). The engine uses it when the client's
// configured rate is 0.
type RateSetter interface {
	DefaultRate() float64
}

// RequestPacer is a Driver that holds some of its requests to a rate of
// their own (a search endpoint's limit). The engine calls Pacer once per
// client; what it returns picks a request's own limiter (nil: none). The
// engine waits for that limiter before the request takes a slot of the
// batch or starts its attempt timeout: a request waiting for its rate
// holds nothing other requests need, and has not begun.
type RequestPacer interface {
	Pacer() func(*http.Request) *backoff.Limiter
}

// Payloader is a Driver that reads a payload its own way before it is
// keyed (Crossref's: a work's deposit XML, inline or in a file beside the
// input, keyed without the clock and batch id a regenerated file changes).
// The engine calls Payload with the payload's canonical bytes and keys
// keyText in its stead; both returned texts are JSON, which the engine
// canonicalizes in the client's form, so that body becomes Keyed.Body (what
// the steps receive, and what [Step.KeepBody] keeps) and the key is the key
// of keyText with the client's ignored members left out. An error makes the
// payload invalid; nothing is recorded then.
type Payloader interface {
	Payload(canonical []byte) (body, keyText []byte, err error)
}

// Seeder is a Driver whose server can be scanned for its deposits'
// markers, so that a lost store is recovered rather than repeated: for a
// server that refuses no second effect (InvenioRDM), a marker each
// deposit carries is the only trace of an earlier run.
//
// Before the first request of a deposit its store knows nothing of, the
// engine makes sure the store holds a scan of the server under
// ScanTarget: it waits ScanSettle, then requests ScanPage(1), (2), ...
// (retried like any request) and reads each with ReadScan, until the
// pages hold the total; a total above ScanWindow stops the run, since
// the scan cannot see every record. What the scan found is kept with a
// "scanned" mark in one store transaction (a scan cut short keeps
// nothing), once per store: the other processes sharing it wait for the
// mark. The engine then seeds the rows SeedRows returns for the records
// found with the deposit's Marker, last step first, and the deposit runs
// from the first step they leave undone.
//
// Pages combine so: the hits of the pages are added up, and the scan ends
// at a page with no hits, once the hits add up to the total the last page
// gave, or once they reach ScanWindow. Each page's total is the search's
// whole size as that page reports it (not added up), checked against
// ScanWindow page by page. A listing with no total and no window (pages
// until one comes back short) is read with ScanWindow math.MaxInt and a
// total of math.MaxInt for a full page and 0 for a short one, the last.
// ScanTarget names the scan's own store tables, not rows: it is not one of
// [Driver.StepTargets], which name rows; name it by [StepTarget] ("scan").
type Seeder interface {
	// Marker is the marker the deposit of k carries on the server.
	Marker(k canonical.Keyed) string
	// ScanTarget is the store target under which the scan is kept.
	ScanTarget() string
	// ScanPage is the request for page (from 1) of the scan.
	ScanPage(page int) Request
	// ReadScan reads one page: the records it found with a marker, how
	// many hits the page held and the search's total, and ok false for
	// an answer that is not a page.
	ReadScan(a Answer) (found []Found, hits, total int, ok bool)
	// ScanWindow is how many hits the search answers at most.
	ScanWindow() int
	// ScanProblem summarises an error body of a scan page in one line.
	ScanProblem(body []byte) string
	// ScanSettle is how long to wait before the scan, so that what a run
	// created just before its store was lost is searchable.
	ScanSettle() time.Duration
	// SeedRows is what the store should hold for steps, the steps of k,
	// given the records found with k's marker (at least one).
	SeedRows(k canonical.Keyed, steps []Step, found []Found) []SeedRow
}

// Found is a record a scan found carrying a marker.
type Found struct {
	Marker    string // the marker, as the record carries it
	ID        string // the record's id on the server
	PID       string // the identifier it was published with; "" if none
	Published bool   // published, or else a draft
}

// SeedRow is one store row a [Seeder] seeds for a deposit: the row of
// Steps[Step], done with ID (as created: the record is this deposit's own
// work, made in a run whose store is gone), or pending (Done false), so
// that the step's check runs before it is ever sent, or failed with
// Conflict (a 409), when the scan found what the deposit must not settle
// by itself (two records with one marker): reported, and not sent again
// unless failures are retried.
type SeedRow struct {
	Step     int
	ID       string
	Done     bool
	Conflict string
}

// ChainSeeder is a Driver whose lost store is recovered as a [Seeder]'s
// is, but whose scan is a chain of requests, each built from the answers
// before it, rather than pages of one search: Dataverse's, where the
// collection's contents (read from the database) name every dataset, a
// search page shows most of them with their markers, and each one the
// search does not show is read. The engine runs the chain from ScanStart
// (each look retried like any request, an answer Read cannot use
// classified as any answer is), and keeps what the looks found with the
// "scanned" mark in one transaction, as for a Seeder; the other methods
// are a Seeder's.
type ChainSeeder interface {
	Marker(k canonical.Keyed) string
	ScanTarget() string
	// ScanStart is the first look of the scan.
	ScanStart() *ScanLook
	// ScanProblem summarises, in one line, an answer of a look that Read
	// could not use.
	ScanProblem(a Answer) string
	ScanSettle() time.Duration
	SeedRows(k canonical.Keyed, steps []Step, found []Found) []SeedRow
}

// ScanLook is one request of a [ChainSeeder]'s scan. Read reads its
// answer: the records it found carrying a marker and the look that
// follows (nil: the scan is whole); ok false for an answer it cannot use
// (an error, or a body that is not what was asked for); stop non-nil when
// the scan cannot see every record, which stops the run.
type ScanLook struct {
	Request Request
	Read    func(a Answer) (found []Found, next *ScanLook, ok bool, stop error)
}

// FileMD5er is a Driver that needs each dataset file's MD5 digest beside
// its SHA-256 (a server that reports attachments or files by MD5). When
// WantsFileMD5 is true the engine's keyer hashes both in the one read of
// each file, and [canonical.Keyed.MD5] holds them.
type FileMD5er interface {
	WantsFileMD5() bool
}

// Prober is a Driver whose deposit of a plain payload is one conditional
// create of a record at a URL of its own (put, webdav, s3, couchdb), so
// that a probe (client.NewProbe) can ask whether the server honours the
// condition: the probe writes a record twice with that step's request,
// judges both answers with its Judge, and then removes the record with
// the request ProbeRemoval returns, given the answer that created it or,
// when that answer was lost, the answer to a GET of the record's URL.
type Prober interface {
	ProbeRemoval(created Answer) (Request, error)
}

// Serializer is a Driver some of whose deposits must not run at once
// although their keys differ: new versions of one InvenioRDM record share
// the one draft the server keeps open for the record's next version.
// Serial names what the deposit of k shares, "" for nothing. The engine
// runs the unfinished deposits of one name one at a time: within a
// process by a lock, across the processes sharing a store by a lease on
// the row (SerialTarget, name), taken before the deposit's own claim and
// held until its steps end. That row holds no outcome: it is removed when
// its lease is released, and a dead owner's is taken over as any lease is.
type Serializer interface {
	SerialTarget() string
	Serial(k canonical.Keyed) string
}
