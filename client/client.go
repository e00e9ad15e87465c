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
)

// Config configures a Client. Only Endpoint and Store are required; every
// other zero field has the default its comment gives.
type Config struct {
	// Endpoint is the collection URL: records go to {Endpoint}/{key} under
	// ProtocolPut and ProtocolWebDAV (a collection), ProtocolS3 (the bucket
	// URL, path style: https://host/bucket) and ProtocolCouchDB (the
	// database URL), and are POSTed to Endpoint under ProtocolIdempotencyKey.
	// Under ProtocolDataCite it is DataCite's API root, by default
	// DataCiteTestEndpoint; production (DataCiteEndpoint) only when named.
	Endpoint string
	// Protocol defaults to ProtocolPut.
	Protocol Protocol
	// Form is the canonical form keys are computed over; default
	// canonical.FormJCS.
	Form canonical.Form
	// Ignore lists JSON Pointers (RFC 6901) removed from the payload before
	// its key is computed, never from the body sent.
	Ignore []string
	// IDPointer is the JSON Pointer of the identifier in a create answer.
	// Default: /identifier under put; /id, then /identifier under
	// idempotency-key.
	IDPointer string
	// KeySecret, when set, makes Idempotency-Key values an HMAC of the
	// content key, so they cannot be guessed from public content.
	KeySecret []byte

	// Store remembers every key's outcome. Required.
	Store dedup.Store

	// Retry is the retry policy for each request; its zero value is
	// backoff's documented default.
	Retry backoff.Policy
	// Budget is the retry budget shared by every deposit of this client;
	// nil means a fresh budget with backoff's default capacity. Share one
	// Budget between clients to share it between their batches.
	Budget *backoff.Budget
	// Rate limits requests per second (fractions allowed); 0 is unlimited,
	// except under ProtocolDataCite, where 0 means DataCiteRate and a
	// negative Rate means unlimited.
	Rate float64

	// Header is added to every request (credentials, for instance). Its
	// values are never logged.
	Header http.Header
	// HTTPClient sends the requests. Nil means a keep-alive client with a
	// 30 s timeout per attempt. Its Transport is wrapped, never modified.
	HTTPClient *http.Client
	// AWS holds the credentials ProtocolS3 signs every request with (AWS
	// Signature V4); required under ProtocolS3, ignored otherwise. The
	// client never reads the environment: the caller fills it in.
	AWS *AWSCredentials
	// DOIPrefix is the DOI prefix DOIs are minted under, such as 10.5072;
	// required under ProtocolDataCite, ignored otherwise. It is part of the
	// store target: another prefix is another namespace of DOIs.
	DOIPrefix string
	// DataCiteEvent, under ProtocolDataCite, is the event sent once a DOI
	// exists: "publish" (draft to findable), "register" (draft to
	// registered), or "" for none (DOIs stay drafts unless the payload
	// names an event). It is a step of its own, recorded in the store under
	// its own target, so a re-run sends it for DOIs created earlier but not
	// yet published, and never twice.
	DataCiteEvent string
	// Retention is how long the server keeps completed idempotency keys
	// (IRI reference: 24 h, the default). Resuming a pending item older than
	// this logs a warning: the server may no longer recognise the key.
	Retention time.Duration
	// RetryFailed re-sends items recorded as failed instead of reporting the
	// recorded failure again.
	RetryFailed bool

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

// Outcome is what became of one deposit.
type Outcome string

// Outcomes. Deposit returns the first three with a nil error; a batch
// reports every item with one of the six.
const (
	// OutcomeCreated: this deposit's request created the record.
	OutcomeCreated Outcome = "created"
	// OutcomeExisting: the server said the record already existed.
	OutcomeExisting Outcome = "existing"
	// OutcomeReplayed: answered without a request of its own, from the
	// store or from a concurrent deposit of the same key.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeFailed: refused for good by the server, now or in an earlier run.
	OutcomeFailed Outcome = "failed"
	// OutcomeInvalid: not valid input; nothing was sent.
	OutcomeInvalid Outcome = "invalid"
	// OutcomeUnresolved: the outcome is unknown; running again is safe.
	OutcomeUnresolved Outcome = "unresolved"
)

// OutcomeOf classifies a deposit error into the outcome a batch reports.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeCreated
	case errors.Is(err, ErrInvalid):
		return OutcomeInvalid
	case errors.Is(err, ErrTerminal):
		return OutcomeFailed
	default:
		return OutcomeUnresolved
	}
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
	// Recovered reports that the store held this key as pending: an earlier
	// run (or another process) left its outcome uncertain, and this deposit
	// settled it.
	Recovered bool
}

// Client deposits payloads exactly once. It is safe for concurrent use by
// multiple goroutines; deposits of the same key within one Client never run
// at the same time (the later ones wait and share the first one's result).
type Client struct {
	endpoint string // normalised, used for request URLs and the target
	target   string // store namespace: protocol + " " + endpoint
	protocol Protocol
	profile  profile
	keyer    *canonical.Keyer
	pointers []string
	secret   []byte
	store    dedup.Store
	policy   backoff.Policy
	budget   *backoff.Budget
	header   http.Header
	http     *http.Client
	log      *slog.Logger
	hooks    Hooks

	retention   time.Duration
	retryFailed bool

	flights  flights
	lookups  lookups
	answered atomic.Bool // the endpoint has sent at least one HTTP answer

	warnIgnored  sync.Once // 200/204 to a conditional create
	warnReadBack sync.Once // a read-back the server refused
}

// New returns a Client for cfg. It checks the key settings against those the
// store recorded for this endpoint and protocol, and records them on first
// use: a mismatch is an error wrapping ErrSettingsMismatch, returned before
// any request, because different settings would give every payload a new key
// and so a second record.
func New(cfg Config) (*Client, error) {
	if cfg.Store == nil {
		return nil, errors.New("client: Config.Store is required")
	}
	proto, err := ParseProtocol(string(cfg.Protocol))
	if err != nil {
		return nil, err
	}
	if proto == ProtocolDataCite {
		cfg = dataciteDefaults(cfg) // the test system; DataCite's rate
	}
	endpoint, err := normalizeEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	form := cfg.Form
	if form == "" {
		form = canonical.FormJCS
	}
	keyer, err := canonical.NewKeyer(form, cfg.Ignore)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	c := &Client{
		endpoint:    endpoint,
		target:      string(proto) + " " + endpoint,
		protocol:    proto,
		profile:     newProfile(proto),
		keyer:       keyer,
		secret:      slices.Clone(cfg.KeySecret),
		store:       cfg.Store,
		policy:      cfg.Retry,
		budget:      cfg.Budget,
		header:      cfg.Header.Clone(),
		log:         cfg.Logger,
		hooks:       cfg.Hooks,
		retention:   cfg.Retention,
		retryFailed: cfg.RetryFailed,
	}
	if c.budget == nil {
		c.budget = backoff.NewBudget(0)
	}
	if c.retention <= 0 {
		c.retention = 24 * time.Hour
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	base := cfg.HTTPClient
	if proto == ProtocolS3 {
		if base, err = signingHTTPClient(base, cfg.AWS); err != nil {
			return nil, err
		}
	}
	c.http = newHTTPClient(base, cfg.Rate)

	settings := dedup.Settings{Form: string(form), Ignore: slices.Sorted(slices.Values(cfg.Ignore))}
	if proto == ProtocolIdempotencyKey {
		settings.SecretFingerprint = secretFingerprint(c.secret)
	}
	if proto == ProtocolDataCite {
		if err := c.setupDataCite(cfg, settings); err != nil {
			return nil, err
		}
	}
	if err := c.store.CheckSettings(context.Background(), c.target, settings); err != nil {
		if errors.Is(err, dedup.ErrSettingsMismatch) {
			return nil, fmt.Errorf("%w: %w", ErrSettingsMismatch, err)
		}
		return nil, fmt.Errorf("client: store: %w", err)
	}
	// The profile and target are final now (a DataCite prefix extends the
	// target).
	c.lookups = lookups{store: c.store, target: c.target}
	c.pointers = c.profile.idPointers()
	if cfg.IDPointer != "" {
		c.pointers = []string{cfg.IDPointer}
	}
	return c, nil
}

// Target is the name under which the store keeps this client's records: the
// protocol and the normalised endpoint (and the DOI prefix under
// ProtocolDataCite).
func (c *Client) Target() string { return c.target }

// Key returns the key and request body of a payload without depositing it.
func (c *Client) Key(payload []byte) (canonical.Keyed, error) {
	k, err := c.keyer.Key(payload)
	if err != nil {
		return k, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return k, nil
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
	return c.deposit(ctx, k, "", nil)
}

// DepositDataset deposits a dataset: metadata (JSON bytes) plus files named
// relative to dir, keyed on the files' bytes as the design describes. The
// canonical dataset document (digests, not file bytes) is what is sent,
// except under ProtocolS3, which stores the files too: each streamed as the
// object {key}/{P}, then the document as {key}.json, written last as the
// dataset's commit marker and its identifier.
func (c *Client) DepositDataset(ctx context.Context, dir string, metadata []byte, files []string) (Result, error) {
	k, err := c.keyer.DatasetKey(dir, metadata, files)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c.deposit(ctx, k, dir, nil)
}

// deposit runs the guarded deposit for one key, sharing the work with
// concurrent deposits of the same key. drain, when closed, stops retries
// (the batch is shutting down) without abandoning a request in flight. dir
// is the base folder of a dataset's files, "" for a record.
func (c *Client) deposit(ctx context.Context, k canonical.Keyed, dir string, drain <-chan struct{}) (Result, error) {
	f, leader := c.flights.join(k.Key)
	if !leader {
		select {
		case <-f.done:
		case <-ctx.Done():
			return Result{Key: k.Key}, fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
		}
		res := f.res
		res.Requests, res.Retries, res.Recovered = 0, 0, false
		if f.err == nil {
			res.Outcome = OutcomeReplayed
		}
		return res, f.err
	}
	res, err := c.guarded(ctx, k, dir, drain)
	if err == nil {
		if fin, ok := c.profile.(finisher); ok {
			// A step after the record exists (publishing a DOI, say),
			// idempotent on its own and run for replays too, so a re-run
			// finishes what an earlier run created but did not finish.
			res, err = fin.finish(ctx, c, res, drain)
		}
	}
	c.flights.finish(k.Key, f, res, err)
	return res, err
}

// finisher is a profile with a step to run once the record exists. finish
// must be idempotent and record its own progress (in the store, under a
// target of its own) so it is done once across runs. It returns res with
// its own requests and retries added.
type finisher interface {
	finish(ctx context.Context, c *Client, res Result, drain <-chan struct{}) (Result, error)
}

// validator is a profile that refuses some payloads (CouchDB documents must
// be objects, DataCite metadata must not name another DOI).
type validator interface {
	validate(c *Client, key string, body []byte) error
}

// namer is a profile whose client names each record itself (a DataCite
// DOI): that name is the identifier, whatever an answer says or leaves out.
type namer interface {
	name(c *Client, key string) string
}

// guarded is the order of the seed's guarded deposit: look up the store,
// record intent, conditional write, classify, record the outcome only after a
// confirmation.
func (c *Client) guarded(ctx context.Context, k canonical.Keyed, dir string, drain <-chan struct{}) (Result, error) {
	res := Result{Key: k.Key}
	rec, err := c.lookups.lookup(ctx, k.Key)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
	case err != nil:
		return res, c.storeError(err)
	case rec.State == dedup.StateDone:
		return replayOf(rec), nil
	case rec.State == dedup.StateFailed && !c.retryFailed:
		return res, recordedFailure(rec)
	case rec.State == dedup.StateFailed:
		if err := c.store.ResetFailed(ctx, c.target, k.Key); err != nil {
			return res, c.storeError(err)
		}
	case rec.State == dedup.StatePending:
		res.Recovered = true
		if c.profile.keepsFirstBody() && time.Since(rec.CreatedAt) > c.retention {
			c.log.Warn("resuming an uncertain deposit older than the server's key retention; the server may not recognise its Idempotency-Key and could create a second record",
				"key", k.Key, "pending_since", rec.CreatedAt, "retention", c.retention)
		}
	}

	if v, ok := c.profile.(validator); ok {
		// Refuse what the target cannot take before recording an intent
		// that no request would ever settle.
		if err := v.validate(c, k.Key, k.Body); err != nil {
			return res, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	var keep []byte
	if c.profile.keepsFirstBody() {
		keep = k.Body
	}
	rec, err = c.store.Begin(ctx, c.target, k.Key, keep)
	if err != nil {
		return res, c.storeError(err)
	}
	switch rec.State {
	case dedup.StateDone: // another process settled it meanwhile
		return replayOf(rec), nil
	case dedup.StateFailed:
		return res, recordedFailure(rec)
	}
	body := k.Body
	if c.profile.keepsFirstBody() && len(rec.Body) > 0 {
		// Re-send the exact bytes first sent for this key, even if this
		// line's ignored fields differ: otherwise a retry could be a 422.
		body = rec.Body
	}
	return c.write(ctx, res, body, dir, drain)
}

// replayOf is the result of a key the store holds as done.
func replayOf(rec dedup.Record) Result {
	return Result{Key: rec.Key, Identifier: rec.Identifier, Outcome: OutcomeReplayed, Status: rec.Status}
}

// recordedFailure is the error for a key an earlier run recorded as failed.
func recordedFailure(rec dedup.Record) error {
	return fmt.Errorf("%w (recorded by an earlier run; re-sent only when retrying failures deliberately): status %d: %s",
		ErrTerminal, rec.Status, rec.Problem)
}

func (c *Client) storeError(err error) error {
	return fmt.Errorf("%w: store: %w", ErrStopRun, err)
}

// confirm records a confirmed outcome. It runs even when ctx has ended: the
// server has spoken, and forgetting its answer would only cost a request.
func (c *Client) confirm(ctx context.Context, res Result, outcome Outcome, id string, status int) (Result, error) {
	ctx = context.WithoutCancel(ctx)
	if n, ok := c.profile.(namer); ok {
		id = n.name(c, res.Key)
	}
	dOutcome := dedup.OutcomeCreated
	if outcome == OutcomeExisting {
		dOutcome = dedup.OutcomeExisting
	}
	rec, err := c.store.Complete(ctx, c.target, res.Key, dedup.Confirmation{Outcome: dOutcome, Identifier: id, Status: status})
	switch {
	case errors.Is(err, dedup.ErrConflict):
		// Another process confirmed the key first with another identifier;
		// the first result stands (result recall).
		c.log.Warn("key already confirmed with another identifier; keeping the first",
			"key", res.Key, "first", rec.Identifier, "now", id)
		id = rec.Identifier
	case err != nil:
		return res, c.storeError(err)
	}
	res.Outcome, res.Identifier, res.Status = outcome, id, status
	return res, nil
}

// fail records a terminal answer and returns the error for it.
func (c *Client) fail(ctx context.Context, res Result, herr *HTTPError) (Result, error) {
	res.Status = herr.StatusCode
	problem := herr.Problem
	if problem == "" {
		problem = http.StatusText(herr.StatusCode)
	}
	if _, err := c.store.Fail(context.WithoutCancel(ctx), c.target, res.Key, dedup.Failure{Status: herr.StatusCode, Problem: problem}); err != nil {
		if errors.Is(err, dedup.ErrInvalidTransition) {
			// Another process confirmed the key meanwhile: that stands.
			rec, lerr := c.store.Lookup(ctx, c.target, res.Key)
			if lerr == nil && rec.State == dedup.StateDone {
				return replayOf(rec), nil
			}
		}
		return res, c.storeError(err)
	}
	return res, fmt.Errorf("%w: %w", ErrTerminal, herr)
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
