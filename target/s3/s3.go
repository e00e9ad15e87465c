// Package s3 provides the s3 target: a bucket of an S3-compatible store,
// written with conditional PutObject requests signed with AWS Signature
// V4. It stores what it is given and mints nothing: a record's identifier
// is its object URL. A dataset file larger than the part size is a
// multipart upload completed on the same condition, which a later run
// resumes. With an identity, an object is updated in place on its ETag
// (If-Match), and read back by its own bytes.
package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
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
	"github.com/depositkit/deposit/target/internal/record"
)

// Target is a bucket of an S3-compatible store: PutObject with If-None-Match: *
// to {Endpoint}/{key}, path style, signed with AWS Signature V4. 412 means
// the object exists; the identifier is the object URL. A dataset stores each
// file as the object {key}/{P}, then the dataset document as {key}.json,
// written last as the dataset's commit marker and its identifier.
//
// With an identity, a payload's object is {object key}, created as above
// and then replaced by each later content with If-Match on its ETag (the
// driver is a [driver.Updater]); a lost store is read back from the
// object's own bytes. Identity with datasets is not supported.
type Target struct {
	// Endpoint is the bucket URL, path style: https://host/bucket. Required.
	Endpoint string
	// AWS holds the credentials every request is signed with. Required: the
	// client never reads the environment.
	AWS Credentials
	// PartSize is the size of the parts a dataset file larger than it is
	// sent in, a multipart upload that a later run resumes: 0 means
	// DefaultPartSize, a negative size sends every file as one PutObject
	// (at most 5 GiB). S3 takes MinPartSize to MaxPartSize, and at most
	// MaxParts parts a file.
	PartSize int64
}

type s3Driver struct {
	endpoint string
	creds    Credentials
	partSize int64 // 0: no file is sent in parts
}

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := driver.Endpoint("s3.Target.Endpoint", t.Endpoint)
	if err != nil {
		return nil, err
	}
	if t.AWS.AccessKeyID == "" || t.AWS.SecretAccessKey == "" {
		return nil, errors.New("s3.Target.AWS needs an access key id and a secret access key")
	}
	part, err := t.partSize()
	if err != nil {
		return nil, err
	}
	return s3Driver{endpoint: ep, creds: t.AWS, partSize: part}, nil
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

// Steps is one PutObject of the payload, or for a dataset one per file
// (a multipart upload for a file larger than the part size) and then the
// document, under {key}.json.
func (d s3Driver) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	var steps []driver.Step
	name := k.Key
	if dir != "" {
		files, err := driver.DatasetFiles(k.Body)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			switch {
			case d.partSize == 0 || f.Size <= d.partSize:
				steps = append(steps, d.fileStep(k.Key, dir, f))
			case (f.Size+d.partSize-1)/d.partSize > MaxParts:
				return nil, fmt.Errorf("s3: file %q of %d bytes takes more than S3's %d parts of %d bytes: raise the part size", f.Path, f.Size, MaxParts, d.partSize)
			default:
				steps = append(steps, d.uploadStep(k, dir, f))
			}
		}
		name = k.Key + ".json"
	}
	url := d.objectURL(name)
	sum := sha256.Sum256(k.Body)
	return append(steps, driver.Step{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			h := http.Header{}
			h.Set("If-None-Match", "*")
			h.Set("Content-Type", "application/json")
			h.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
			return driver.Request{Method: http.MethodPut, URL: url, Header: h, Body: k.Body}, nil
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
func (d s3Driver) fileStep(key, dir string, f driver.DatasetFile) driver.Step {
	url := d.objectURL(key + "/" + f.Path)
	file := filepath.Join(dir, filepath.FromSlash(f.Path))
	return driver.Step{
		Label: "file " + strconv.Quote(f.Path), Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
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
			return driver.Request{Method: http.MethodPut, URL: url, Header: h, Open: open, Size: f.Size}, nil
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
// PutObject with 200 and the new object's ETag, which is the tag an update
// of it is conditioned on.
func judgeS3(a driver.Answer) driver.Verdict {
	if a.Err != nil {
		return driver.Verdict{Class: driver.Classify(a)}
	}
	switch s := a.Status; {
	case s == http.StatusPreconditionFailed:
		return driver.Verdict{Class: driver.Exists}
	case s == http.StatusOK || s == http.StatusCreated:
		return driver.Verdict{Class: driver.Created, Tag: a.Header.Get("ETag")}
	case s < 300:
		return driver.Verdict{Class: driver.Classify(a)}
	}
	return judgeError(a)
}

// judgeError judges an S3 answer of 300 or more by its status and error
// code.
func judgeError(a driver.Answer) driver.Verdict {
	if a.Status < 400 {
		// S3 redirects (PermanentRedirect, TemporaryRedirect) name another
		// region or endpoint: the bucket URL is wrong.
		_, problem := s3Problem(a.Body)
		return driver.Verdict{Class: driver.Stop, Problem: problem}
	}
	code, problem := s3Problem(a.Body)
	v := driver.Verdict{Class: driver.Classify(a), Problem: problem}
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

// Update replaces the object k.Object with k's body: PutObject of
// {object} with If-Match on the ETag the server gave the version the
// engine last saw (AWS: https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html,
// and If-Match under
// https://docs.aws.amazon.com/AmazonS3/latest/API/API_PutObject.html).
// Identity is for plain payloads: a dataset's record is {key}.json beside
// its files, which an update does not write.
func (d s3Driver) Update(k canonical.Keyed, tag string) (driver.Request, error) {
	if k.Object == "" || tag == "" {
		return driver.Request{}, errors.New("s3: an update needs an object key and a tag")
	}
	sum := sha256.Sum256(k.Body)
	h := http.Header{}
	h.Set("If-Match", tag)
	h.Set("Content-Type", "application/json")
	h.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	return driver.Request{Method: http.MethodPut, URL: d.objectURL(k.Object), Header: h, Body: k.Body}, nil
}

// JudgeUpdate judges an answer to Update. AWS documents 412 for an ETag
// that does not match (the object is at another version: Conflict), 409
// ConditionalRequestConflict for a concurrent write (asked again), and 404
// for an object deleted meanwhile, which an update cannot bring back: that
// is terminal, said so. versitygw answers NoSuchKey to any If-Match on a
// missing key (versity/versitygw, backend/common.go,
// EvaluateObjectPutPreconditions).
func (d s3Driver) JudgeUpdate(a driver.Answer) driver.Verdict {
	if a.Err == nil {
		switch a.Status {
		case http.StatusPreconditionFailed:
			_, problem := s3Problem(a.Body)
			return driver.Verdict{Class: driver.Conflict, Problem: problem}
		case http.StatusNotFound:
			if code, problem := s3Problem(a.Body); code == "NoSuchKey" {
				return driver.Verdict{Class: driver.Terminal,
					Problem: "the object's record is gone from the bucket (" + problem + ")"}
			}
		}
	}
	return judgeS3(a)
}

// ReadObject is a GetObject of {object}: its bytes are the payload as
// deposited, its ETag the version's tag.
func (d s3Driver) ReadObject(k canonical.Keyed) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errors.New("s3: reading an object needs its object key")
	}
	return driver.Request{Method: http.MethodGet, URL: d.objectURL(k.Object), Full: true}, nil
}

// JudgeRead reads an answer to ReadObject: 200 is the object, its body and
// ETag; a 404 but for a missing bucket is no object.
func (d s3Driver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	if a.Err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	switch s := a.Status; {
	case s == http.StatusOK:
		return driver.ObjectState{Body: a.Body, Tag: a.Header.Get("ETag")}, driver.Finding{Kind: driver.Present}
	case s == http.StatusNotFound:
		if code, _ := s3Problem(a.Body); code != "NoSuchBucket" {
			return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
		}
	case s < 300:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	v := judgeError(a)
	return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: v.Class, Problem: v.Problem}
}

// ProbeRemoval removes a probe object (driver.Prober).
func (d s3Driver) ProbeRemoval(created driver.Answer) (driver.Request, error) {
	return record.Delete(created)
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var (
	_ driver.TransportWrapper = s3Driver{}
	_ driver.Prober           = s3Driver{}
	_ driver.Updater          = s3Driver{}
	_ driver.FileParter       = s3Driver{}
)
