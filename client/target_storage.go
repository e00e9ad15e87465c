package client

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

// The storage targets store what they are given and mint nothing: the
// identifier of a record is its URL, and nothing is read back.

// WebDAV is a WebDAV collection (Apache mod_dav, nginx's dav module, ...):
// a conditional PUT {Endpoint}/{key} with If-None-Match: *. Unlike [Put], a
// 409 means the parent collection does not exist (RFC 4918 section 9.7.1),
// which concerns every item, so the run stops.
type WebDAV struct {
	// Endpoint is the collection URL. Required.
	Endpoint string
}

// S3 is a bucket of an S3-compatible store: PutObject with If-None-Match: *
// to {Endpoint}/{key}, path style, signed with AWS Signature V4. 412 means
// the object exists; the identifier is the object URL. A dataset stores each
// file as the object {key}/{P}, then the dataset document as {key}.json,
// written last as the dataset's commit marker and its identifier.
type S3 struct {
	// Endpoint is the bucket URL, path style: https://host/bucket. Required.
	Endpoint string
	// AWS holds the credentials every request is signed with. Required: the
	// client never reads the environment.
	AWS AWSCredentials
}

// CouchDB is a CouchDB database (or PouchDB Server, Cloudant): PUT
// {Endpoint}/{key}. A PUT without a revision creates the document or fails
// with 409, so it is a conditional create by nature; 201 and 202 are
// created, 409 exists. The payload must be a JSON object without top-level
// members starting with "_". A dataset is the dataset document with every
// file inline as an attachment named by its path, in that one PUT; a 409
// is confirmed by reading the document back and comparing each
// attachment's length and MD5 with the file's.
type CouchDB struct {
	// Endpoint is the database URL. Required.
	Endpoint string
}

type webdavDriver struct{ endpoint string }

func (t WebDAV) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("WebDAV.Endpoint", t.Endpoint)
	return webdavDriver{ep}, err
}

func (d webdavDriver) Name() string              { return driver.TargetName(protocol.WebDAV, d.endpoint) }
func (d webdavDriver) StepTargets() []string     { return nil }
func (d webdavDriver) SecretFingerprint() string { return "" }
func (d webdavDriver) Guards(name string) bool   { return driver.Guarded(name) }

func (d webdavDriver) Steps(k canonical.Keyed, _ string) ([]step, error) {
	url := driver.RecordURL(d.endpoint, k.Key)
	return []step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: conditionalPut(url, k.Body),
		Judge: func(a answer) verdict {
			if a.Err == nil {
				switch a.Status {
				case http.StatusPreconditionFailed:
					return verdict{Class: driver.Exists}
				case http.StatusConflict:
					return verdict{Class: driver.Stop, Problem: "the collection " + parentCollection(url) + " does not exist"}
				}
			}
			v := verdict{Class: driver.Classify(a)}
			if v.Class == driver.Created && a.Status != http.StatusCreated {
				v.Warn = ignoredConditionWarning
			}
			return v
		},
		Fallback: credential.Strip(url),
	}}, nil
}

// parentCollection is the URL of the collection a record URL is in.
func parentCollection(record string) string {
	dir, _, _ := strings.Cut(record, "?")
	return driver.RedactURL(dir[:strings.LastIndex(dir, "/")+1])
}

type s3Driver struct {
	endpoint string
	creds    AWSCredentials
}

func (t S3) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("S3.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	if t.AWS.AccessKeyID == "" || t.AWS.SecretAccessKey == "" {
		return nil, fmt.Errorf("%w: S3.AWS needs an access key id and a secret access key", ErrConfig)
	}
	return s3Driver{endpoint: ep, creds: t.AWS}, nil
}

func (d s3Driver) Name() string              { return driver.TargetName(protocol.S3, d.endpoint) }
func (d s3Driver) StepTargets() []string     { return nil }
func (d s3Driver) SecretFingerprint() string { return "" }

// Guards covers the signature too: Authorization and every X-Amz- header
// are the signer's.
func (d s3Driver) Guards(name string) bool {
	name = textproto.CanonicalMIMEHeaderKey(name)
	return driver.Guarded(name) || name == "Authorization" || strings.HasPrefix(name, "X-Amz-")
}

func (d s3Driver) WrapTransport(next http.RoundTripper) http.RoundTripper {
	return newSigningTransport(next, d.creds)
}

// objectURL is the URL of object name in the bucket, its path escaped the
// way the signature canonicalises it.
func (d s3Driver) objectURL(name string) string {
	base, query, found := strings.Cut(d.endpoint, "?")
	u := base + "/" + awsEscapePath(name)
	if found {
		u += "?" + query
	}
	return u
}

// Steps is one PutObject of the payload, or for a dataset one per file and
// then the document, under {key}.json.
func (d s3Driver) Steps(k canonical.Keyed, dir string) ([]step, error) {
	var steps []step
	name := k.Key
	if dir != "" {
		files, err := driver.DatasetFiles(k.Body)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			steps = append(steps, d.fileStep(k.Key, dir, f))
		}
		name = k.Key + ".json"
	}
	url := d.objectURL(name)
	sum := sha256.Sum256(k.Body)
	return append(steps, step{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (request, error) {
			h := http.Header{}
			h.Set("If-None-Match", "*")
			h.Set("Content-Type", "application/json")
			h.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
			return request{Method: http.MethodPut, URL: url, Header: h, Body: k.Body}, nil
		},
		Judge:    judgeS3,
		Fallback: credential.Strip(driver.RecordURL(d.endpoint, name)),
	}), nil
}

// fileStep streams one file of a dataset to the object {key}/{P} with
// If-None-Match: *. The payload hash signed is the digest the key was
// computed from, so a file changed since then is refused by the server (400
// XAmzContentSHA256Mismatch) rather than stored under a key that does not
// describe it. An object that exists already (412) was written by an
// earlier attempt at this dataset: its name holds the content key. The step
// is not durable: S3 arbitrates a re-send, and the document written last
// says the dataset is complete.
func (d s3Driver) fileStep(key, dir string, f driver.DatasetFile) step {
	url := d.objectURL(key + "/" + f.Path)
	file := filepath.Join(dir, filepath.FromSlash(f.Path))
	return step{
		Label: "file " + strconv.Quote(f.Path), Arbitrated: true,
		Build: func([]string) (request, error) {
			h := http.Header{}
			h.Set("If-None-Match", "*")
			h.Set("Content-Type", "application/octet-stream")
			h.Set("X-Amz-Content-Sha256", f.SHA256)
			open := func() (io.Reader, error) {
				fh, err := os.Open(file)
				if err != nil {
					return nil, err
				}
				return driver.SizedFile{File: fh, Size: f.Size}, nil
			}
			return request{Method: http.MethodPut, URL: url, Header: h, Open: open}, nil
		},
		Judge: judgeS3,
	}
}

// s3StopCodes are S3 error codes that concern every request of the run
// (credentials, signature, clock, region), whatever their status.
var s3StopCodes = map[string]bool{
	"AccessDenied":                 true,
	"AllAccessDisabled":            true,
	"AuthorizationHeaderMalformed": true,
	"ExpiredToken":                 true,
	"InvalidAccessKeyId":           true,
	"InvalidBucketName":            true,
	"InvalidBucketState":           true,
	"InvalidRequest":               true,
	"InvalidToken":                 true,
	"MissingSecurityHeader":        true,
	"NoSuchBucket":                 true,
	"PermanentRedirect":            true,
	"RequestTimeTooSkewed":         true,
	"SignatureDoesNotMatch":        true,
	"TokenRefreshRequired":         true,
}

// judgeS3 judges an answer to a PutObject. S3 answers a successful
// PutObject with 200, so a 200 confirms it and hints at nothing.
func judgeS3(a answer) verdict {
	if a.Err != nil {
		return verdict{Class: driver.Classify(a)}
	}
	switch s := a.Status; {
	case s == http.StatusPreconditionFailed:
		return verdict{Class: driver.Exists}
	case s < 300:
		return verdict{Class: driver.Classify(a)}
	case s < 400:
		// S3 redirects (PermanentRedirect, TemporaryRedirect) name another
		// region or endpoint: the bucket URL is wrong.
		_, problem := s3Problem(a.Body)
		return verdict{Class: driver.Stop, Problem: problem}
	}
	code, problem := s3Problem(a.Body)
	v := verdict{Class: driver.Classify(a), Problem: problem}
	switch {
	case code == "ConditionalRequestConflict" || code == "OperationAborted":
		// A concurrent write of the same key is in progress; its outcome
		// decides ours, so ask again.
		v.Class = driver.Retry
	case code == "SlowDown" || code == "RequestTimeout":
		v.Class = driver.Retry
	case s3StopCodes[code]:
		v.Class = driver.Stop
	}
	return v
}

// s3Problem reads an S3 error document: its code, and "Code: Message" as
// the problem detail ("" when the body is not one).
func s3Problem(body []byte) (code, problem string) {
	var e struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	if xml.Unmarshal(body, &e) != nil || e.Code == "" {
		return "", ""
	}
	problem = e.Code
	if e.Message != "" {
		problem += ": " + e.Message
	}
	return e.Code, driver.OneLine(problem)
}

type couchdbDriver struct{ endpoint string }

func (t CouchDB) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("CouchDB.Endpoint", t.Endpoint)
	return couchdbDriver{ep}, err
}

func (d couchdbDriver) Name() string              { return driver.TargetName(protocol.CouchDB, d.endpoint) }
func (d couchdbDriver) StepTargets() []string     { return nil }
func (d couchdbDriver) SecretFingerprint() string { return "" }
func (d couchdbDriver) Guards(name string) bool   { return driver.Guarded(name) }

// WantsFileMD5: a dataset's files are checked against the MD5 digests
// CouchDB reports for attachments.
func (d couchdbDriver) WantsFileMD5() bool { return true }

// Steps is one PUT of the document; for a dataset, the dataset document
// with every file inline as an attachment (couchdb_attachments.go).
func (d couchdbDriver) Steps(k canonical.Keyed, dir string) ([]step, error) {
	if err := checkCouchDocument(k.Body); err != nil {
		return nil, err
	}
	if dir != "" {
		s, err := d.couchDatasetStep(k, dir)
		if err != nil {
			return nil, err
		}
		return []step{s}, nil
	}
	url := driver.RecordURL(d.endpoint, k.Key)
	return []step{{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (request, error) {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			return request{Method: http.MethodPut, URL: url, Header: h, Body: k.Body}, nil
		},
		Judge:    judgeCouchDB,
		Fallback: credential.Strip(url),
	}}, nil
}

// checkCouchDocument refuses what CouchDB cannot store as a document: a JSON
// value that is not an object, and top-level members starting with "_",
// which CouchDB reserves (_id, _rev, _attachments change what a PUT means;
// others are refused).
func checkCouchDocument(body []byte) error {
	if kind := driver.JSONKind(body); kind != "an object" {
		return fmt.Errorf("couchdb: a document must be a JSON object, not %s", kind)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("couchdb: %w", err)
	}
	for name := range doc {
		if strings.HasPrefix(name, "_") {
			return fmt.Errorf("couchdb: top-level member %q: names starting with _ are reserved by CouchDB", name)
		}
	}
	return nil
}
