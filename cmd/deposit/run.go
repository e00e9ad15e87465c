package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/internal/sqlitefile"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/figshare"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/osf"
)

// runOptions are the flags of `deposit run`.
type runOptions struct {
	endpoint      string
	protocol      string
	db            string
	concurrency   int
	form          string
	ignore        stringList
	identity      stringList
	versionPtr    string
	allowRevert   bool
	headers       stringList
	idPointer     string
	maxAttempts   int
	maxElapsed    time.Duration
	rate          rateFlag
	retryFailed   bool
	lease         time.Duration
	storeOutage   time.Duration
	endOutage     time.Duration
	adaptiveRate  bool
	shardSpec     string
	shard         client.Shard
	datasets      string
	maxLineBytes  int64
	results       string
	json          bool
	doiPrefix     string
	adopt         bool
	dataciteEvent string
	noPublish     bool
	onChange      string
	settle        time.Duration
	searchRate    rateFlag
	queryEndpoint string
	collection    string
	ingest        bool
	lockWait      time.Duration
	filesEndpoint string
	parent        string
	public, doi   bool
	minPartSize   int64
	partSize      sizeFlag
	input         string // FILE, or "-" for stdin
	// set names the flags given on the command line.
	set map[string]bool
}

// rateFlag is --rate or --search-rate: a rate per second, and whether the
// flag was given, since an explicit 0 means no limit where an absent flag
// leaves the target's default.
type rateFlag struct {
	v   float64
	set bool
}

func (r *rateFlag) String() string {
	if r == nil || !r.set {
		return ""
	}
	return strconv.FormatFloat(r.v, 'g', -1, 64)
}

func (r *rateFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("want a number of requests per second, such as 2.5")
	}
	r.v, r.set = v, true
	return nil
}

// clientRate is the flag as the library takes a rate (Config.Rate,
// invenio.Target.SearchRate): 0 for the default, negative for no limit.
func (r rateFlag) clientRate() float64 {
	if r.set && r.v == 0 {
		return client.NoRateLimit
	}
	return r.v
}

const runAbout = `Deposits each line of FILE (JSON Lines; "-" reads stdin) exactly once.
Each line is one JSON payload; blank lines are skipped (line numbers still
count). A line that is not valid JSON (or longer than --max-line-bytes) is
reported with its line number and counted invalid; the rest is deposited.

The store (--db) remembers every key's outcome. Running the same command again
is always safe: finished lines are answered from the store without a request
(replayed), lines an interrupted run left uncertain are settled (recovered),
and nothing is created twice.

Outcomes: created (made by this deposit, or perhaps: its answer was lost),
existing (nothing this deposit sent could have made it), replayed (no request
of its own), failed (refused for good; not re-sent without --retry-failed),
invalid, unresolved (run again).`

const runNotes = `Environment:
  DEPOSIT_ENDPOINT       used when --endpoint is not given
  DEPOSIT_AUTHORIZATION  sent as the Authorization header (--header overrides it);
                         under --protocol invenio a bare token is sent as Bearer;
                         under dataverse it is the API token (X-Dataverse-key);
                         under osf the personal access token (sent as Bearer);
                         under figshare the personal token (Authorization: token)
  DEPOSIT_KEY_SECRET     makes Idempotency-Key values (invenio: markers) an HMAC
                         under this secret
  DATACITE_REPOSITORY_ID, DATACITE_PASSWORD
                         the repository's credentials under --protocol datacite
                         (the endpoint defaults to DataCite's test system)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
  AWS_REGION (or AWS_DEFAULT_REGION; default us-east-1)
                         sign the requests of --protocol s3
  CROSSREF_LOGIN, CROSSREF_PASSWORD
                         the Crossref login under --protocol crossref
Credentials are never printed.

Output: progress and a summary on stderr; with --json one summary object on
stdout: {"total","created","existing","replayed","updated","stale","failed",
"invalid","unresolved","not_sent","recovered","unread","skipped","leases_lost",
"requests","retries","rechecks","bytes_sent","elapsed_ms"}. "total" is the sum of
the outcomes (created to unresolved), over the lines read; "not_sent" counts the unresolved items (among "unresolved")
this run sent no request for: read, but stopped or interrupted before their
first; "unread" counts the non-blank lines a run that stopped early never
read, "skipped" those left to other shards (--shard); "leases_lost" counts the
leases given up, not renewed in time (their items are unresolved);
"rechecks" counts the requests (among "requests") that looked again for
records created after a search found nothing (invenio), replays' included.

Fleets: processes sharing one --db (a SQLite file on one machine, or a
postgres:// URL) split the work by key without further setup: each key is
leased to one process while it is sent; a key another live process holds is
waited for and reported replayed; a dead process's keys are taken over at once
where the store can tell it died (a SQLite file on a local disk), else once its
lease (--lease) expires.
--results FILE: one JSON object per non-blank line, in completion order:
{"line","key","outcome","identifier","record","status","error"}, absent values
omitted; "record" is the record id beside the DOI under --protocol invenio.
A FILE that is the input, the --db store or a file beside it (-wal, -shm,
-journal, -owners), or any SQLite file, is refused (exit 2).

Exit status: 2 could not proceed (usage, store, settings mismatch, endpoint
unreachable, 401/403/404/501); 3 some items unresolved (run again); 1 some
items failed or invalid; 0 every item done. SIGINT or SIGTERM stops sending
at once (no request starts after it, and stderr says so), records the answers
in flight that come within 10s, prints the summary and exits 3; a second
signal exits at once (130; 143 for SIGTERM).
`

func runCmd(ctx context.Context, args []string, s streams) int {
	o := runOptions{}
	c := newCommand("run", "deposit run --endpoint URL [flags] FILE|-", runAbout, runNotes)
	fs := c.fs
	fs.StringVar(&o.endpoint, "endpoint", "", "collection `URL` of the repository (default $DEPOSIT_ENDPOINT)")
	fs.StringVar(&o.protocol, "protocol", "put", "write protocol: put (conditional PUT {endpoint}/{key}), idempotency-key (POST with Idempotency-Key), webdav, s3 (endpoint: the bucket URL), couchdb (endpoint: the database URL), datacite (DOIs), invenio (InvenioRDM, Zenodo; endpoint: the API root), dataverse (endpoint: the installation's root), osf (endpoint: the API root, default OSF's), figshare (endpoint: the API root) or crossref (DOI deposits; endpoint: the deposit servlet, default Crossref's test system; see docs/targets/crossref.md)")
	fs.StringVar(&o.db, "db", "deposit.db", "dedup store: a SQLite `FILE`, created if missing, or a postgres:// URL (see docs/design.md)")
	fs.IntVar(&o.concurrency, "concurrency", 4, "requests in flight at once (items waiting to retry hold none)")
	fs.StringVar(&o.form, "form", "jcs", "canonical form of the key: jcs (RFC 8785) or python (json.dumps sort_keys, compact)")
	fs.Var(&o.ignore, "ignore", "JSON `POINTER` (RFC 6901) left out of the key, not the body; repeatable")
	fs.Var(&o.identity, "identity", "JSON `POINTER` whose value (a string or an integer) names the object a line describes; repeatable: an object keeps one record, a changed line updates it, an old one is stale (put, webdav, s3, couchdb, datacite: --identity /doi for DOIs the lines name; invenio: an edit or a new version; dataverse: a new minor or major version; with --datasets, read in a dataset's metadata; see docs/design.md)")
	fs.StringVar(&o.versionPtr, "version-pointer", "", "with --identity: JSON `POINTER` of a line's version (an integer or an RFC 3339 time); an older or equal version is stale even if never seen")
	fs.BoolVar(&o.allowRevert, "allow-revert", false, "with --identity: apply a version the object had before instead of reporting it stale")
	fs.Var(&o.headers, "header", "`'Name: value'` added to every request; repeatable")
	fs.StringVar(&o.idPointer, "id-pointer", "", "JSON `POINTER` of the identifier in a create answer (default /identifier under put; /id, then /identifier under idempotency-key)")
	fs.IntVar(&o.maxAttempts, "max-attempts", client.DefaultRetry.MaxAttempts, "attempts per request, the first included; 1 means no retries")
	fs.DurationVar(&o.maxElapsed, "max-elapsed", client.DefaultRetry.MaxElapsed, "time budget for retrying one item")
	fs.Var(&o.rate, "rate", fmt.Sprintf("requests per second, fractions allowed (2.5); 0 means unlimited (default: unlimited, except %g under datacite, %g under invenio, %d under osf and %g under figshare)", datacite.Rate, invenio.Rate, osf.DefaultRate, figshare.Rate))
	fs.BoolVar(&o.retryFailed, "retry-failed", false, "re-send items recorded as failed (after fixing something server-side)")
	fs.DurationVar(&o.storeOutage, "store-outage", 0, "how long an outage of --db (a restart, a lost connection, a store that stops answering) is waited out before the run stops with exit 3; 0 means half of --lease")
	fs.DurationVar(&o.endOutage, "endpoint-outage", client.DefaultEndpointOutage, "how long an endpoint that answered earlier and then refuses connections (a server restarting) is waited out before the run stops with exit 3; 0 means not at all")
	fs.DurationVar(&o.lease, "lease", client.DefaultLease, "how long this process's claim on a key lasts unless renewed (every tenth of it); processes sharing --db take over a dead one's keys after that, or at once on a local SQLite file")
	fs.BoolVar(&o.adaptiveRate, "adaptive-rate", true, "let the send rate follow the server's 429s and 503s, beneath --rate; --adaptive-rate=false keeps it fixed (see docs/design.md)")
	fs.StringVar(&o.shardSpec, "shard", "", "`I/N`: deposit only the lines whose key falls in shard I of N (1 ≤ I ≤ N); the others are counted as skipped")
	fs.StringVar(&o.datasets, "datasets", "", "deposit datasets: each line is {\"metadata\":M,\"files\":[P,...]}, P relative to `DIR`; the key covers the files' bytes")
	fs.Int64Var(&o.maxLineBytes, "max-line-bytes", defaultMaxLineBytes, "longest line accepted, in bytes; a longer line is invalid")
	fs.StringVar(&o.results, "results", "", "write one JSON object per input line to `FILE`")
	fs.BoolVar(&o.json, "json", false, "print the summary as one JSON object on stdout")
	fs.StringVar(&o.doiPrefix, "doi-prefix", "", "datacite: the DOI `PREFIX` DOIs are minted under, such as 10.5072 (required under datacite)")
	fs.BoolVar(&o.adopt, "adopt", false, "datacite with --identity: the repository's DOIs under --doi-prefix are ours to update: a DOI that exists without deposit's markers is updated (the markers added) instead of failed as another's")
	fs.StringVar(&o.dataciteEvent, "event", "", "datacite: `EVENT` sent once a DOI exists: publish, register, or none (DOIs stay drafts)")
	fs.BoolVar(&o.noPublish, "no-publish", false, "invenio: stop at drafts (with their files); a later run without it publishes them")
	fs.StringVar(&o.onChange, "on-change", "", "invenio, with --identity: a changed object is an `edit` of its published record (the default: same DOI, no new version) or a new `version`; a change of files is a new version either way (InvenioRDM locks an edit's files)")
	fs.Var(&o.searchRate, "search-rate", fmt.Sprintf("invenio: searches per second, within --rate; 0 means no limit of their own (default %g, inside Zenodo's 30 a minute)", invenio.SearchRate))
	fs.DurationVar(&o.settle, "settle", 0, "invenio, dataverse, osf, figshare: how long the search index (osf: the node listing) may lag before a record not found is trusted absent, and how long a new store waits before it scans the server for earlier deposits (default 5s; dataverse 3s; osf 2s; figshare 10s); crossref: how long after an upload Crossref may still answer unknown_submission, counted from the upload (default 5m)")
	fs.StringVar(&o.queryEndpoint, "query-endpoint", "", "crossref: the XML query servlet's `URL` (default: the query servlet beside --endpoint)")
	fs.StringVar(&o.collection, "collection", "", "dataverse: the `ALIAS` of the collection datasets are created in (required under dataverse)")
	fs.BoolVar(&o.ingest, "ingest", false, "dataverse: let Dataverse ingest tabular files (renamed .tab); off by default")
	fs.StringVar(&o.filesEndpoint, "files-endpoint", "", "osf: WaterButler's root `URL` (default https://files.osf.io for OSF's API, else the --endpoint's origin)")
	fs.StringVar(&o.parent, "parent", "", "osf: create components under the node of this `ID` rather than projects")
	fs.BoolVar(&o.public, "public", false, "osf: make each node public once its files are up")
	fs.BoolVar(&o.doi, "doi", false, "osf: mint a DOI for each node (made public first); the deposit's identifier is then the DOI")
	fs.Int64Var(&o.minPartSize, "min-part-size", 0, "figshare: the smallest part, in bytes, Figshare's upload service splits a file into but the last (default 5 MiB)")
	fs.Var(&o.partSize, "part-size", "s3: files larger than this are sent in parts of this size, a multipart upload a later run resumes: 5MiB to 5GiB, or off (one PutObject a file, at most 5 GiB) (default 64MiB)")
	fs.DurationVar(&o.lockWait, "lock-wait", 0, "dataverse: how long a run waits for a dataset's lock (a publication finishing) before leaving it unresolved as stuck (default 10m)")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	switch {
	case len(pos) == 0:
		return c.usageError(s, `no input: give FILE, or "-" for stdin`)
	case len(pos) > 1:
		return c.usageError(s, "one input file, got %d arguments", len(pos))
	case o.concurrency < 1:
		return c.usageError(s, "--concurrency must be at least 1")
	case o.maxAttempts < 1:
		return c.usageError(s, "--max-attempts must be at least 1")
	case o.maxElapsed <= 0:
		return c.usageError(s, "--max-elapsed must be positive")
	case o.rate.v < 0 || o.searchRate.v < 0:
		return c.usageError(s, "--rate and --search-rate must not be negative")
	case o.lease < 100*time.Millisecond:
		return c.usageError(s, "--lease must be at least 100ms")
	case o.storeOutage < 0:
		return c.usageError(s, "--store-outage must not be negative")
	case o.endOutage < 0:
		return c.usageError(s, "--endpoint-outage must not be negative")
	case o.maxLineBytes < 1 || o.maxLineBytes > 1<<30:
		return c.usageError(s, "--max-line-bytes must be between 1 and 1 GiB")
	}
	if o.shardSpec != "" {
		sh, err := parseShard(o.shardSpec)
		if err != nil {
			return c.usageError(s, "--shard: %v", err)
		}
		o.shard = sh
	}
	o.input = pos[0]
	_, code = runBatch(ctx, o, s, c)
	return code
}

// summaryJSON is the --json summary, with exactly the design's keys.
type summaryJSON struct {
	Total      int   `json:"total"`
	Created    int   `json:"created"`
	Existing   int   `json:"existing"`
	Replayed   int   `json:"replayed"`
	Updated    int   `json:"updated"`
	Stale      int   `json:"stale"`
	Failed     int   `json:"failed"`
	Invalid    int   `json:"invalid"`
	Unresolved int   `json:"unresolved"`
	NotSent    int   `json:"not_sent"`
	Recovered  int   `json:"recovered"`
	Unread     int64 `json:"unread"`
	Skipped    int   `json:"skipped"`
	LeasesLost int   `json:"leases_lost"`
	Requests   int   `json:"requests"`
	Retries    int   `json:"retries"`
	Rechecks   int   `json:"rechecks"`
	BytesSent  int64 `json:"bytes_sent"`
	ElapsedMS  int64 `json:"elapsed_ms"`
}

// resultJSON is one --results object.
type resultJSON struct {
	Line       int64  `json:"line"`
	Key        string `json:"key,omitempty"`
	Outcome    string `json:"outcome"`
	Identifier string `json:"identifier,omitempty"`
	Record     string `json:"record,omitempty"`
	Status     int    `json:"status,omitempty"`
	Error      string `json:"error,omitempty"`
	// Object, with --identity, is the line's object key; Current and
	// CurrentSince, for a stale line, the version the object holds and
	// since when.
	Object       string     `json:"object,omitempty"`
	Current      string     `json:"current,omitempty"`
	CurrentSince *time.Time `json:"current_since,omitempty"`
	// FollowUp marks a line's second object: its key settled after the
	// line was written unresolved, and this object replaces that one.
	FollowUp bool `json:"follow_up,omitempty"`
}

// runBatch runs one batch and returns its summary and exit status. Errors
// are reported on s.stderr; c reports usage errors.
func runBatch(ctx context.Context, o runOptions, s streams, c *command) (client.Summary, int) {
	var none client.Summary
	fromEnv := o.endpoint == ""
	if fromEnv {
		o.endpoint = s.getenv("DEPOSIT_ENDPOINT")
	}
	proto, err := protocol.Parse(o.protocol)
	if err != nil {
		return none, c.usageError(s, "--protocol: %v", err)
	}
	if name, owner := foreignFlag(proto, o.set); name != "" {
		return none, c.usageError(s, "--%s is a flag of --protocol %s, not of %s", name, owner, proto)
	}
	if o.endpoint == "" && !specOf(proto).endpointOptional {
		return none, c.usageError(s, "no endpoint: give --endpoint URL or set DEPOSIT_ENDPOINT")
	}
	if o.endpoint != "" {
		if err := checkEndpoint(o.endpoint, fromEnv); err != nil {
			return none, c.usageError(s, "%v", err)
		}
	}
	target, err := newTarget(proto, targetFlags{endpoint: o.endpoint, idPointer: o.idPointer,
		doiPrefix: o.doiPrefix, event: o.dataciteEvent, adopt: o.adopt, noPublish: o.noPublish, onChange: o.onChange, settle: o.settle, searchRate: o.searchRate.clientRate(),
		queryEndpoint: o.queryEndpoint, inputDir: inputDir(o.input),
		collection: o.collection, ingest: o.ingest, lockWait: o.lockWait,
		filesEndpoint: o.filesEndpoint, parent: o.parent, public: o.public, doi: o.doi, minPartSize: o.minPartSize, partSize: o.partSize.n}, s.getenv)
	if err != nil {
		return none, c.usageError(s, "%v", err)
	}
	form, err := canonical.ParseForm(o.form)
	if err != nil {
		return none, c.usageError(s, "--form: %v", err)
	}
	if _, err := canonical.NewKeyer(form, o.ignore); err != nil {
		return none, c.usageError(s, "--ignore: %v", err)
	}
	header, err := parseHeaders(o.headers)
	if err != nil {
		return none, c.usageError(s, "%v", err)
	}
	if err := authorize(proto, o.endpoint, header, s.getenv); err != nil {
		return none, c.usageError(s, "%v", err)
	}
	if o.datasets != "" {
		if fi, err := os.Stat(o.datasets); err != nil || !fi.IsDir() {
			return none, c.usageError(s, "--datasets %s: not a directory", o.datasets)
		}
		if !specOf(proto).storesFiles {
			fmt.Fprintf(s.stderr, "deposit run: --datasets: %s stores each dataset's document (its files' paths, SHA-256 and sizes), not the files' bytes; s3, couchdb and invenio store the files\n", proto)
		}
	}

	// Before anything is opened for writing: os.Create would empty it.
	if err := checkResults(o, s.stdin); err != nil {
		return none, c.usageError(s, "%v", err)
	}

	in, size, err := openInput(o.input, s.stdin)
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit run: %v\n", err)
		return none, exitStop
	}
	defer in.Close()

	store, err := openStore(ctx, o.db)
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit run: %s\n", explainStore(o.db, err))
		return none, exitStop
	}
	defer store.Close()

	lr := client.NewLineReader(in, int(o.maxLineBytes))
	prog := newProgress(s.stderr, size, lr.BytesRead, 0)
	defer prog.stop()

	cl, err := client.New(client.Config{
		Target:         target,
		Store:          store,
		Form:           form,
		Ignore:         o.ignore,
		Identity:       o.identity,
		VersionPointer: o.versionPtr,
		AllowRevert:    o.allowRevert,
		Retry:          backoff.Policy{MaxAttempts: o.maxAttempts, MaxElapsed: o.maxElapsed}, // the rest from client.DefaultRetry
		Rate:           o.rate.clientRate(),
		RetryFailed:    o.retryFailed,
		Lease:          o.lease,
		StoreOutage:    o.storeOutage,
		StaticRate:     !o.adaptiveRate,
		Header:         header,
		Logger:         slog.New(slog.NewTextHandler(prog, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropTime})),
		Hooks:          client.Hooks{OnRequest: func(client.RequestEvent) { prog.requests.Add(1) }, OnLeaseWait: prog.leaseWait, OnEndpointOutage: prog.endpointOutage(o.endpoint), OnTransfer: prog.files.event},

		EndpointOutage: endpointOutage(o.endOutage),
	})
	switch {
	case errors.Is(err, client.ErrSettingsMismatch):
		prog.stop()
		fmt.Fprintf(s.stderr, "deposit run: refused: key settings differ: %s.\n"+
			"With this run's, every payload would get a new key, and so a second record.\n"+
			"Run with the flags of the earlier runs, or use another --db for a new batch.\n", mismatch(err, showDB(o.db)))
		return none, exitStop
	case errors.Is(err, client.ErrConfig):
		prog.stop()
		return none, c.usageError(s, "%v", err)
	case err != nil:
		prog.stop()
		fmt.Fprintf(s.stderr, "deposit run: %s\n", oneLine(err))
		return none, exitStop
	}

	prog.followRate(o.rate.set, proto, cl.RateWait)

	var res *resultWriter
	if o.results != "" {
		if res, err = createResults(o.results); err != nil {
			prog.stop()
			fmt.Fprintf(s.stderr, "deposit run: %v\n", err)
			return none, exitStop
		}
	}

	var keysReused int // failed: 422 under idempotency-key
	keyReused := specOf(proto).keyReused
	var shown recoveredShown
	var ack stopAck
	sum, runErr := cl.Run(ctx, prog.count(items(lr.Items(), form, o.datasets)), client.BatchOptions{
		Concurrency: o.concurrency,
		Shard:       o.shard,
		OnStop:      func(e client.StopEvent) { ack.say(prog, e) },
		OnResult: func(r client.ItemResult) {
			// Written first, so that a line the terminal shows is in the
			// file, whenever the process is killed.
			if res != nil {
				res.write(r)
			}
			prog.add(r)
			reused := keyReused != nil && keyReused(r)
			if reused {
				keysReused++
			}
			logItem(prog, r, reused, &shown)
		},
	})
	prog.stop()
	readErr := lr.Err()

	// A run that stopped early says how much of the input it never read:
	// its total counts only the lines it read. A terminal is not read on
	// (it has no end until the user types one).
	var unread int64
	if runErr != nil && readErr == nil && !o.stdinTerminal(s) {
		if unread, err = lr.Remaining(); err != nil {
			readErr = fmt.Errorf("counting the lines not read: %w", err)
		}
	}

	code := exitDone
	switch {
	case sum.Unresolved > 0:
		code = exitUnresolved
	case sum.Failed > 0 || sum.Invalid > 0:
		code = exitFailed
	}
	interrupted := runErr != nil && ctx.Err() != nil && errors.Is(runErr, ctx.Err())
	if interrupted {
		code = exitUnresolved
	}
	stopped := runErr != nil && !interrupted
	printSummary(s.stderr, sum, tail{unread: unread, keyReused: keysReused, stopped: stopped, interrupted: interrupted, recoveredShown: shown.recovered, staleShown: shown.stale, bytes: prog.files.total()}, o)
	switch {
	case interrupted:
		fmt.Fprintf(s.stderr, "deposit run: interrupted: %s; run the same command again to finish (safe)\n", ack.outcome())
	case errors.Is(runErr, client.ErrStoreUnavailable):
		// Nothing the store had not confirmed was sent: safe to run again.
		fmt.Fprintf(s.stderr, "deposit run: stopped: the store %s is unavailable: %s; once it answers again, run the same command again (safe)\n",
			showDB(o.db), oneLine(runErr))
		code = exitUnresolved
	case errors.Is(runErr, client.ErrEndpointUnavailable):
		// What it refused never reached it: safe to run again.
		fmt.Fprintf(s.stderr, "deposit run: stopped: the endpoint %s accepted no connection for %s (--endpoint-outage): %s; once it answers again, run the same command again (safe)\n",
			redact(o.endpoint), o.endOutage, lastAnswer(runErr))
		code = exitUnresolved
	case runErr != nil:
		fmt.Fprintf(s.stderr, "deposit run: stopped: %s\n", explainStop(runErr, proto, o.endpoint))
		code = exitStop
	}
	if readErr != nil {
		fmt.Fprintf(s.stderr, "deposit run: %v\n", readErr)
		code = exitStop
	}
	if res != nil {
		if err := res.close(); err != nil {
			fmt.Fprintf(s.stderr, "deposit run: --results: %v\n", err)
			code = exitStop
		}
	}
	if o.json {
		b, _ := json.Marshal(summaryJSON{
			Total: sum.Total, Created: sum.Created, Existing: sum.Existing, Replayed: sum.Replayed, Updated: sum.Updated, Stale: sum.Stale,
			Failed: sum.Failed, Invalid: sum.Invalid, Unresolved: sum.Unresolved, NotSent: sum.NotSent, Recovered: sum.Recovered,
			Unread: unread, Skipped: sum.Skipped, LeasesLost: sum.LeasesLost, Requests: sum.Requests, Retries: sum.Retries, Rechecks: sum.Rechecks, BytesSent: prog.files.total(), ElapsedMS: sum.Elapsed.Milliseconds(),
		})
		fmt.Fprintf(s.stdout, "%s\n", b)
	}
	return sum, code
}

// stopAck acknowledges the first SIGINT or SIGTERM the moment the batch
// stops sending, so that nobody presses Ctrl-C again for want of an
// answer, and remembers the stop for the final line.
type stopAck struct {
	said  bool
	event client.StopEvent
}

// say prints the acknowledgement of e, when an interrupt caused it (a stop
// of the run's own is explained at its end), and takes the ETA off the
// progress. Run returns only after it returned.
func (a *stopAck) say(p *progress, e client.StopEvent) {
	var in interrupt
	if !errors.As(e.Reason, &in) {
		return
	}
	a.said, a.event = true, e
	again := "Ctrl-C again"
	if in.sig == syscall.SIGTERM {
		again = "another SIGTERM or SIGINT"
	}
	text := fmt.Sprintf("deposit run: stopping (%s): no new request is sent", signalName(in.sig))
	if n := e.InFlight; n == 0 {
		text += ", and none is awaiting its answer"
	} else {
		text += fmt.Sprintf("; waiting up to %s for the %s to %s already sent, to record %s; %s quits without waiting (%s uncertain until the next run settles %s)",
			time.Until(e.Deadline).Round(time.Second), pick(n, "answer", "answers"), plural(n, "request"), pick(n, "it", "them"),
			again, pick(n, "that item then stays", fmt.Sprintf("those %d items then stay", n)), pick(n, "it", "them"))
	}
	p.stopping(text)
}

// outcome is what the final line says became of the requests in flight:
// recorded, unless the run ended past the deadline of their answers.
func (a *stopAck) outcome() string {
	if a.said && a.event.InFlight > 0 && !time.Now().Before(a.event.Deadline) {
		return "no new requests were sent; the answers still awaited when the wait ended were given up, their items stay uncertain"
	}
	return "no new requests were sent, the answers in flight were recorded"
}

// endpointOutage is --endpoint-outage as the library takes it: 0, not at
// all, is a negative Config.EndpointOutage.
func endpointOutage(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// stdinTerminal reports whether the input is stdin and stdin a terminal.
func (o runOptions) stdinTerminal(s streams) bool {
	f, ok := s.stdin.(*os.File)
	return o.input == "-" && ok && term.IsTerminal(int(f.Fd()))
}

// openInput opens FILE, or stdin for "-", and returns its size when it is a
// regular file (for the ETA), else 0.
func openInput(name string, stdin io.Reader) (io.ReadCloser, int64, error) {
	if name == "-" {
		var size int64
		if f, ok := stdin.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				size = fi.Size()
			}
		}
		return io.NopCloser(stdin), size, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, fmt.Errorf("input: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("input: %w", err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, 0, fmt.Errorf("input %s: is a directory", name)
	}
	var size int64
	if fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return f, size, nil
}

// parseHeaders parses --header values "Name: value".
func parseHeaders(values []string) (http.Header, error) {
	h := http.Header{}
	for _, v := range values {
		name, value, ok := strings.Cut(v, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\r\n") {
			// Do not echo v: it may hold a credential.
			return nil, fmt.Errorf("--header: want 'Name: value' (a name without spaces, a colon, a value)")
		}
		if strings.ContainsAny(value, "\r\n") {
			return nil, fmt.Errorf("--header %s: the value must be one line", name)
		}
		h.Add(name, strings.TrimSpace(value))
	}
	return h, nil
}

// dropTime removes the time from slog lines: stderr logs are read live.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// maxRecoveredShown is how many recovered items a run names on stderr;
// the summary counts the rest, and --results lists every one. After a kill
// they can number in the hundreds, and they need no action.
const maxRecoveredShown = 5

// maxStaleShown is how many stale lines a run names on stderr: an old
// file re-run is stale throughout, and --results lists every line.
const maxStaleShown = 5

// recoveredShown counts the recovered items and the stale lines a run has
// named on stderr.
type recoveredShown struct{ recovered, stale int }

// logItem logs what a reader of stderr must see about one item: invalid
// input, failures, unresolved items, and the first few items recovered
// from an earlier run. keyReused reports a failure that is a 422 under
// idempotency-key.
func logItem(p *progress, r client.ItemResult, keyReused bool, shown *recoveredShown) {
	switch {
	case r.Outcome == client.OutcomeInvalid:
		p.logf("line %d: invalid: %s", r.Line, invalidReason(r.Err))
	case keyReused:
		// The client re-sends the exact body it first sent under a key, so
		// the other body came from elsewhere: another tool, or a store lost
		// (a line whose --ignore'd fields differ has the same key).
		p.logf("line %d: failed: %s 422: the server holds this Idempotency-Key with another body (sent by another tool, or with a lost --db) for its key retention (IRI: 24 h); --retry-failed cannot help: the body it holds succeeds, another body needs another key", r.Line, shortKey(r.Key))
	case r.Outcome == client.OutcomeFailed:
		p.logf("line %d: failed: %s %s", r.Line, shortKey(r.Key), refusal(r.Err))
	case r.Outcome == client.OutcomeUnresolved && errors.Is(r.Err, client.ErrStopRun):
		// Running again cannot help until what stopped the run is fixed.
		p.logf("line %d: unresolved: %s last answer: %s: the run stopped; once the cause (below) is fixed, run again (safe)", r.Line, shortKey(r.Key), lastAnswer(r.Err))
	case r.Outcome == client.OutcomeUnresolved && !errors.Is(r.Err, client.ErrInterrupted):
		// One line on the terminal; --results keeps the key and the error.
		p.logf("line %d: unresolved: %s last answer: %s: run again (safe)", r.Line, shortKey(r.Key), lastAnswer(r.Err))
	case r.FollowUp && r.Err == nil:
		p.logf("line %d: now %s: %s was settled by a later line with the same key", r.Line, r.Outcome, shortKey(r.Key))
	case r.Outcome == client.OutcomeStale && shown.stale < maxStaleShown:
		shown.stale++
		p.logf("line %d: stale: %s is an older version of object %s, which holds %s since %s; nothing sent (--allow-revert applies it)",
			r.Line, shortKey(r.Key), shortKey(r.Object), shortKey(r.Current), r.CurrentSince.UTC().Format(time.RFC3339))
	case r.Recovered && r.Err == nil && shown.recovered < maxRecoveredShown:
		shown.recovered++
		p.logf("line %d: recovered: %s was left uncertain by an earlier run or another process; now %s, identifier %s", r.Line, shortKey(r.Key), r.Outcome, r.Identifier)
	}
}

// mismatch says how this run's key settings differ from those the store at
// db recorded, in the flags' terms.
func mismatch(err error, db string) string {
	var mm *dedup.SettingsMismatchError
	if !errors.As(err, &mm) {
		return "the store " + db + " holds keys made with others"
	}
	return fmt.Sprintf("the store %s made its keys for %s with %s; this run has %s",
		db, redact(mm.Target), settingsFlags(mm.Recorded, mm.Given), settingsFlags(mm.Given, mm.Recorded))
}

// settingsFlags is s as the flags that give it: "--form jcs --ignore /x",
// "--form python and no --ignore", with the key secret named when either s
// or other has one.
func settingsFlags(s, other dedup.Settings) string {
	text := "--form " + s.Form
	if len(s.Ignore) == 0 {
		text += " and no --ignore"
	}
	for _, p := range s.Ignore {
		text += " --ignore " + p
	}
	if len(s.Identity) == 0 && len(other.Identity) > 0 {
		text += ", no --identity"
	}
	for _, p := range s.Identity {
		text += " --identity " + p
	}
	switch {
	case s.SecretFingerprint != "":
		text += ", DEPOSIT_KEY_SECRET with fingerprint " + s.SecretFingerprint
	case other.SecretFingerprint != "":
		text += ", no DEPOSIT_KEY_SECRET"
	}
	return text
}

// invalidReason says why an input line is invalid, once: the syntax error
// with its offset, or the cause that the client's ErrInvalid wraps, without
// the chain of packages that passed it on ("invalid payload: canonical:
// ...").
func invalidReason(err error) string {
	var se *canonical.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("not JSON at offset %d: %s", se.Offset, se.Msg)
	}
	if u, ok := err.(interface{ Unwrap() []error }); ok && errors.Is(err, client.ErrInvalid) {
		for _, cause := range u.Unwrap() {
			if cause != client.ErrInvalid {
				return oneLine(cause)
			}
		}
	}
	return oneLine(err)
}

// refusal is what the server answered a failed item: its status and
// problem detail, not the request URL (which holds the key again).
func refusal(err error) string {
	var herr *client.HTTPError
	if !errors.As(err, &herr) {
		return oneLine(err)
	}
	if herr.Problem != "" {
		return fmt.Sprintf("%d: %s", herr.StatusCode, redact(herr.Problem))
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s", herr.StatusCode, http.StatusText(herr.StatusCode)))
}

// shortKey is the first 12 hex digits of a key, enough to find it in
// --results or the store.
func shortKey(key string) string {
	if len(key) <= 12 {
		return key
	}
	return key[:12] + "…"
}

// lastAnswer says what the server last answered an unresolved item: the
// status of its *client.HTTPError, else what the transport said (the
// innermost cause of the error, following the last of several wrapped
// errors: the client wraps why retrying stopped first and the last failure
// last).
func lastAnswer(err error) string {
	var notSettled *client.NotSettledError
	if errors.As(err, &notSettled) {
		// The last poll's problem says more than the answer that ended
		// polling (an elapsed budget spent).
		return notSettled.Error()
	}
	var herr *client.HTTPError
	if errors.As(err, &herr) {
		return strings.TrimSpace(fmt.Sprintf("%d %s", herr.StatusCode, http.StatusText(herr.StatusCode)))
	}
	for err != nil {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 {
				next = errs[len(errs)-1]
			}
		}
		if next == nil {
			break
		}
		err = next
	}
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed without an answer"
	}
	return oneLine(err)
}

// oneLine is err's text on one line, with URLs redacted.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return redact(strings.Join(strings.Fields(err.Error()), " "))
}

// urlPattern matches an http(s) URL: scheme, optional user info, the rest up
// to a query or fragment, and the query or fragment.
var urlPattern = regexp.MustCompile(`(https?://)([^\s/@]*@)?([^\s?#]*)([?#]\S*)?`)

// redact removes user info and query strings from the URLs in s: an
// endpoint may carry a token there, and none is ever printed.
func redact(s string) string {
	return urlPattern.ReplaceAllStringFunc(s, func(u string) string {
		m := urlPattern.FindStringSubmatch(u)
		out := m[1] + m[3]
		if m[4] != "" {
			out += "?REDACTED"
		}
		return out
	})
}

// tail is what the command counts beside the client's summary.
type tail struct {
	unread    int64 // non-blank lines a run that stopped early never read
	bytes     int64 // bytes of dataset files sent, retries' again
	keyReused int   // failures that are a 422 under idempotency-key
	// stopped: an answer or the endpoint stopped the run (not an
	// interrupt); the stop's message gives the one advice.
	stopped bool
	// interrupted: SIGINT or SIGTERM stopped the run.
	interrupted bool
	// recoveredShown: the recovered items named on stderr; staleShown the
	// stale lines.
	recoveredShown, staleShown int
}

// objects reports whether the lines name objects: with --identity, or
// under a target that names them itself (crossref: a work's DOI).
func (o runOptions) objects() bool {
	p, _ := protocol.Parse(o.protocol)
	return len(o.identity) > 0 || p == protocol.Crossref
}

// printSummary writes the final human summary.
func printSummary(w io.Writer, sum client.Summary, t tail, o runOptions) {
	fmt.Fprintf(w, "deposit run: %s in %s: %d created, %d existing, %d replayed", plural(sum.Total, "item"), sum.Elapsed.Round(time.Millisecond), sum.Created, sum.Existing, sum.Replayed)
	if o.objects() {
		fmt.Fprintf(w, ", %d updated, %d stale", sum.Updated, sum.Stale)
	}
	fmt.Fprintf(w, ", %d failed, %d invalid, %d unresolved", sum.Failed, sum.Invalid, sum.Unresolved)
	if sum.Recovered > 0 {
		fmt.Fprintf(w, " (%d recovered from an earlier run or another process)", sum.Recovered)
	}
	fmt.Fprintf(w, "; %s, %s", plural(sum.Requests, "request"), fmt.Sprintf("%d %s", sum.Retries, pick(sum.Retries, "retry", "retries")))
	if t.bytes > 0 {
		fmt.Fprintf(w, ", %s of files sent", bytesText(t.bytes))
	}
	fmt.Fprintln(w)
	if hidden := sum.Stale - t.staleShown; hidden > 0 {
		fmt.Fprintf(w, "  %d more stale %s not named above: older versions than their objects hold, nothing sent (--results FILE lists every line)\n", hidden, pick(hidden, "line", "lines"))
	}
	if hidden := sum.Recovered - t.recoveredShown; hidden > 0 {
		fmt.Fprintf(w, "  %d more recovered %s not named above (nothing to do; --results FILE lists every line)\n", hidden, pick(hidden, "item", "items"))
	}
	if sum.Total == 0 && sum.Skipped == 0 && t.unread == 0 {
		fmt.Fprintf(w, "  nothing to deposit: %s holds no line (blank lines are skipped)\n", inputName(o.input))
	}
	if sum.Rechecks > 0 {
		fmt.Fprintf(w, "  %s looked again for records created after a search found nothing (a duplicate the search index hid is reported as failed)\n", plural(sum.Rechecks, "request"))
	}
	if sum.Skipped > 0 {
		fmt.Fprintf(w, "  %s skipped: left to other shards (--shard %s)\n", plural(sum.Skipped, "line"), o.shardSpec)
	}
	if sum.LeasesLost > 0 {
		fmt.Fprintf(w, "  %s given up, not renewed in time: %s stopped, unresolved, and another process may take %s over\n",
			plural(sum.LeasesLost, "lease"), pick(sum.LeasesLost, "its deposit", "their deposits"), pick(sum.LeasesLost, "its key", "their keys"))
	}
	if t.unread > 0 {
		fmt.Fprintf(w, "  %s not read: the run stopped before them (they are not in the %s above)\n", plural(int(t.unread), "line"), plural(sum.Total, "item"))
	}
	// An item this run sent nothing for is not called uncertain: nothing
	// this run did can have made it.
	sent := sum.Unresolved - sum.NotSent
	switch {
	case sent > 0 && t.stopped:
		fmt.Fprintf(w, "  %s unresolved: the run stopped (below); once that is fixed, running again settles %s safely\n", plural(sent, "item"), pick(sent, "it", "them"))
	case sent > 0:
		fmt.Fprintf(w, "  %s unresolved: outcome unknown; run the same command again (safe: nothing is created twice)\n", plural(sent, "item"))
	}
	switch n := sum.NotSent; {
	case n > 0 && t.stopped:
		fmt.Fprintf(w, "  %s not sent: the run stopped before %s first request; once that is fixed, running again sends %s\n", plural(n, "item"), pick(n, "its", "their"), pick(n, "it", "them"))
	case n > 0 && t.interrupted:
		fmt.Fprintf(w, "  %s not sent: the run was interrupted before %s first request; run the same command again to send %s\n", plural(n, "item"), pick(n, "its", "their"), pick(n, "it", "them"))
	case n > 0:
		fmt.Fprintf(w, "  %s not sent: the run ended before %s first request; run the same command again to send %s\n", plural(n, "item"), pick(n, "its", "their"), pick(n, "it", "them"))
	}
	switch {
	case sum.Failed > 0 && t.keyReused == sum.Failed:
		fmt.Fprintf(w, "  %s failed with 422 under idempotency-key (the server holds the key with another body, see above): --retry-failed cannot help while it keeps the key\n", plural(sum.Failed, "item"))
	case sum.Failed > 0:
		fmt.Fprintf(w, "  %s failed: reasons above and in \"deposit status --db %s\"; after fixing the cause, run again with --retry-failed", plural(sum.Failed, "item"), showDB(o.db))
		if t.keyReused > 0 {
			fmt.Fprintf(w, " (it cannot help the %d refused with 422 under idempotency-key, see above)", t.keyReused)
		}
		fmt.Fprintln(w)
	}
	if sum.Invalid > 0 {
		fmt.Fprintf(w, "  %s invalid (listed above by line number): fix them and run again; the other lines are replayed without requests\n", plural(sum.Invalid, "line"))
	}
}

// inputName is how the summary names the input.
func inputName(input string) string {
	if input == "-" {
		return "stdin"
	}
	return input
}

// parseShard reads --shard I/N (1-based) as the client's 0-based Shard.
func parseShard(spec string) (client.Shard, error) {
	i, n, ok := strings.Cut(spec, "/")
	a, errA := strconv.Atoi(i)
	b, errB := strconv.Atoi(n)
	if !ok || errA != nil || errB != nil || b < 1 || a < 1 || a > b {
		return client.Shard{}, fmt.Errorf("%q is not I/N with 1 ≤ I ≤ N, such as 1/4", spec)
	}
	return client.Shard{Index: a - 1, Count: b}, nil
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	return fmt.Sprintf("%d %s", n, pick(n, noun, noun+"s"))
}

// pick is one when n is 1, else many: "retry" or "retries", "it" or
// "them".
func pick(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// explainStore turns a store error into a message a user can act on. db
// is --db, printed without a password.
func explainStore(db string, err error) string {
	shown := showDB(db)
	fresh := "give --db a new file or an existing deposit store"
	if isPostgres(db) {
		fresh = "name a new schema (schema= in the --db URL) or an existing deposit store"
	}
	switch {
	case errors.Is(err, dedup.ErrNotDepositStore):
		return fmt.Sprintf("%s is not a deposit store (left untouched): %s (%v)", shown, fresh, err)
	case errors.Is(err, dedup.ErrNewerSchema):
		return fmt.Sprintf("%s was written by a newer version of deposit (left untouched): upgrade deposit (%v)", shown, err)
	case errors.Is(err, dedup.ErrOlderSchema):
		return fmt.Sprintf("%s was written by an older version of deposit (left untouched): run `deposit run` with this --db once to upgrade it (%v)", shown, err)
	case errors.Is(err, dedup.ErrDiskFull):
		return diskFull(err)
	}
	return fmt.Sprintf("store %s: %v", shown, err)
}

// explainStop turns the error that stopped a run into a message a user can
// act on. Credentials and the endpoint's query are never in it.
func explainStop(err error, proto, endpoint string) string {
	var herr *client.HTTPError
	if errors.As(err, &herr) {
		msg := fmt.Sprintf("%s %s: %d %s", herr.Method, herr.URL, herr.StatusCode, http.StatusText(herr.StatusCode))
		if herr.Problem != "" {
			msg += fmt.Sprintf(" (the server said: %s)", herr.Problem)
		}
		if h := answerHint(err, proto); h != "" {
			msg += ": " + h
		}
		return msg
	}
	if errors.Is(err, client.ErrUnreachable) && errors.Is(err, http.ErrSchemeMismatch) {
		return fmt.Sprintf("the endpoint %s is unreachable: the server there speaks plain HTTP, not HTTPS: check the scheme of --endpoint", redact(endpoint))
	}
	if errors.Is(err, client.ErrUnreachable) {
		return fmt.Sprintf("the endpoint %s is unreachable (%s): check --endpoint and the network", redact(endpoint), lastAnswer(err))
	}
	if errors.Is(err, dedup.ErrDiskFull) {
		return diskFull(err)
	}
	return oneLine(err)
}

// diskFull explains a store whose disk is full; err names the store.
func diskFull(err error) string {
	return fmt.Sprintf("disk full: %s: free space there and run the same command again; everything recorded so far is kept, and the items left uncertain are settled without a second record",
		oneLine(err))
}

// resultWriter writes the --results file, each line with one write(2) of
// its own: a process killed at any moment leaves whole lines behind (a
// buffered writer cut the last one at a buffer boundary), and every line
// written is in the file even if the run never ends, follow-ups included.
// OnResult calls are serialised, so it needs no lock.
type resultWriter struct {
	f   *os.File
	err error
}

// checkResults refuses a --results file that is what the run reads or
// keeps: the input, the SQLite store or a file kept beside it
// (dedup.SQLiteFiles), or any SQLite database. Paths are compared as files
// (device and inode), so that another spelling, a hard link or a symbolic
// link is refused too; a file not there yet by its folder and name, as
// os.Create would make it. It writes nothing, and reads no more than the
// first bytes of an existing file.
func checkResults(o runOptions, stdin io.Reader) error {
	if o.results == "" {
		return nil
	}
	refuse := func(what string) error {
		return fmt.Errorf("--results %s is %s: the results would overwrite it; give --results a file of its own", o.results, what)
	}
	switch f, ok := stdin.(*os.File); {
	case o.input != "-":
		if sameFile(o.results, o.input) {
			return refuse("the input " + o.input)
		}
	case ok:
		ri, rerr := os.Stat(o.results)
		ii, ierr := f.Stat()
		if rerr == nil && ierr == nil && os.SameFile(ri, ii) {
			return refuse("the input (stdin)")
		}
	}
	if !isPostgres(o.db) {
		for _, p := range dedup.SQLiteFiles(o.db) {
			what := storeFile(p)
			switch {
			case sameFile(o.results, p) && what == "":
				return refuse("the store --db " + o.db)
			case sameFile(o.results, p) && p == o.results:
				return refuse(fmt.Sprintf("the %s of the store --db %s", what, o.db))
			case sameFile(o.results, p):
				return refuse(fmt.Sprintf("%s, the %s of the store --db %s", p, what, o.db))
			case inFolder(o.results, p):
				return refuse(fmt.Sprintf("in %s, the %s of the store --db %s", p, what, o.db))
			}
		}
	}
	if sqlitefile.HasHeader(o.results) {
		return refuse("a SQLite database")
	}
	return nil
}

// storeFile names what a path of dedup.SQLiteFiles holds, by its suffix;
// "" for the store itself.
func storeFile(p string) string {
	for _, f := range []struct{ suffix, what string }{
		{"-wal", "write-ahead log"}, {"-shm", "shared-memory index"},
		{"-journal", "rollback journal"}, {"-owners", "folder of owner locks"},
	} {
		if strings.HasSuffix(p, f.suffix) {
			return f.what
		}
	}
	return ""
}

// sameFile reports whether paths a and b name one file: the same device
// and inode if both exist; if neither does, the same name in the same
// folder, after the symbolic links that os.Create would follow.
func sameFile(a, b string) bool {
	ai, aerr := os.Stat(a)
	bi, berr := os.Stat(b)
	switch {
	case aerr == nil && berr == nil:
		return os.SameFile(ai, bi)
	case aerr == nil || berr == nil:
		return false
	}
	a, b = followLinks(a), followLinks(b)
	if filepath.Base(a) != filepath.Base(b) {
		return false
	}
	ad, aerr := os.Stat(filepath.Dir(a))
	bd, berr := os.Stat(filepath.Dir(b))
	return aerr == nil && berr == nil && os.SameFile(ad, bd)
}

// inFolder reports whether the file at path is, or would be made, in the
// folder dir.
func inFolder(path, dir string) bool {
	di, err := os.Stat(dir)
	if err != nil || !di.IsDir() {
		return false
	}
	pi, err := os.Stat(filepath.Dir(followLinks(path)))
	return err == nil && os.SameFile(pi, di)
}

// followLinks follows the symbolic links that path's last element is, a
// dangling one too, as opening it would; at most 40, as Linux does.
func followLinks(path string) string {
	for range 40 {
		target, err := os.Readlink(path)
		if err != nil {
			return path
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		path = target
	}
	return path
}

func createResults(path string) (*resultWriter, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--results: %w", err)
	}
	return &resultWriter{f: f}, nil
}

func (rw *resultWriter) write(r client.ItemResult) {
	if rw.err != nil {
		return
	}
	line := resultJSON{
		Line: r.Line, Key: r.Key, Outcome: string(r.Outcome), Identifier: r.Identifier, Record: r.RecordID,
		Status: r.Status, Error: oneLine(r.Err), FollowUp: r.FollowUp, Object: r.Object, Current: r.Current,
	}
	if !r.CurrentSince.IsZero() {
		since := r.CurrentSince.UTC()
		line.CurrentSince = &since
	}
	b, err := json.Marshal(line)
	if err == nil {
		_, err = rw.f.Write(append(b, '\n'))
	}
	rw.err = err
}

func (rw *resultWriter) close() error {
	err := rw.err
	if cerr := rw.f.Close(); err == nil {
		err = cerr
	}
	return err
}
