package main

import (
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/couchdb"
	"github.com/depositkit/deposit/target/crossref"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/dataverse"
	"github.com/depositkit/deposit/target/figshare"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/osf"
	"github.com/depositkit/deposit/target/put"
	"github.com/depositkit/deposit/target/s3"
	"github.com/depositkit/deposit/target/webdav"
)

// targetFlags are the flags that choose and configure a target.
type targetFlags struct {
	endpoint   string
	idPointer  string
	doiPrefix  string
	event      string
	adopt      bool
	noPublish  bool
	settle     time.Duration
	searchRate float64
	onChange   string // invenio: edit or version
	// queryEndpoint is Crossref's XML query servlet; inputDir the folder
	// of the input file, where a Crossref line's xml_file is read ("" for
	// stdin: the working directory).
	queryEndpoint string
	inputDir      string
	// collection, ingest and lockWait are the Dataverse target's.
	collection string
	ingest     bool
	lockWait   time.Duration
	// filesEndpoint, parent, public and doi are the OSF target's.
	filesEndpoint string
	parent        string
	public, doi   bool
	// minPartSize is the Figshare target's.
	minPartSize int64
	// partSize is the s3 target's (s3.Target.PartSize).
	partSize int64
}

// targetSpec is what the command line knows of one target. Adding a target
// to the command line is one entry in targetSpecs (and its protocol name);
// everything else (the store's names, the steps, the answers) is the
// target's own.
type targetSpec struct {
	// build makes the client's target from the flags and the environment.
	build func(f targetFlags, getenv func(string) string) (client.Target, error)
	// flags names the flags of this target alone; another target refuses
	// them rather than ignore them.
	flags []string
	// endpointOptional: the target has an endpoint of its own (DataCite's
	// test system), so --endpoint may be left out.
	endpointOptional bool
	// authorize sets the request's credentials from the environment when
	// --header did not, or says which variables are missing; endpoint is
	// the target's URL. nil takes DEPOSIT_AUTHORIZATION as the
	// Authorization header, when set.
	authorize func(endpoint string, header http.Header, getenv func(string) string) error
	// probes: the target writes with a conditional create that
	// deposit probe can try.
	probes bool
	// storesFiles: under --datasets the target stores the files' bytes, not
	// only the dataset document that lists them.
	storesFiles bool
	// standInStep names the step whose rows are the deposits themselves in
	// a store without the deposit's own rows (InvenioRDM's drafts, under
	// --no-publish); deposit status counts them as deposits then.
	standInStep string
	// keyReused reports a failure that means the server holds this
	// deposit's idempotency key with another body: --retry-failed cannot
	// help it, and the run says so.
	keyReused func(r client.ItemResult) bool
	// ownKeys, for a target that reads and keys its lines its own way
	// (driver.Payloader), is that target as deposit key builds it: no
	// endpoint or credentials, dir the folder of the input file.
	ownKeys func(dir string) client.Target
	// hint says what an answer with this status means for this target, in
	// terms of flags and environment variables; "" defers to the hints
	// every target shares.
	hint func(status int) string
}

// targetSpecs is every --protocol, by name.
var targetSpecs = map[string]targetSpec{
	protocol.Crossref: crossrefSpec,
	protocol.Put: {
		build: func(f targetFlags, _ func(string) string) (client.Target, error) {
			return put.Target{Endpoint: f.endpoint, IDPointer: f.idPointer}, nil
		},
		flags: []string{"id-pointer"}, probes: true, hint: collectionHint,
	},
	protocol.IdempotencyKey: {
		build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
			return idempotencykey.Target{Endpoint: f.endpoint, IDPointer: f.idPointer, KeySecret: []byte(getenv("DEPOSIT_KEY_SECRET"))}, nil
		},
		flags: []string{"id-pointer"},
		keyReused: func(r client.ItemResult) bool {
			return r.Outcome == client.OutcomeFailed && r.Status == http.StatusUnprocessableEntity
		},
		hint: func(status int) string {
			if status == http.StatusNotImplemented {
				return "the server has no idempotency store, and deposit never falls back to an unprotected POST; use --protocol put if the repository supports conditional PUT"
			}
			return ""
		},
	},
	protocol.WebDAV: {
		build: func(f targetFlags, _ func(string) string) (client.Target, error) {
			return webdav.Target{Endpoint: f.endpoint}, nil
		},
		probes: true,
		hint: func(status int) string {
			if status == http.StatusConflict {
				return "create it, or fix --endpoint"
			}
			return collectionHint(status)
		},
	},
	protocol.S3: {
		build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
			aws, err := awsCredentials(getenv)
			if err != nil {
				return nil, err
			}
			return s3.Target{Endpoint: f.endpoint, AWS: aws, PartSize: f.partSize}, nil
		},
		flags: []string{"part-size"},
		// Requests are signed; an Authorization header would replace the
		// signature.
		authorize:   func(string, http.Header, func(string) string) error { return nil },
		probes:      true,
		storesFiles: true,
		hint: func(status int) string {
			switch status {
			case http.StatusUnauthorized, http.StatusForbidden:
				return "the server refused the credentials or the signature: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION"
			case http.StatusNotFound:
				return "no such bucket: --endpoint must be the bucket URL, path style (https://host/bucket)"
			}
			return ""
		},
	},
	protocol.CouchDB: {
		build: func(f targetFlags, _ func(string) string) (client.Target, error) {
			return couchdb.Target{Endpoint: f.endpoint}, nil
		},
		probes: true, storesFiles: true,
		hint: func(status int) string {
			if status == http.StatusNotFound {
				return "no such database: --endpoint must be the database URL, and the database must exist"
			}
			return ""
		},
	},
	protocol.DataCite: {
		build: func(f targetFlags, _ func(string) string) (client.Target, error) {
			return datacite.Target{Endpoint: f.endpoint, Prefix: f.doiPrefix, Event: f.event, Adopt: f.adopt}, nil
		},
		flags: []string{"doi-prefix", "event", "adopt"}, endpointOptional: true,
		// The fold of a payload's DOI to lower case is all DataCite adds
		// to a key, and it does not depend on the prefix: any valid one
		// builds the driver.
		ownKeys: func(string) client.Target { return datacite.Target{Prefix: "10.5072"} },
		authorize: func(_ string, header http.Header, getenv func(string) string) error {
			if header.Get("Authorization") != "" {
				return nil
			}
			if auth := getenv("DEPOSIT_AUTHORIZATION"); auth != "" {
				header.Set("Authorization", auth)
				return nil
			}
			id, password := getenv("DATACITE_REPOSITORY_ID"), getenv("DATACITE_PASSWORD")
			if id == "" || password == "" {
				return errors.New("datacite: set DATACITE_REPOSITORY_ID and DATACITE_PASSWORD (the repository's credentials)")
			}
			header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(id+":"+password)))
			return nil
		},
		hint: func(status int) string {
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				return "DataCite refused the credentials: check DATACITE_REPOSITORY_ID and DATACITE_PASSWORD"
			}
			return ""
		},
	},
	protocol.Invenio: {
		build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
			return invenio.Target{Endpoint: f.endpoint, KeySecret: []byte(getenv("DEPOSIT_KEY_SECRET")), NoPublish: f.noPublish, SettleTime: f.settle, SearchRate: f.searchRate, OnChange: f.onChange}, nil
		},
		flags: []string{"no-publish", "settle", "search-rate", "on-change"}, storesFiles: true, standInStep: protocol.DraftStep,
		authorize: func(endpoint string, header http.Header, getenv func(string) string) error {
			auth := cmp.Or(header.Get("Authorization"), getenv("DEPOSIT_AUTHORIZATION"))
			if auth == "" && !loopback(endpoint) {
				return errors.New("invenio: set DEPOSIT_AUTHORIZATION to your personal access token")
			}
			if auth == "" {
				return nil // a server on this machine (deposit serve) may need none
			}
			header.Set("Authorization", invenioAuthorization(auth))
			return nil
		},
		hint: func(status int) string {
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				return "InvenioRDM treats a missing or wrong token as anonymous: check DEPOSIT_AUTHORIZATION (a personal access token allowed to write deposits; on Zenodo the deposit:write and deposit:actions scopes)"
			}
			return ""
		},
	},
	protocol.Dataverse: {
		build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
			if f.collection == "" {
				return nil, errors.New("dataverse: give --collection, the alias of the collection datasets go in (such as root)")
			}
			return dataverse.Target{Endpoint: f.endpoint, Collection: f.collection, Token: strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION")),
				Ingest: f.ingest, LockWait: f.lockWait, SettleTime: f.settle}, nil
		},
		flags: []string{"collection", "ingest", "lock-wait", "settle"}, storesFiles: true,
		// The token goes in X-Dataverse-key, which the target sets itself.
		authorize: func(endpoint string, _ http.Header, getenv func(string) string) error {
			if strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION")) == "" && !loopback(endpoint) {
				return errors.New("dataverse: set DEPOSIT_AUTHORIZATION to your API token")
			}
			return nil
		},
		hint: func(status int) string {
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				return "check DEPOSIT_AUTHORIZATION: an API token allowed to add datasets to --collection"
			}
			if status == http.StatusNotFound {
				return "check --endpoint (the installation's root, such as https://demo.dataverse.org) and --collection"
			}
			return ""
		},
	},
	protocol.OSF: {
		build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
			return osf.Target{Endpoint: f.endpoint, Files: f.filesEndpoint, Token: strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION")),
				Parent: f.parent, Public: f.public, DOI: f.doi, SettleTime: f.settle}, nil
		},
		flags: []string{"files-endpoint", "parent", "public", "doi", "settle"}, storesFiles: true, endpointOptional: true,
		// The token goes in Authorization as a bearer token, which the
		// target sets itself.
		authorize: func(endpoint string, _ http.Header, getenv func(string) string) error {
			if strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION")) == "" && !loopback(cmp.Or(endpoint, osf.DefaultEndpoint)) {
				return errors.New("osf: set DEPOSIT_AUTHORIZATION to your personal access token (scope osf.full_write)")
			}
			return nil
		},
		hint: func(status int) string {
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				return "check DEPOSIT_AUTHORIZATION: a personal access token with the osf.full_write scope (and write access to --parent)"
			}
			if status == http.StatusNotFound {
				return "check --endpoint (the API root, such as https://api.osf.io/v2), --files-endpoint and --parent"
			}
			return ""
		},
	},
	protocol.Figshare: {
		build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
			return figshare.Target{Endpoint: f.endpoint, Token: strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION")),
				SettleTime: f.settle, MinPartSize: f.minPartSize}, nil
		},
		flags: []string{"settle", "min-part-size"}, storesFiles: true,
		// The token goes in "Authorization: token ...", which the target
		// sets itself, so that no --header replaces it.
		authorize: func(endpoint string, _ http.Header, getenv func(string) string) error {
			if strings.TrimSpace(getenv("DEPOSIT_AUTHORIZATION")) == "" && !loopback(endpoint) {
				return errors.New("figshare: set DEPOSIT_AUTHORIZATION to your personal token")
			}
			return nil
		},
		hint: func(status int) string {
			if status == http.StatusUnauthorized || status == http.StatusForbidden {
				return "check DEPOSIT_AUTHORIZATION: a Figshare personal token (account, Integrations)"
			}
			if status == http.StatusNotFound {
				return "check --endpoint (the API root, such as https://api.figshare.com/v2)"
			}
			return ""
		},
	},
}

// crossrefSpec is --protocol crossref: the login from CROSSREF_LOGIN and
// CROSSREF_PASSWORD, sent in Crossref's form and parameters, never as a
// header; a server on this machine (deposit serve) may need none.
var crossrefSpec = targetSpec{
	build: func(f targetFlags, getenv func(string) string) (client.Target, error) {
		return crossref.Target{Endpoint: f.endpoint, QueryEndpoint: f.queryEndpoint, Login: getenv("CROSSREF_LOGIN"),
			Password: getenv("CROSSREF_PASSWORD"), Dir: f.inputDir, Settle: f.settle}, nil
	},
	flags: []string{"query-endpoint", "settle"}, endpointOptional: true,
	ownKeys: func(dir string) client.Target { return crossref.Target{Dir: dir} },
	authorize: func(endpoint string, _ http.Header, getenv func(string) string) error {
		if (getenv("CROSSREF_LOGIN") == "" || getenv("CROSSREF_PASSWORD") == "") && !loopback(endpoint) {
			return errors.New("crossref: set CROSSREF_LOGIN and CROSSREF_PASSWORD (the Crossref login that deposits)")
		}
		return nil
	},
	hint: func(status int) string {
		// A 200 that stops a run is Crossref's login page, its answer to a
		// wrong login as much as a 401 is.
		if status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusOK {
			return "Crossref refused the login: check CROSSREF_LOGIN (a role, or user/role) and CROSSREF_PASSWORD"
		}
		if status == http.StatusNotFound {
			return "check --endpoint: the deposit servlet, such as https://test.crossref.org/servlet/deposit"
		}
		return ""
	},
}

// collectionHint is the hint of the targets that write into a collection
// a web server serves (put, WebDAV).
func collectionHint(status int) string {
	if status >= 500 && status != http.StatusNotImplemented && status != http.StatusServiceUnavailable {
		return "the server failed: check that the collection exists (nginx answers 500 for a missing directory), then try again and look at the server's logs"
	}
	return ""
}

// specOf is the spec of protocol proto, as protocol.Parse returns it.
func specOf(proto string) targetSpec {
	spec, ok := targetSpecs[proto]
	if !ok {
		panic("deposit: no target spec for protocol " + proto)
	}
	return spec
}

// probed names the targets deposit probe can try, in the help's order.
func probed() []string {
	var names []string
	for _, name := range protocol.Names() {
		if specOf(name).probes {
			names = append(names, name)
		}
	}
	return names
}

// newTarget builds the client target that the flags and the environment
// name. proto must be a protocol name as protocol.Parse returns it.
func newTarget(proto string, f targetFlags, getenv func(string) string) (client.Target, error) {
	return specOf(proto).build(f, getenv)
}

// authorize sets header's credentials for proto from the environment.
func authorize(proto, endpoint string, header http.Header, getenv func(string) string) error {
	if a := specOf(proto).authorize; a != nil {
		return a(endpoint, header, getenv)
	}
	if auth := getenv("DEPOSIT_AUTHORIZATION"); auth != "" && header.Get("Authorization") == "" {
		header.Set("Authorization", auth)
	}
	return nil
}

// foreignFlag returns the name of a flag of set that belongs to a target
// other than proto, and that target; "" when there is none.
func foreignFlag(proto string, set map[string]bool) (name, owner string) {
	own := map[string]bool{}
	for _, f := range specOf(proto).flags {
		own[f] = true
	}
	for _, other := range protocol.Names() {
		for _, f := range specOf(other).flags {
			if set[f] && !own[f] {
				return f, other
			}
		}
	}
	return "", ""
}

// checkEndpoint refuses an endpoint that is not an http or https URL with
// a host, naming it as the user wrote it (without user info or query) and
// where it came from: --endpoint, or DEPOSIT_ENDPOINT when the flag was not
// given.
func checkEndpoint(raw string, fromEnv bool) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https")) && u.Host != "" {
		return nil
	}
	source := "--endpoint"
	if fromEnv {
		source = "DEPOSIT_ENDPOINT"
	}
	return fmt.Errorf("%s %q: want an http or https URL, such as https://repo.example.org/records", source, credential.Shown(raw))
}

// awsCredentials reads the S3 signing credentials from the usual AWS
// environment variables. The region defaults to us-east-1.
func awsCredentials(getenv func(string) string) (s3.Credentials, error) {
	aws := s3.Credentials{
		AccessKeyID:     getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken:    getenv("AWS_SESSION_TOKEN"),
		Region:          getenv("AWS_REGION"),
	}
	if aws.Region == "" {
		aws.Region = getenv("AWS_DEFAULT_REGION")
	}
	if aws.AccessKeyID == "" || aws.SecretAccessKey == "" {
		return aws, errors.New("--protocol s3 needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
	}
	return aws, nil
}

// answerHint says what an answer that stopped a run or a probe means for
// the user, in terms of the command line: flags and environment variables.
// The target's own hint comes first. "" when there is nothing to add.
func answerHint(err error, proto string) string {
	var herr *client.HTTPError
	if !errors.As(err, &herr) {
		if errors.Is(err, client.ErrUnreachable) {
			return "no answer at all: check --endpoint, the network and that the server is running"
		}
		return ""
	}
	if h := specOf(proto).hint; h != nil {
		if hint := h(herr.StatusCode); hint != "" {
			return hint
		}
	}
	switch s := herr.StatusCode; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return "check your credentials (--header 'Authorization: ...' or DEPOSIT_AUTHORIZATION)"
	case s == http.StatusNotFound:
		return "check --endpoint (or DEPOSIT_ENDPOINT)"
	case s == http.StatusMethodNotAllowed:
		return "the server does not accept this method at this URL: check --endpoint"
	case s == http.StatusNotImplemented:
		return "the server does not support this request; try --protocol idempotency-key if the repository supports it"
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		return "the server is busy or unavailable: try again later"
	case s >= 500:
		return "the server failed: try again later, and look at its logs"
	}
	return ""
}

// withHint is msg followed by the hint for err, if there is one.
func withHint(msg string, err error, proto string) string {
	if h := answerHint(err, proto); h != "" {
		return fmt.Sprintf("%s (%s)", msg, h)
	}
	return msg
}

// invenioAuthorization is the Authorization header of --protocol invenio:
// DEPOSIT_AUTHORIZATION as given when it names a scheme ("Bearer ..."),
// else the bare personal access token it holds, as a bearer token.
func invenioAuthorization(value string) string {
	value = strings.TrimSpace(value)
	if value == "" || strings.ContainsAny(value, " \t") {
		return value
	}
	return "Bearer " + value
}

// inputDir is the folder of the input file, "" for stdin.
func inputDir(input string) string {
	if input == "-" || input == "" {
		return ""
	}
	return filepath.Dir(input)
}

// loopback reports whether endpoint's host is this machine (localhost, or
// a loopback address), where a test server may ask for no credentials.
func loopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
