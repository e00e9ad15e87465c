package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

// targetFlags are the flags that choose and configure a target.
type targetFlags struct {
	endpoint   string
	idPointer  string
	doiPrefix  string
	event      string
	noPublish  bool
	settle     time.Duration
	searchRate float64
}

// newTarget builds the client target that the flags and the environment
// name. proto must be a protocol name as protocol.Parse returns it.
func newTarget(proto string, f targetFlags, getenv func(string) string) (client.Target, error) {
	switch proto {
	case protocol.IdempotencyKey:
		return client.IdempotencyKey{Endpoint: f.endpoint, IDPointer: f.idPointer, KeySecret: []byte(getenv("DEPOSIT_KEY_SECRET"))}, nil
	case protocol.WebDAV:
		return client.WebDAV{Endpoint: f.endpoint}, nil
	case protocol.S3:
		aws, err := awsCredentials(getenv)
		if err != nil {
			return nil, err
		}
		return client.S3{Endpoint: f.endpoint, AWS: aws}, nil
	case protocol.CouchDB:
		return client.CouchDB{Endpoint: f.endpoint}, nil
	case protocol.DataCite:
		return client.DataCite{Endpoint: f.endpoint, Prefix: f.doiPrefix, Event: f.event}, nil
	case protocol.Invenio:
		return client.Invenio{Endpoint: f.endpoint, KeySecret: []byte(getenv("DEPOSIT_KEY_SECRET")), NoPublish: f.noPublish, SettleTime: f.settle, SearchRate: f.searchRate}, nil
	}
	return client.Put{Endpoint: f.endpoint, IDPointer: f.idPointer}, nil
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
func awsCredentials(getenv func(string) string) (client.AWSCredentials, error) {
	aws := client.AWSCredentials{
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
// "" when there is nothing to add.
func answerHint(err error, proto string) string {
	var herr *client.HTTPError
	if !errors.As(err, &herr) {
		if errors.Is(err, client.ErrUnreachable) {
			return "no answer at all: check --endpoint, the network and that the server is running"
		}
		return ""
	}
	switch s := herr.StatusCode; {
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		switch proto {
		case protocol.S3:
			return "the server refused the credentials or the signature: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION"
		case protocol.DataCite:
			return "DataCite refused the credentials: check DATACITE_REPOSITORY_ID and DATACITE_PASSWORD"
		case protocol.Invenio:
			return "InvenioRDM treats a missing or wrong token as anonymous: check DEPOSIT_AUTHORIZATION (a personal access token allowed to write deposits; on Zenodo the deposit:write and deposit:actions scopes)"
		}
		return "check your credentials (--header 'Authorization: ...' or DEPOSIT_AUTHORIZATION)"
	case s == http.StatusNotFound:
		switch proto {
		case protocol.S3:
			return "no such bucket: --endpoint must be the bucket URL, path style (https://host/bucket)"
		case protocol.CouchDB:
			return "no such database: --endpoint must be the database URL, and the database must exist"
		}
		return "check --endpoint (or DEPOSIT_ENDPOINT)"
	case s == http.StatusConflict && proto == protocol.WebDAV:
		return "create it, or fix --endpoint"
	case s == http.StatusMethodNotAllowed:
		return "the server does not accept this method at this URL: check --endpoint"
	case s == http.StatusNotImplemented && proto == protocol.IdempotencyKey:
		return "the server has no idempotency store, and deposit never falls back to an unprotected POST; use --protocol put if the repository supports conditional PUT"
	case s == http.StatusNotImplemented:
		return "the server does not support this request; try --protocol idempotency-key if the repository supports it"
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		return "the server is busy or unavailable: try again later"
	case s >= 500 && (proto == protocol.Put || proto == protocol.WebDAV):
		return "the server failed: check that the collection exists (nginx answers 500 for a missing directory), then try again and look at the server's logs"
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
