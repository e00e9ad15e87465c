package s3

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// S3's limits of a multipart upload
// (https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html):
// every part but the last 5 MiB to 5 GiB, at most 10,000 parts. versitygw
// refuses a smaller part too, when the upload is completed
// (versity/versitygw, backend/common.go: MinPartSize; backend/posix/posix.go,
// CompleteMultipartUpload: EntityTooSmall).
const (
	MinPartSize     = 5 << 20
	MaxPartSize     = 5 << 30
	MaxParts        = 10000
	DefaultPartSize = 64 << 20
)

// partSize is the part size of t's uploads: 0 when every file is one
// PutObject.
func (t Target) partSize() (int64, error) {
	switch n := t.PartSize; {
	case n == 0:
		return DefaultPartSize, nil
	case n < 0:
		return 0, nil
	case n < MinPartSize || n > MaxPartSize:
		return 0, fmt.Errorf("s3.Target.PartSize %d is outside S3's limits of a part, %d to %d bytes", n, MinPartSize, MaxPartSize)
	default:
		return n, nil
	}
}

// FilePartSize is the size of the parts files larger than it are sent in
// (driver.FileParter): the keyer hashes those parts in the read that keys
// the file.
func (d s3Driver) FilePartSize() int64 { return d.partSize }

// uploadStep sends one file of a dataset in parts, a multipart upload
// (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CreateMultipartUpload.html
// and the UploadPart, ListParts, CompleteMultipartUpload and
// AbortMultipartUpload pages beside it). Each part carries its Content-MD5
// and its SHA-256 as the keyer computed them, so the server refuses a part
// whose bytes changed since the key was made (400 BadDigest or
// XAmzContentSHA256Mismatch). The upload is completed with If-None-Match:
// *, as a PutObject would be: an object that exists answers 412, and
// versitygw evaluates the condition when it completes
// (backend/posix/posix.go, CompleteMultipartUpload: checkPutPreconditions
// under the object's publish lock).
func (d s3Driver) uploadStep(k canonical.Keyed, dir string, f driver.DatasetFile) driver.Step {
	name := k.Key + "/" + f.Path
	file := filepath.Join(dir, filepath.FromSlash(f.Path))
	sums := k.Parts[f.Path]
	count := int((f.Size + d.partSize - 1) / d.partSize)
	p := &driver.Parts{
		Count: count, Size: f.Size, PartSize: d.partSize,
		Held: &driver.Check{
			Build: func([]string) (driver.Request, error) {
				return driver.Request{Method: http.MethodHead, URL: d.objectURL(name)}, nil
			},
			Judge: judgeHeld,
		},
		Begin: func() (driver.Request, error) {
			h := http.Header{}
			h.Set("Content-Type", "application/octet-stream")
			return driver.Request{Method: http.MethodPost, URL: d.objectQueryURL(name, "uploads"), Header: h, Full: true}, nil
		},
		JudgeBegin: judgeBegin,
		Part: func(upload string, n int) (driver.Request, func(driver.Answer) driver.Verdict, error) {
			if len(sums) != count {
				return driver.Request{}, nil, fmt.Errorf("s3: file %q: the keyer gave %d part digests, want %d", f.Path, len(sums), count)
			}
			off := int64(n-1) * d.partSize
			size := min(d.partSize, f.Size-off)
			h := http.Header{}
			h.Set("Content-MD5", base64.StdEncoding.EncodeToString(sums[n-1].MD5[:]))
			h.Set("X-Amz-Content-Sha256", hex.EncodeToString(sums[n-1].SHA256[:]))
			open := func() (io.Reader, error) {
				fh, err := os.Open(file)
				if err != nil {
					return nil, err
				}
				return filePart{SectionReader: io.NewSectionReader(fh, off, size), f: fh}, nil
			}
			q := "partNumber=" + strconv.Itoa(n) + "&uploadId=" + queryEscape(upload)
			return driver.Request{Method: http.MethodPut, URL: d.objectQueryURL(name, q), Header: h, Open: open, Size: size}, judgePart, nil
		},
		List: func(upload string, after int) (driver.Request, error) {
			q := "uploadId=" + queryEscape(upload)
			if after > 0 {
				q += "&part-number-marker=" + strconv.Itoa(after)
			}
			return driver.Request{Method: http.MethodGet, URL: d.objectQueryURL(name, q), Full: true}, nil
		},
		ReadList: readParts,
		Complete: func(upload string, tags []string) (driver.Request, error) {
			body := completeBody(tags)
			sum := sha256.Sum256(body)
			h := http.Header{}
			h.Set("If-None-Match", "*")
			h.Set("Content-Type", "application/xml")
			h.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
			return driver.Request{Method: http.MethodPost, URL: d.objectQueryURL(name, "uploadId="+queryEscape(upload)), Header: h, Body: body, Full: true}, nil
		},
		Abort: func(upload string) (driver.Request, error) {
			return driver.Request{Method: http.MethodDelete, URL: d.objectQueryURL(name, "uploadId="+queryEscape(upload))}, nil
		},
		Strays: func() (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: d.bucketQueryURL("uploads&prefix=" + queryEscape(name)), Full: true}, nil
		},
		ReadStrays: func(a driver.Answer) ([]string, bool) { return readUploads(a, name) },
		JudgeOther: judgeOther,
	}
	return driver.Step{Label: "file " + strconv.Quote(f.Path), Arbitrated: true, Parts: p, Judge: judgeComplete}
}

// filePart is a part of an open file, its length told to the HTTP client
// (Len) and the file closed with it.
type filePart struct {
	*io.SectionReader
	f *os.File
}

func (p filePart) Len() int     { return int(p.Size()) }
func (p filePart) Close() error { return p.f.Close() }

// objectQueryURL is objectURL with query q (already escaped) added.
func (d s3Driver) objectQueryURL(name, q string) string {
	u := d.objectURL(name)
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

// bucketQueryURL is the bucket's URL with query q (already escaped).
func (d s3Driver) bucketQueryURL(q string) string {
	base, query, found := strings.Cut(d.endpoint, "?")
	if found {
		return base + "?" + query + "&" + q
	}
	return base + "?" + q
}

// readUploads reads a ListMultipartUploads answer
// (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListMultipartUploads.html):
// the ids of the uploads open for the object name itself (the listing is
// by prefix).
func readUploads(a driver.Answer, name string) ([]string, bool) {
	if a.Err != nil || a.Status != http.StatusOK {
		return nil, false
	}
	var r struct {
		XMLName xml.Name `xml:"ListMultipartUploadsResult"`
		Uploads []struct {
			Key      string `xml:"Key"`
			UploadID string `xml:"UploadId"`
		} `xml:"Upload"`
	}
	if xml.Unmarshal(a.Body, &r) != nil {
		return nil, false
	}
	var ids []string
	for _, u := range r.Uploads {
		if u.Key == name && u.UploadID != "" {
			ids = append(ids, u.UploadID)
		}
	}
	return ids, true
}

// queryEscape escapes a query value the way SigV4 canonicalises it.
func queryEscape(s string) string { return strings.ReplaceAll(awsEscapePath(s), "/", "%2F") }

// completeBody is the CompleteMultipartUpload document naming the parts
// by their tags, in order.
func completeBody(tags []string) []byte {
	var b strings.Builder
	b.WriteString(`<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	for i, tag := range tags {
		b.WriteString("<Part><PartNumber>")
		b.WriteString(strconv.Itoa(i + 1))
		b.WriteString("</PartNumber><ETag>")
		xml.EscapeText(&b, []byte(tag))
		b.WriteString("</ETag></Part>")
	}
	b.WriteString("</CompleteMultipartUpload>")
	return []byte(b.String())
}

// noSuchUpload reports whether a is S3's answer for an upload it does not
// have (completed, aborted, or expired): 404 NoSuchUpload.
func noSuchUpload(a driver.Answer) bool {
	if a.Err != nil || a.Status != http.StatusNotFound {
		return false
	}
	code, _ := s3Problem(a.Body)
	return code == "NoSuchUpload"
}

// judgeHeld reads a HEAD of the object: 200 is the object, made by an
// earlier attempt of this dataset (its name holds the content key); a 404
// but for a missing bucket is none.
func judgeHeld(a driver.Answer) driver.Finding {
	switch {
	case a.Err == nil && a.Status == http.StatusOK:
		return driver.Finding{Kind: driver.Present}
	case a.Err == nil && a.Status == http.StatusNotFound:
		// A HEAD's 404 has no body to tell NoSuchKey from NoSuchBucket: a
		// missing bucket is refused by the upload that follows.
		return driver.Finding{Kind: driver.Absent}
	}
	v := judgeS3(a)
	if v.Class == driver.Created {
		v.Class = driver.Ambiguous
	}
	return driver.Finding{Kind: driver.Unknown, Class: v.Class, Problem: v.Problem}
}

// judgeBegin reads the answer to CreateMultipartUpload: 200 names the
// upload (UploadId).
func judgeBegin(a driver.Answer) driver.Verdict {
	v := judgeS3(a)
	if v.Class != driver.Created {
		return v
	}
	var r struct {
		UploadID string `xml:"UploadId"`
	}
	if xml.Unmarshal(a.Body, &r) != nil || r.UploadID == "" {
		return driver.Verdict{Class: driver.Ambiguous, Problem: "the answer to CreateMultipartUpload names no UploadId"}
	}
	return driver.Verdict{Class: driver.Created, ID: r.UploadID}
}

// judgePart reads the answer to UploadPart: 200 with the part's ETag; an
// upload the server no longer has is a conflict (the engine begins
// another after looking for the object).
func judgePart(a driver.Answer) driver.Verdict {
	if noSuchUpload(a) {
		return driver.Verdict{Class: driver.Conflict}
	}
	v := judgeS3(a)
	if v.Class == driver.Created && v.Tag == "" {
		return driver.Verdict{Class: driver.Ambiguous, Problem: "the answer to UploadPart names no ETag"}
	}
	if v.Class == driver.Exists {
		// A part is not conditional: a 412 is no answer to it.
		v.Class = driver.Terminal
	}
	return v
}

// judgeComplete judges the answer to CompleteMultipartUpload as a
// PutObject's: 412 for an object that exists. AWS may answer 200 with an
// error document when the completion failed after it began
// (API_CompleteMultipartUpload.html: "a 200 OK response can contain
// either a success or an error"): judged by its code, ambiguous for an
// internal error. An upload the server no longer has is a conflict.
func judgeComplete(a driver.Answer) driver.Verdict {
	if noSuchUpload(a) {
		return driver.Verdict{Class: driver.Conflict}
	}
	if a.Err == nil && a.Status == http.StatusOK {
		if code, problem := s3Problem(a.Body); code != "" && strings.Contains(string(a.Body), "<Error") {
			v := judgeError(driver.Answer{Status: http.StatusInternalServerError, Header: a.Header, Body: a.Body})
			if code != "InternalError" && v.Class == driver.Ambiguous {
				v.Class = driver.Terminal
			}
			v.Problem = problem
			return v
		}
	}
	v := judgeS3(a)
	if v.Class == driver.Created {
		v.Tag = ""
	}
	return v
}

// readParts reads a page of ListParts.
func readParts(a driver.Answer) (held []driver.HeldPart, next int, gone, ok bool) {
	if noSuchUpload(a) {
		return nil, 0, true, true
	}
	if a.Err != nil || a.Status != http.StatusOK {
		return nil, 0, false, false
	}
	var r struct {
		XMLName     xml.Name `xml:"ListPartsResult"`
		IsTruncated bool     `xml:"IsTruncated"`
		Next        int      `xml:"NextPartNumberMarker"`
		Parts       []struct {
			N    int    `xml:"PartNumber"`
			ETag string `xml:"ETag"`
			Size int64  `xml:"Size"`
		} `xml:"Part"`
	}
	if xml.Unmarshal(a.Body, &r) != nil {
		return nil, 0, false, false
	}
	for _, p := range r.Parts {
		held = append(held, driver.HeldPart{N: p.N, Tag: p.ETag, Size: p.Size})
	}
	if r.IsTruncated {
		if r.Next <= 0 && len(held) > 0 {
			r.Next = held[len(held)-1].N
		}
		if r.Next <= 0 {
			return nil, 0, false, false
		}
		return held, r.Next, false, true
	}
	return held, 0, false, true
}

// judgeOther judges the answers to ListParts and AbortMultipartUpload:
// an abort of an upload the server no longer has has nothing left to do.
func judgeOther(a driver.Answer) driver.Verdict {
	if noSuchUpload(a) {
		return driver.Verdict{Class: driver.Created}
	}
	v := judgeS3(a)
	if v.Class == driver.Created && a.Status == http.StatusOK && a.Header.Get("ETag") == "" {
		// A ListParts 200 that ReadList could not read: no listing.
		if len(a.Body) > 0 {
			v.Class = driver.Ambiguous
			v.Problem = "the answer to ListParts is not a listing"
		}
	}
	return v
}
