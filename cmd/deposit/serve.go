package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/repotest"
)

const serveAbout = `Runs the reference repository: both protocols of the design, records that
the server mints identifiers for (10.5072/...), and declarative fault injection
for demos and for testing your own batch programs. Records stay in memory
unless --db is given. It serves until SIGINT or SIGTERM, then prints its
counters (requests, records, duplicates, faults by kind). While it runs,
GET {URL}/_deposit/stats answers them as JSON; that request is neither
counted nor faulted, and no protocol uses the path.

Under put, records live at {URL}/{key} (PUT with If-None-Match: * creates,
GET reads back); under idempotency-key, POST to {URL} with an Idempotency-Key.
Under datacite it is a DataCite REST API stub (POST {URL}/dois, prefix
10.5072, DataCite's own 422 and 409 answers) for trying --protocol datacite
locally; it asks for basic auth only when DATACITE_REPOSITORY_ID and
DATACITE_PASSWORD are set. Under invenio it is an InvenioRDM REST API stub
under {URL}/api (drafts, files, publish, the user's search, lagging by
--index-lag) for trying --protocol invenio --endpoint {URL}/api; it asks for
the token in DEPOSIT_AUTHORIZATION only when that is set. Under dataverse it is
a Dataverse native API stub under {URL}/api (one collection, root; datasets,
files, publish under a finalizePublication lock held --publish-lag, a search
lagging by --index-lag, the contents listing) for trying --protocol
dataverse --endpoint {URL} --collection root; it asks for the API token in
DEPOSIT_AUTHORIZATION only when that is set. Under osf it is a stub of OSF's
API v2 under {URL}/v2 (nodes tagged and listed, made public, DOIs) and of
WaterButler's OSF Storage under {URL}/v1/resources (uploads by name, 409 for
a name taken) for trying --protocol osf --endpoint {URL}/v2; it asks for the
token in DEPOSIT_AUTHORIZATION only when that is set. Under figshare it is
a Figshare API v2 stub under {URL}/v2 (private articles, files through an
upload service in parts of --part-size under {URL}/upload, publish, a search
lagging by --index-lag) for trying --protocol figshare --endpoint {URL}/v2;
it asks for the personal token in DEPOSIT_AUTHORIZATION only when that is
set. Under crossref it is a stub of Crossref's deposit system (POST {URL}/servlet/deposit queues an
upload for --queue-delay, then processes it; results by file name at
{URL}/servlet/submissionDownload, the XML query at {URL}/servlet/query) for
trying --protocol crossref --endpoint {URL}/servlet/deposit; it asks for
CROSSREF_LOGIN and CROSSREF_PASSWORD only when those are set. --db and
--verify-key apply to none of the stubs.`

// shutdownGrace is how long serve waits for requests in progress when asked
// to stop.
const shutdownGrace = 5 * time.Second

// statsPath is where serve answers GET and HEAD with the repository's live
// counters. It is clear of every protocol: a put key is one path segment,
// idempotency-key answers GET nowhere, and the stubs live under /dois and
// /api.
const statsPath = "/_deposit/stats"

func serveCmd(ctx context.Context, args []string, s streams) int {
	var (
		addr       string
		protocol   string
		faults     string
		seed       int64
		db         string
		verifyKey  bool
		latency    time.Duration
		lockHold   time.Duration
		indexLag   time.Duration
		rateLimit  float64
		publishLag time.Duration
		listLag    time.Duration
		queue      time.Duration
		partSize   int64
	)
	c := newCommand("serve", "deposit serve [--addr HOST:PORT] [--protocol put|idempotency-key|datacite|invenio|dataverse|osf|figshare|crossref] [--faults SPEC] [--seed N] [--db FILE] [--verify-key] [--latency DUR] [--lock-hold DUR] [--index-lag DUR] [--publish-lag DUR] [--list-lag DUR] [--part-size N] [--rate-limit N] [--queue-delay DUR]",
		serveAbout, repotest.FaultsHelp+"\n")
	c.fs.StringVar(&addr, "addr", "127.0.0.1:8080", "listen on `HOST:PORT` (port 0 picks a free one)")
	c.fs.StringVar(&protocol, "protocol", "put", "put, idempotency-key, datacite, invenio, dataverse, osf, figshare or crossref")
	c.fs.StringVar(&faults, "faults", "", "fault `SPEC` (grammar below); empty injects none")
	c.fs.Int64Var(&seed, "seed", 1, "seed of the faults and of the minted identifiers")
	c.fs.StringVar(&db, "db", "", "keep records in this SQLite `FILE` (they survive a restart); default in memory")
	c.fs.BoolVar(&verifyKey, "verify-key", false, "put: refuse (422) a PUT whose key is not the SHA-256 of its body")
	c.fs.DurationVar(&latency, "latency", 0, "delay every create by this long before it commits")
	c.fs.DurationVar(&indexLag, "index-lag", time.Second, "invenio, dataverse, figshare: how long a write takes to show in search")
	c.fs.DurationVar(&publishLag, "publish-lag", 0, "dataverse: how long a publication holds its finalizePublication lock before the version is released")
	c.fs.DurationVar(&listLag, "list-lag", 0, "osf: how long a new node takes to show in the user's node listing (OSF's shows it at once)")
	c.fs.DurationVar(&lockHold, "lock-hold", 0, "idempotency-key: hold each key's lock this long before the create commits (a second request meanwhile gets 409, without Retry-After, as IRI answers)")
	c.fs.Int64Var(&partSize, "part-size", 0, "figshare: the size in bytes of an upload's parts but the last (default 5 MiB)")
	c.fs.DurationVar(&queue, "queue-delay", time.Second, "crossref: how long an upload waits queued, and then as long in process, before its result")
	c.fs.Float64Var(&rateLimit, "rate-limit", 0, "put, idempotency-key: accept `N` writes a second and answer 429 with Retry-After: 1 above that; 0 accepts every write")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(s, "unexpected argument %q", pos[0])
	}
	if _, err := repotest.ParseFaults(faults); err != nil {
		return c.usageError(s, "--faults: %v", err)
	}
	var h repository
	var err error
	if protocol == "crossref" {
		h, err = newCrossref(repotest.CrossrefConfig{Faults: faults, Seed: seed, Latency: latency, QueueDelay: queue, ProcessDelay: queue}, s.getenv)
	} else {
		h, err = newRepository(protocol, repotest.Config{Faults: faults, Seed: seed, DBPath: db, VerifyKey: verifyKey, Latency: latency, LockHold: lockHold, RateLimit: rateLimit}, stubTimes{indexLag: indexLag, publishLag: publishLag, listLag: listLag, partSize: partSize}, s.getenv)
	}
	if errors.Is(err, repotest.ErrConfig) {
		return c.usageError(s, "%v", err)
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit serve: %v\n", err)
		return exitStop
	}
	defer h.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit serve: %v\n", err)
		return exitStop
	}
	srv := &http.Server{Handler: withStats(h), ReadHeaderTimeout: 10 * time.Second}
	where := "records in memory"
	if db != "" {
		where = "records in " + db
	}
	if faults == "" {
		faults = "none"
	}
	fmt.Fprintf(s.stdout, "deposit serve: listening on http://%s (protocol %s, faults %s, seed %d, %s)\n",
		ln.Addr(), protocolOrPut(protocol), faults, seed, where)
	fmt.Fprintf(s.stdout, "deposit serve: live counters at http://%s%s\n", ln.Addr(), statsPath)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		err = srv.Shutdown(sctx)
		cancel()
		if err != nil {
			_ = srv.Close()
		}
		err = nil
	}
	fmt.Fprintf(s.stdout, "deposit serve: stopped: %s\n", h.counters())
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(s.stderr, "deposit serve: %v\n", err)
		return exitStop
	}
	return exitDone
}

// repository is what serve runs: the reference repository or a stub, with
// its counters in one line and as a value for JSON.
type repository interface {
	http.Handler
	Close() error
	counters() string
	stats() any
}

// withStats answers GET and HEAD of statsPath with repo's stats as JSON,
// without repo seeing the request, so it is neither counted nor faulted.
// Every other request goes to repo, as it would without the stats path.
func withStats(repo repository) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != statsPath || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			repo.ServeHTTP(w, r)
			return
		}
		body, err := json.Marshal(repo.stats())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
		_, _ = w.Write(append(body, '\n'))
	})
}

// faultKinds renders the faults injected by kind, each after two spaces, in
// the order of the kinds' names: "  429=19  500=7  drop=59".
func faultKinds(byKind map[string]int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		fmt.Fprintf(&b, "  %s=%d", k, byKind[k])
	}
	return b.String()
}

// stubTimes are the lags of the InvenioRDM, Dataverse and Figshare stubs,
// and the Figshare stub's part size.
type stubTimes struct {
	indexLag, publishLag, listLag time.Duration
	partSize                      int64
}

// newRepository returns the repository of protocol; cfg holds the settings
// shared with the reference server (the stubs take its faults, seed and
// latency); times are the stubs' own.
func newRepository(protocol string, cfg repotest.Config, times stubTimes, getenv func(string) string) (repository, error) {
	indexLag := times.indexLag
	if protocol == "dataverse" {
		d, err := repotest.NewDataverse(repotest.DataverseConfig{Faults: cfg.Faults, Seed: cfg.Seed, Latency: cfg.Latency,
			IndexLag: indexLag, PublishLag: times.publishLag, Token: strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION"))})
		return dataverseRepository{d}, err
	}
	if protocol == "osf" {
		o, err := repotest.NewOSF(repotest.OSFConfig{Faults: cfg.Faults, Seed: cfg.Seed, Latency: cfg.Latency,
			ListLag: times.listLag, Token: strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION"))})
		return osfRepository{o}, err
	}
	if protocol == "figshare" {
		f, err := repotest.NewFigshare(repotest.FigshareConfig{Faults: cfg.Faults, Seed: cfg.Seed, Latency: cfg.Latency,
			IndexLag: indexLag, PartSize: times.partSize, Token: strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION"))})
		return figshareRepository{f}, err
	}
	if protocol == "invenio" {
		token := strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION"))
		if scheme, rest, ok := strings.Cut(token, " "); ok && strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(rest)
		}
		iv, err := repotest.NewInvenio(repotest.InvenioConfig{Faults: cfg.Faults, Seed: cfg.Seed, Latency: cfg.Latency, IndexLag: indexLag, Token: token})
		return invenioRepository{iv}, err
	}
	if protocol == "datacite" {
		d, err := repotest.NewDataCite(repotest.DataCiteConfig{
			Faults: cfg.Faults, Seed: cfg.Seed, Latency: cfg.Latency,
			Username: getenv("DATACITE_REPOSITORY_ID"), Password: getenv("DATACITE_PASSWORD"),
		})
		return dataciteRepository{d}, err
	}
	cfg.Protocol = repotest.Protocol(protocol)
	h, err := repotest.NewHandler(cfg)
	return referenceRepository{h}, err
}

// newCrossref is the Crossref stub, asking for the login in
// CROSSREF_LOGIN and CROSSREF_PASSWORD when both are set.
func newCrossref(cfg repotest.CrossrefConfig, getenv func(string) string) (repository, error) {
	if login, password := getenv("CROSSREF_LOGIN"), getenv("CROSSREF_PASSWORD"); login != "" && password != "" {
		cfg.Login, cfg.Password = login, password
	}
	c, err := repotest.NewCrossref(cfg)
	return crossrefRepository{c}, err
}

type crossrefRepository struct{ *repotest.Crossref }

func (r crossrefRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d uploads, %d re-sent under a name already queued, %d DOIs registered, %d updates, %d refused as not newer, %d faults injected%s",
		st.Requests, st.Uploads, st.Resent, st.Registered, st.Updates, st.StaleRefused, st.Faults, faultKinds(st.FaultsByKind))
}

func (r crossrefRepository) stats() any { return r.Stats() }

type referenceRepository struct{ *repotest.Handler }

func (r referenceRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d records, %d created, %d replays, %d duplicates, %d overlapping writes, %d faults injected%s",
		st.Requests, st.Records, st.Creates, st.Replays, st.Duplicates, st.Overlaps, st.Faults, faultKinds(st.FaultsByKind))
}

func (r referenceRepository) stats() any { return r.Stats() }

type invenioRepository struct{ *repotest.Invenio }

func (r invenioRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d drafts created, %d published, %d files committed, %d searches, %d faults injected%s",
		st.Requests, st.Drafts, st.Published, st.Commits, st.Searches, st.Faults, faultKinds(st.FaultsByKind))
}

func (r invenioRepository) stats() any { return r.Stats() }

type dataverseRepository struct{ *repotest.Dataverse }

func (r dataverseRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d datasets created, %d released, %d files added, %d duplicate markers, %d duplicate files, %d searches, %d faults injected%s",
		st.Requests, st.Datasets, st.Released, st.Files, st.DuplicateMarkers, st.DuplicateFiles, st.Searches, st.Faults, faultKinds(st.FaultsByKind))
}

func (r dataverseRepository) stats() any { return r.Stats() }

type osfRepository struct{ *repotest.OSF }

func (r osfRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d nodes created, %d duplicate markers, %d files, %d versions added, %d names refused, %d made public, %d DOIs, %d faults injected%s",
		st.Requests, st.Nodes, st.DuplicateMarkers, st.Files, st.Versions, st.Conflicts, st.Publics, st.DOIs, st.Faults, faultKinds(st.FaultsByKind))
}

func (r osfRepository) stats() any { return r.Stats() }

type figshareRepository struct{ *repotest.Figshare }

func (r figshareRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d articles created, %d publishes, %d files initiated, %d completed, %d parts stored, %d duplicate markers, %d duplicate files, %d searches, %d faults injected%s",
		st.Requests, st.Articles, st.Publishes, st.Files, st.Completed, st.Parts, st.DuplicateMarkers, st.DuplicateFiles, st.Searches, st.Faults, faultKinds(st.FaultsByKind))
}

func (r figshareRepository) stats() any { return r.Stats() }

type dataciteRepository struct{ *repotest.DataCite }

func (r dataciteRepository) counters() string {
	st := r.Stats()
	return fmt.Sprintf("%d requests, %d DOIs minted, %d taken, %d events, %d faults injected%s",
		st.Requests, st.Minted, st.Taken, st.Events, st.Faults, faultKinds(st.FaultsByKind))
}

func (r dataciteRepository) stats() any { return r.Stats() }

func protocolOrPut(p string) string {
	if p == "" {
		return "put"
	}
	return p
}
