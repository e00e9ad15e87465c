package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// Config configures a Client. Only Target and Store are required; every
// other zero field has the default its comment gives.
type Config struct {
	// Target is where deposits go and how: the Target of a package under
	// target (put, idempotencykey, webdav, s3, couchdb, datacite, invenio,
	// dataverse, crossref) or a target of one's own. Required.
	Target Target
	// Store remembers every step's outcome. Required; *dedup.SQLite is one.
	Store Store

	// Form is the canonical form keys are computed over; default
	// canonical.FormJCS.
	Form canonical.Form
	// Ignore lists JSON Pointers (RFC 6901) removed from the payload before
	// its key is computed, never from the body sent.
	Ignore []string

	// Identity lists the JSON Pointers whose values name the object a
	// payload describes (a dataset's id, a DOI): each a non-empty string or
	// an integer, in every payload. With an identity, an object keeps one
	// record: its first payload creates it, a later payload with other
	// content updates it (OutcomeUpdated) on the condition that the server
	// still holds the version this store applied, and a content the object
	// had before is stale (OutcomeStale): nothing is sent. The object key
	// is the SHA-256 of the canonical JSON array of the values, in the
	// pointers' order; the content key names the version. The pointers
	// join the key settings the store records. Only a target whose driver
	// is a driver.Updater takes an identity; nil means none: every payload
	// is a record of its own.
	Identity []string
	// VersionPointer, with an identity, names the member (an integer or
	// an RFC 3339 time) that orders an object's versions: a payload whose
	// version orders before or with the one the object holds is stale even
	// if never seen. Without it, "newer" means "later in this store",
	// which two machines with two stores, or a lost store, cannot tell.
	VersionPointer string
	// AllowRevert makes a stale payload an update: the object goes back
	// to a content it had.
	AllowRevert bool

	// Retry is the retry policy for each step; a zero field takes its value
	// from DefaultRetry.
	Retry backoff.Policy
	// Budget is the retry budget shared by every deposit of this client;
	// nil means a fresh budget with backoff's default capacity, which Run
	// raises to a retry's tokens for each item a batch lets wait at once.
	// Share one Budget between clients to share it between their batches.
	Budget *backoff.Budget
	// Rate limits requests per second (fractions allowed). 0 (unset) is
	// the target's default: unlimited, except datacite.Rate under DataCite
	// and invenio.Rate under InvenioRDM. NoRateLimit, or any negative Rate,
	// is unlimited under every target. Rate is a hard ceiling: the
	// adaptive rate (see StaticRate) only ever lowers it.
	Rate float64
	// StaticRate keeps the rate of this client's requests at Rate (or
	// unlimited) whatever the server answers. By default the rate adapts
	// beneath Rate (backoff.AdaptiveLimiter): 429 and 503 answers whose
	// share rises with the rate (a server's load limit) slow every deposit
	// down to about the rate the server accepts, and successes bring the
	// rate back; a share of throttles that does not fall at a lower rate is
	// taken as the server's background and slows nothing. A throttle's
	// retry then spends no retry budget: the lowered rate is what keeps
	// retries from becoming a storm. Once the rate is as low as it goes (1
	// request a second, or Rate when lower), throttles spend the budget
	// again, and when it runs out the run stops with an error wrapping
	// ErrStopRun and backoff.ErrBudgetExhausted: a server that throttles
	// everything still ends the run. A static rate against a server's
	// limit leaves most of a batch unresolved once the retry budget is
	// spent; it suits a caller that paces requests itself.
	StaticRate bool
	// RetryFailed re-sends items recorded as failed instead of reporting the
	// recorded failure again.
	RetryFailed bool
	// Lease is how long this client's claim on a key lasts in the store
	// unless renewed; it is renewed every tenth of that while the deposit
	// runs. Another process sharing the store does not send that key
	// meanwhile, and takes it over once a lease expires (its owner died).
	// Default DefaultLease.
	Lease time.Duration
	// StoreOutage is how long store calls are made again through an
	// outage of the store (a restart, a broken connection, a call past
	// its deadline: what dedup.IsTransient says may clear by itself),
	// with capped backoff, before the run stops with an error wrapping
	// ErrStoreUnavailable. Each call has a deadline: the time left on the
	// leases this client holds, less a tenth of the lease, at most a
	// third of the lease (and 30 s). Zero means half the Lease; negative
	// means a call is never made again.
	StoreOutage time.Duration
	// EndpointOutage is how long a client waits for an endpoint that
	// answered earlier and then stopped accepting connections (a server
	// restarting: connections refused, a host that no longer resolves, a
	// TLS handshake that fails). Such a request never reached the
	// server: it is sent again after capped backoff (at most a second),
	// counting no attempt, no retry budget and none of Retry.MaxElapsed,
	// and its wait holds no request slot. Past the budget, counted from
	// the first refusal, the deposit stops with an error wrapping
	// ErrEndpointUnavailable (a batch stops). An endpoint that has not
	// answered yet stops the run at once (ErrUnreachable). Zero means
	// DefaultEndpointOutage (1 minute); negative means no outage is
	// waited out: the first refusal stops the run.
	EndpointOutage time.Duration

	// HTTPClient sends the requests. Nil means a keep-alive client with a
	// 30 s timeout per attempt. Its Transport is wrapped, never modified;
	// its Timeout bounds each attempt from when the request is sent: the
	// wait for a request slot or the rate limit is not counted.
	HTTPClient *http.Client
	// Header is added to every request (credentials, for instance). Its
	// values are never logged. New refuses a header the target sets itself
	// to make writes exactly-once (If-None-Match, If-Match,
	// Idempotency-Key, and under S3 Authorization and X-Amz-*).
	Header http.Header
	// Logger receives warnings and debug events; nil discards them.
	Logger *slog.Logger
	// Hooks are called on every request and retry, for metrics.
	Hooks Hooks
}

// Hooks let callers count what the client does without parsing logs. Each
// hook may be nil; non-nil hooks are called from the deposit's goroutine and
// must be safe for concurrent use when deposits run concurrently.
type Hooks struct {
	// OnRequest is called after every HTTP request the client sends.
	OnRequest func(RequestEvent)
	// OnRetry is called before the client waits to retry a request.
	OnRetry func(RetryEvent)
	// OnLeaseWait is called when a deposit starts waiting for a key whose
	// lease another process holds (a run still going, or one killed before
	// it released its leases), and again when it stops waiting.
	OnLeaseWait func(LeaseWaitEvent)
	// OnEndpointOutage is called when the endpoint, which had answered,
	// first refuses a connection (an outage begins: see
	// Config.EndpointOutage), and again when it answers again. Its calls
	// are serialised; it must not call the Client.
	OnEndpointOutage func(EndpointOutageEvent)
	// OnTransfer is called as dataset files are sent (see TransferEvent),
	// from the goroutines of the deposits sending them, often: it must be
	// quick, and safe for concurrent use.
	OnTransfer func(TransferEvent)
}

// LeaseWaitEvent is a deposit starting or ending a wait for another
// process's lease on its key.
type LeaseWaitEvent struct {
	Key string
	// Until is when the lease ends unless its holder renews it (the
	// store's clock): the latest the key is taken over if the holder died.
	Until time.Time
	// Done: the wait is over (the holder settled the key, or its lease
	// ended and this deposit claimed it, or the batch stopped).
	Done bool
}

// RequestEvent describes one HTTP request and its answer.
type RequestEvent struct {
	Key      string
	Method   string
	Status   int   // 0 when no answer arrived
	Err      error // the transport error, if any
	Duration time.Duration
}

// RetryEvent describes a decision to retry.
type RetryEvent struct {
	Key    string
	Retry  int // 1 for the first retry
	Wait   time.Duration
	Status int   // status of the answer retried, 0 for a transport error
	Err    error // the transport error retried, if any
}

// RateWait reports the client's own rate limit (Config.Rate, or the
// target's default) in requests per second, 0 when there is none, and the
// time its requests have spent waiting for it so far, summed over requests
// and counting waits still going. Waited about as long as a run has taken,
// or longer, the limit is what paces the run rather than the server; the
// adaptive rate's waits are the server's pace and are not counted. Safe
// for concurrent use.
func (c *Client) RateWait() (perSecond float64, waited time.Duration) {
	t, ok := c.http.Transport.(*sharedTransport)
	if !ok || t.waits == nil {
		return 0, 0
	}
	return t.rate, t.waits.total()
}

// NoRateLimit is the Config.Rate that sets no client limit on requests,
// whatever the target's default (the zero Rate means that default).
const NoRateLimit = -1

// Outcome is what became of one deposit.
type Outcome string

// Outcomes. Deposit returns the first three, and with an identity updated
// and stale, with a nil error; a batch reports every item with one of
// them or failed, invalid, unresolved.
const (
	// OutcomeCreated: the record exists and this deposit may have made
	// it: the server created it for this request, or said it exists (or a
	// check found it) after an attempt of this deposit that could have
	// taken effect: an ambiguous answer in this run, or an intent that an
	// earlier run or another process sharing the store may have sent.
	OutcomeCreated Outcome = "created"
	// OutcomeExisting: the record exists and nothing this deposit sent
	// could have made it: the server said so (or a check found it) before
	// any attempt of this key that could have taken effect. It was made by
	// another client, or by a run whose store is gone.
	OutcomeExisting Outcome = "existing"
	// OutcomeReplayed: answered without a request of its own, from the
	// store or from a concurrent deposit of the same key.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeUpdated: the payload is a new version of an object
	// (Config.Identity) whose record exists, and this deposit replaced the
	// record's content with it (or found that an earlier attempt of it
	// had).
	OutcomeUpdated Outcome = "updated"
	// OutcomeStale: the payload is a version of an object older than the
	// one its record holds: one the object had and a later version
	// replaced, or one the version pointer orders before it. Nothing was
	// sent; Result.Current names the version held. Config.AllowRevert
	// makes it an update.
	OutcomeStale Outcome = "stale"
	// OutcomeFailed: refused for good by the server, now or in an earlier run.
	OutcomeFailed Outcome = "failed"
	// OutcomeInvalid: not valid input; nothing was sent.
	OutcomeInvalid Outcome = "invalid"
	// OutcomeUnresolved: the outcome is unknown; running again is safe.
	OutcomeUnresolved Outcome = "unresolved"

	// OutcomeSkipped is not one of the six: a batch item left to another
	// shard (BatchOptions.Shard), counted apart from Summary.Total.
	OutcomeSkipped Outcome = "skipped"
)

// OutcomeOf classifies a deposit error into the outcome a batch reports:
// failed, invalid or unresolved. A nil error is a success whose outcome
// (created, existing or replayed) only the Result knows; OutcomeOf(nil) is
// the empty Outcome rather than a guess.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrInvalid):
		return OutcomeInvalid
	case errors.Is(err, ErrTerminal):
		return OutcomeFailed
	default:
		return OutcomeUnresolved
	}
}

// stored is the outcome as the store records it; only created and existing
// are ever recorded, as dedup's two outcomes.
func (o Outcome) stored() dedup.Outcome {
	if o == OutcomeExisting {
		return dedup.OutcomeExisting
	}
	return dedup.OutcomeCreated
}

// Result is the answer to a deposit.
type Result struct {
	// Key is the content key: lowercase hex SHA-256 of the canonical bytes.
	Key string
	// Identifier is what the server minted (a DOI, a record ID), or the
	// record URL when it mints nothing. The same for every replay.
	Identifier string
	Outcome    Outcome
	// Status is the HTTP status that settled the deposit (for a replay, the
	// one recorded when it was settled).
	Status int
	// Requests counts the HTTP requests this deposit sent, read-backs
	// included; Retries counts those that repeated an earlier one.
	Requests, Retries int
	// Rechecks counts the Requests that looked again for a record created
	// after a search for it had found nothing (Invenio): a replayed
	// deposit sends them once while the store notes such a record.
	Rechecks int
	// Recovered reports that the store showed this key as possibly sent
	// by an earlier run or by another process that has since stopped
	// (pending, last claimed by another), and this deposit settled it.
	// After a crash it may over-report (an intent whose request never left),
	// never under-report.
	Recovered bool
	// RecordID is, for a target whose records have an id of their own beside
	// the identifier minted (InvenioRDM: the record id beside its DOI), that
	// id; for a Dataverse dataset's update, the version number it
	// published ("1.1", "2.0"); "" for other targets.
	RecordID string

	// Object is the object key of a payload named by an identity
	// (Config.Identity): the name of its one record, of which Key is a
	// version. "" without an identity.
	Object string
	// Current and CurrentSince, for a stale payload, are the version the
	// object holds instead (its content key) and since when; zero
	// otherwise.
	Current      string
	CurrentSince time.Time

	// made says that a request of this deposit created its record with
	// this very payload (a 2xx, not an "exists"), and tag is the server's
	// tag of it: an object's first version is then known without a read.
	made bool
	tag  string
	// kept is the payload an earlier attempt's intent kept
	// (driver.Step.KeepBody) when the steps were built from it, not from
	// this payload: what the record holds if they applied it.
	kept []byte
}

// Client deposits payloads exactly once. It is safe for concurrent use by
// multiple goroutines; deposits of the same key within one Client never run
// at the same time (the later ones wait and share the first one's result).
//
// A Client holds nothing that needs closing: it starts no goroutine that
// outlives its deposits (the one renewing leases ends with the last), the
// Store is the caller's to close, and idle keep-alive
// connections belong to the HTTP client: Config.HTTPClient's, or the
// default one's, which closes them after 90 s idle like
// http.DefaultTransport.
type Client struct {
	target      driver.Driver
	keyer       *canonical.Keyer
	store       Store // the caller's, through guard
	guard       *storeGuard
	endpoint    *endpointGuard
	policy      backoff.Policy
	budget      *backoff.Budget
	ownBudget   bool // budget is the default one, which Run may enlarge
	header      http.Header
	http        *http.Client
	pace        *backoff.AdaptiveLimiter // nil under StaticRate
	log         *slog.Logger
	hooks       Hooks
	retryFailed bool
	// identity names objects (Config.Identity); updater and objects are
	// the target's and the store's parts for them, set when it does.
	identity    identity
	updater     driver.ObjectReader
	objects     objectStore
	allowRevert bool
	// uploads journals the uploads of steps sent in parts; nil for a
	// store that keeps none.
	uploads uploadStore

	flights  flights
	lookups  lookups
	leases   *leaseKeeper
	claims   *claims     // nil unless the store claims groups of keys
	owners   ownerProver // nil unless the store can prove an owner dead
	answered atomic.Bool // the endpoint has sent at least one HTTP answer
	warned   sync.Map    // warnings logged once: message -> true
	seeds    seeding     // the scan of a server for a store that holds nothing
	serials  serials     // the serial names this process's deposits hold
}

// New returns a Client for cfg. It checks the key settings against those the
// store recorded for the target, and records them on first use: a mismatch
// is an error wrapping ErrSettingsMismatch, returned before any request,
// because different settings would give every payload a new key and so a
// second record. A configuration New cannot use is an error wrapping
// ErrConfig.
func New(cfg Config) (*Client, error) {
	drv, err := driverOf(cfg)
	if err != nil {
		return nil, err
	}
	keyer, err := keyerFor(cfg, drv)
	if err != nil {
		return nil, err
	}
	id, err := identityOf(cfg, drv)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Lease == 0:
		cfg.Lease = DefaultLease
	case cfg.Lease < 10*time.Millisecond:
		return nil, fmt.Errorf("%w: Config.Lease %v is shorter than 10ms", ErrConfig, cfg.Lease)
	}
	guard := newStoreGuard(cfg.StoreOutage)
	store := &guarded{s: cfg.Store, g: guard}
	c := &Client{
		target:      drv,
		keyer:       keyer,
		store:       store,
		guard:       guard,
		policy:      retryPolicy(cfg.Retry),
		budget:      cfg.Budget,
		header:      cfg.Header.Clone(),
		log:         cfg.Logger,
		hooks:       cfg.Hooks,
		retryFailed: cfg.RetryFailed,
		lookups:     lookups{store: store},
		identity:    id,
		allowRevert: cfg.AllowRevert,
	}
	if id.on() {
		if c.updater, err = updaterOf(drv, cfg.Store); err != nil {
			return nil, err
		}
		c.objects = guardedObjects{s: store}
	}
	if _, ok := cfg.Store.(uploadStore); ok {
		c.uploads = guardedUploads{s: store}
	}
	if c.budget == nil {
		c.budget, c.ownBudget = backoff.NewBudget(0), true
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.StoreOutage == 0:
		guard.budget = cfg.Lease / 2
	case cfg.StoreOutage < 0:
		guard.budget = 0
	}
	outage := cfg.EndpointOutage
	if outage == 0 {
		outage = DefaultEndpointOutage
	}
	c.endpoint = newEndpointGuard(outage, cfg.Hooks.OnEndpointOutage, c.log.Info)
	c.leases = newLeaseKeeper(store, cfg.Lease, c.log)
	guard.leases = c.leases
	if m, ok := storeAs[manyClaimer](store); ok {
		c.claims = newClaims(m, c.leases)
	}
	c.owners, _ = cfg.Store.(ownerProver) // no store call: nothing to guard
	c.http, c.pace = newHTTPClient(cfg.HTTPClient, drv, cfg.Rate, !cfg.StaticRate)
	if err := c.checkSettings(cfg, keyer.Form()); err != nil {
		return nil, err
	}
	return c, nil
}

// driverOf checks cfg's target and store and returns the target's driver;
// a caller's header that would replace one the target sets for
// exactly-once is refused.
func driverOf(cfg Config) (driver.Driver, error) {
	if cfg.Target == nil {
		return nil, fmt.Errorf("%w: Config.Target is required", ErrConfig)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Config.Store is required", ErrConfig)
	}
	drv, err := targetDriver(cfg.Target)
	if err != nil {
		return nil, err
	}
	for name := range cfg.Header {
		if drv.Guards(name) {
			return nil, errHeaderGuarded(name)
		}
	}
	return drv, nil
}

// keyerFor is the keyer of cfg's form and ignored members, hashing a
// dataset's files with MD5 too where the target wants them.
func keyerFor(cfg Config, drv driver.Driver) (*canonical.Keyer, error) {
	form := cfg.Form
	if form == "" {
		form = canonical.FormJCS
	}
	keyer, err := canonical.NewKeyer(form, cfg.Ignore)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if m, ok := drv.(driver.FileMD5er); ok && m.WantsFileMD5() {
		keyer = keyer.WithFileMD5()
	}
	if p, ok := drv.(driver.FileParter); ok && p.FilePartSize() > 0 {
		keyer = keyer.WithFileParts(p.FilePartSize())
	}
	return keyer, nil
}

// checkSettings refuses a store that keyed this target's rows (the
// deposit's and its steps') with other settings.
func (c *Client) checkSettings(cfg Config, form canonical.Form) error {
	settings := dedup.Settings{Form: string(form), Ignore: slices.Sorted(slices.Values(cfg.Ignore)),
		SecretFingerprint: c.target.SecretFingerprint(), Identity: cfg.Identity}
	if _, own := c.target.(driver.Identified); own {
		settings.Identity = nil // the target's, not a choice that can change
	}
	for _, target := range append([]string{c.target.Name()}, c.target.StepTargets()...) {
		if err := c.store.CheckSettings(context.Background(), target, settings); err != nil {
			if errors.Is(err, dedup.ErrSettingsMismatch) {
				return mismatchError{store: err}
			}
			return fmt.Errorf("client: store: %w", err)
		}
	}
	return nil
}

// StoreTarget is the name under which the store keeps this client's
// deposits: the protocol and the normalised endpoint, a credential in its
// query replaced by a digest (and the DOI prefix under DataCite). Steps
// after the create have names of their own.
func (c *Client) StoreTarget() string { return c.target.Name() }

// Key returns the key and request body of a payload without depositing
// it; with an identity, its object key and version order too.
func (c *Client) Key(payload []byte) (canonical.Keyed, error) {
	k, err := c.keyPayload(payload)
	if err != nil {
		return k, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return k, nil
}

// keyPayload is KeyPayload under this client's keyer and target, with the
// object the payload names, if the client has an identity.
func (c *Client) keyPayload(payload []byte) (canonical.Keyed, error) {
	k, err := KeyPayload(c.keyer, c.target, payload)
	if err != nil {
		return k, err
	}
	if err := c.identity.name(&k); err != nil {
		return canonical.Keyed{}, err
	}
	return k, nil
}

// KeyPayload returns the key and body of payload under keyer, as drv reads
// it: a driver.Payloader gives the body its steps receive and the text the
// key covers; any other driver, or a nil one, the payload as it is. A
// payload that is not a document (a bare string, number, true, false or
// null) has no key: Client.Run refuses it with this error, and so does
// any tool that prints keys through KeyPayload.
func KeyPayload(keyer *canonical.Keyer, drv driver.Driver, payload []byte) (canonical.Keyed, error) {
	k, err := keyer.Key(payload)
	if err != nil {
		return k, err
	}
	if err := checkDocument(k.Body); err != nil {
		return canonical.Keyed{}, err
	}
	p, ok := drv.(driver.Payloader)
	if !ok {
		return k, nil
	}
	body, keyText, err := p.Payload(k.Body)
	if err != nil {
		return canonical.Keyed{}, err
	}
	kb, err := keyer.Key(body)
	if err != nil {
		return canonical.Keyed{}, fmt.Errorf("the body the target made: %w", err)
	}
	kk, err := keyer.Key(keyText)
	if err != nil {
		return canonical.Keyed{}, fmt.Errorf("the text the target keys: %w", err)
	}
	return canonical.Keyed{Key: kk.Key, Body: kb.Body}, nil
}

// Deposit ensures exactly one record exists on the server for payload (JSON
// bytes) and returns its identifier. It is safe to call again with the same
// payload, from any process sharing the store: a finished key is answered
// from the store without a request.
//
// Errors wrap one of ErrInvalid, ErrTerminal, ErrStopRun, ErrUnresolved; an
// answer from the server is available with errors.As as *HTTPError.
func (c *Client) Deposit(ctx context.Context, payload []byte) (Result, error) {
	k, err := c.Key(payload)
	if err != nil {
		return Result{}, err
	}
	if k.Object != "" {
		return c.depositObject(ctx, k, "", nil)
	}
	res, _, err := c.deposit(ctx, k, source{}, nil, nil, ahead{})
	return res, err
}

// DepositDataset deposits a dataset: metadata (JSON bytes) plus files named
// relative to dir, keyed on the files' bytes (package canonical). The
// canonical dataset document (digests, not file bytes) is what is sent,
// except to the targets that store the files too: S3 streams each as the
// object {key}/{P}, then the document as {key}.json, written last as the
// dataset's commit marker and its identifier; CouchDB sends the document
// with every file inline as an attachment, in the one PUT that creates it;
// InvenioRDM uploads each to the record's draft.
func (c *Client) DepositDataset(ctx context.Context, dir string, metadata []byte, files []string) (Result, error) {
	if c.identity.on() {
		k, err := c.datasetObject(dir, metadata, files)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				err = fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			return Result{}, err
		}
		return c.depositObject(ctx, k, dir, nil)
	}
	k, err := c.keyer.DatasetKey(dir, metadata, files)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	res, _, err := c.deposit(ctx, k, source{dir: dir}, nil, nil, ahead{})
	return res, err
}

// flights makes sure one key is never in flight twice within a process.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	done chan struct{}
	res  Result
	err  error
}

func (fs *flights) join(key string) (*flight, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.m[key]; ok {
		return f, false
	}
	if fs.m == nil {
		fs.m = make(map[string]*flight)
	}
	f := &flight{done: make(chan struct{})}
	fs.m[key] = f
	return f, true
}

func (fs *flights) finish(key string, f *flight, res Result, err error) {
	fs.mu.Lock()
	delete(fs.m, key)
	fs.mu.Unlock()
	f.res, f.err = res, err
	close(f.done)
}

// has reports whether a deposit of key is in flight.
func (fs *flights) has(key string) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	_, ok := fs.m[key]
	return ok
}

// DefaultRetry is the retry policy of a Config whose Retry fields are zero,
// and of `deposit run`. Twenty attempts, because against a server that
// fails a third of its requests at random ten still left 2 of 8,750 items
// unresolved; MaxElapsed and the retry budget, not the attempts, end a
// storm against a server that is down. Jittered waits are capped at 2 s:
// an item that waits holds no request slot, so a batch lasts as long as
// its slowest item, and with a 20 s cap one item that met seven faults in
// a row held a flaky run for half a minute. A wait the server asks for
// with Retry-After is honoured up to 20 s.
var DefaultRetry = backoff.Policy{
	Base:          100 * time.Millisecond,
	Cap:           2 * time.Second,
	RetryAfterCap: 20 * time.Second,
	MaxAttempts:   20,
	MaxElapsed:    2 * time.Minute,
}

// retryPolicy fills p's zero fields from DefaultRetry.
func retryPolicy(p backoff.Policy) backoff.Policy {
	d := DefaultRetry
	if p.Base > 0 {
		d.Base = p.Base
	}
	if p.Cap > 0 {
		d.Cap = p.Cap
		if p.RetryAfterCap <= 0 {
			// A Cap of the caller's own bounds Retry-After too, as
			// backoff.Policy documents, unless RetryAfterCap says otherwise.
			d.RetryAfterCap = p.Cap
		}
	}
	if p.RetryAfterCap > 0 {
		d.RetryAfterCap = p.RetryAfterCap
	}
	if p.MaxAttempts > 0 {
		d.MaxAttempts = p.MaxAttempts
	}
	if p.MaxElapsed > 0 {
		d.MaxElapsed = p.MaxElapsed
	}
	return d
}

// targetDriver is t's driver; an error is a configuration error.
func targetDriver(t Target) (driver.Driver, error) {
	drv, err := t.Driver()
	if err != nil && !errors.Is(err, ErrConfig) {
		err = fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return drv, err
}
