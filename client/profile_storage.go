package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-retryablehttp"
)

// The storage profiles: targets that store what they are given and mint
// nothing, so the identifier of a record is its URL and nothing is read back.

// webdavProfile is a conditional PUT to a WebDAV collection (Apache
// mod_dav, nginx's dav module, ...). It differs from putProfile in what a
// 409 means: RFC 4918 section 9.7.1, the parent collection does not exist,
// which concerns every item, so the run stops.
type webdavProfile struct{ baseProfile }

func (webdavProfile) request(c *Client, key string, body []byte) (string, string, http.Header, []byte, error) {
	return putProfile{}.request(c, key, body)
}

func (webdavProfile) classify(ctx context.Context, resp *http.Response, err error) class {
	if err == nil {
		switch resp.StatusCode {
		case http.StatusPreconditionFailed:
			return classExists
		case http.StatusConflict:
			prependProblem(resp, peekBody(resp), "the collection "+parentCollection(resp.Request)+
				" does not exist: create it or fix --endpoint")
			return classStop
		}
	}
	return classifyCommon(ctx, resp, err)
}

// parentCollection is the URL of the collection req writes into.
func parentCollection(req *http.Request) string {
	if req == nil {
		return "of the endpoint"
	}
	u := *req.URL
	u.Path = path.Dir(u.Path) + "/"
	if u.Path == "//" {
		u.Path = "/"
	}
	u.RawPath = ""
	return redactURL(u.String())
}

func (webdavProfile) mints() bool       { return false }
func (webdavProfile) conditional() bool { return true }

// s3Profile is PutObject with If-None-Match: * to a bucket of an
// S3-compatible store, path style ({endpoint} is the bucket URL), signed by
// the client's transport (signingHTTPClient). S3 answers a successful
// PutObject with 200, so a 200 is a confirmation, not a hint that the
// condition was ignored.
type s3Profile struct{ baseProfile }

func (s3Profile) request(c *Client, key string, body []byte) (string, string, http.Header, []byte, error) {
	sum := sha256.Sum256(body)
	h := http.Header{}
	h.Set("If-None-Match", "*")
	h.Set("Content-Type", "application/json")
	h.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	return http.MethodPut, s3ObjectURL(c, key), h, body, nil
}

// s3ObjectURL is the URL of object name in the bucket, its path escaped the
// way the signature canonicalises it.
func s3ObjectURL(c *Client, name string) string {
	base, query, found := strings.Cut(c.endpoint, "?")
	u := base + "/" + awsEscapePath(name)
	if found {
		u += "?" + query
	}
	return u
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

func (s3Profile) classify(ctx context.Context, resp *http.Response, err error) class {
	if err != nil {
		return classifyCommon(ctx, resp, err)
	}
	switch s := resp.StatusCode; {
	case s == http.StatusPreconditionFailed:
		return classExists
	case s < 300:
		return classifyCommon(ctx, resp, err)
	case s < 400:
		// S3 redirects (PermanentRedirect, TemporaryRedirect) name
		// another region or endpoint: the bucket URL is wrong.
		s3Problem(resp)
		return classStop
	}
	code := s3Problem(resp)
	switch {
	case code == "ConditionalRequestConflict" || code == "OperationAborted":
		// A concurrent write of the same key is in progress; its outcome
		// decides ours, so ask again.
		return classRetry
	case code == "SlowDown" || code == "RequestTimeout":
		return classRetry
	case s3StopCodes[code]:
		return classStop
	}
	return classifyCommon(ctx, resp, err)
}

func (s3Profile) mints() bool { return false }

// conditional is false: S3's ordinary success is 200, which says nothing
// about whether the store honours If-None-Match.
func (s3Profile) conditional() bool { return false }

// s3Error is the XML error document of S3.
type s3Error struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

// s3Problem reads an S3 error answer, returns its code, and puts "Code:
// Message" in front of the body, where the engine's problem summary (its
// first line) finds it instead of the XML declaration.
func s3Problem(resp *http.Response) string {
	body := peekBody(resp)
	var e s3Error
	if xml.Unmarshal(body, &e) != nil || e.Code == "" {
		return ""
	}
	line := e.Code
	if e.Message != "" {
		line += ": " + e.Message
	}
	prependProblem(resp, body, line)
	return e.Code
}

// couchdbProfile is PUT {database}/{key} to CouchDB or a server that speaks
// its API (PouchDB Server, Cloudant). A PUT without a revision creates the
// document or fails with 409 conflict, so it is a conditional create by
// nature; 202 is CouchDB's "accepted, not yet on every node".
type couchdbProfile struct{ baseProfile }

func (couchdbProfile) request(c *Client, key string, body []byte) (string, string, http.Header, []byte, error) {
	if err := checkCouchDocument(body); err != nil {
		return "", "", nil, nil, err
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return http.MethodPut, c.recordURL(key), h, body, nil
}

func (couchdbProfile) validate(_ *Client, _ string, body []byte) error {
	return checkCouchDocument(body)
}

// checkCouchDocument refuses what CouchDB cannot store as a document: a JSON
// value that is not an object, and top-level members starting with "_",
// which CouchDB reserves (_id, _rev, _attachments change what a PUT means;
// others are refused).
func checkCouchDocument(body []byte) error {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return errors.New("couchdb: a document must be a JSON object")
	}
	for name := range doc {
		if strings.HasPrefix(name, "_") {
			return fmt.Errorf("couchdb: top-level member %q: names starting with _ are reserved by CouchDB", name)
		}
	}
	return nil
}

func (couchdbProfile) classify(ctx context.Context, resp *http.Response, err error) class {
	if err == nil {
		switch resp.StatusCode {
		case http.StatusAccepted:
			return classCreated
		case http.StatusConflict:
			// {"error":"conflict"}: a document with this id exists. The
			// id is the content key, so it is ours.
			return classExists
		}
	}
	return classifyCommon(ctx, resp, err)
}

// CouchDB's create is conditional by nature (a PUT without a revision to an
// existing document is a 409), and 202 is its normal "accepted", so no
// status of a success hints at an ignored condition.
func (couchdbProfile) mints() bool { return false }

// peekBody reads up to maxAnswerBytes of resp's body, closes it, and puts
// the bytes back, so classify can look at an answer the engine reads later.
func peekBody(resp *http.Response) []byte {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return body
}

// prependProblem makes an answer's body (already read by peekBody) start
// with a one-line explanation, where the engine's problem summary (the first
// line) finds it.
func prependProblem(resp *http.Response, body []byte, line string) {
	resp.Body = io.NopCloser(io.MultiReader(strings.NewReader(line+"\n"), bytes.NewReader(body)))
}

// fileStorer is a profile that stores a dataset's files itself, before the
// dataset document (the design's dataset layout).
type fileStorer interface {
	// putFiles writes every file that the canonical dataset document doc
	// lists, read from dir, and adds the requests it sent to res. A
	// terminal answer is recorded as the dataset's failure.
	putFiles(ctx context.Context, c *Client, res Result, dir string, doc []byte, drain <-chan struct{}) (Result, error)
	// documentName is the name the dataset document is written under.
	documentName(key string) string
}

// documentName is {key}.json: written after every file, it marks the
// dataset complete, and its URL is the dataset's identifier.
func (s3Profile) documentName(key string) string { return key + ".json" }

// putFiles streams each file of the dataset to the object {key}/{P} with
// If-None-Match: *, one after the other, each with its own attempt limit.
// The payload hash signed is the digest the key was computed from, so a file
// changed since then is refused by the server (400 XAmzContentSHA256Mismatch)
// rather than stored under a key that does not describe it. An object that
// exists already (412) was written by an earlier attempt at this dataset:
// its name holds the content key.
func (s3Profile) putFiles(ctx context.Context, c *Client, res Result, dir string, doc []byte, drain <-chan struct{}) (Result, error) {
	var d struct {
		Dataset []struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"dataset"`
	}
	if err := json.Unmarshal(doc, &d); err != nil || len(d.Dataset) == 0 {
		return res, fmt.Errorf("%w: not a dataset document", ErrInvalid)
	}
	for _, f := range d.Dataset {
		h := http.Header{}
		h.Set("If-None-Match", "*")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Amz-Content-Sha256", f.SHA256)
		for name, values := range c.header {
			h[name] = values
		}
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		open := retryablehttp.ReaderFunc(func() (io.Reader, error) {
			fh, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			return sizedFile{fh, f.Size}, nil
		})
		u := s3ObjectURL(c, res.Key+"/"+f.Path)
		x := c.newExchange(res.Key, drain)
		resp, cls, err := x.doRaw(ctx, http.MethodPut, u, h, open)
		res.Requests += x.requests
		res.Retries += x.retries
		if err != nil {
			return res, err
		}
		answer := readAnswer(resp)
		switch cls {
		case classCreated, classExists:
			continue
		case classTerminal:
			return c.fail(ctx, res, c.httpError(http.MethodPut, u, resp, answer))
		case classStop:
			return res, fmt.Errorf("%w: %w", ErrStopRun, c.httpError(http.MethodPut, u, resp, answer))
		default:
			return res, fmt.Errorf("%w after %d attempts: %w: %w", ErrUnresolved, x.requests, x.stopped,
				c.httpError(http.MethodPut, u, resp, answer))
		}
	}
	return res, nil
}

// sizedFile is an open file that tells go-retryablehttp its length, so the
// request carries a Content-Length (S3 refuses chunked uploads without
// aws-chunked encoding).
type sizedFile struct {
	*os.File
	size int64
}

func (f sizedFile) Len() int { return int(f.size) }
