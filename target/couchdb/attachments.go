package couchdb

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
)

// A CouchDB dataset is one document: the dataset document with every file
// inline as an attachment (CouchDB's _attachments member, base64 data), sent
// in the single PUT that creates the document. The server stores the
// document and its attachments in one revision or not at all, and refuses a
// second create of the id (the content key) with 409, so a retry after a
// dropped connection can neither add a revision nor leave some files out.
// Attachments PUT one by one would each make a revision, and a retry after
// a drop would need the document's current revision, read back, before it
// could be sent again.
//
// The body is streamed from the files, never held in memory, with its exact
// length, and each file's bytes are checked against the SHA-256 its key was
// computed from as they are read: a file changed since it was hashed fails
// the read before the document is complete, so the server stores nothing.

// couchAttachmentType is the content type of every attachment: the bytes
// are the file's, whatever they are, and the document is the same
// wherever it is built.
const couchAttachmentType = "application/octet-stream"

// errFileChanged is wrapped by the read error of a dataset file whose bytes
// no longer match the digest its key was computed from.
var errFileChanged = errors.New("changed since it was hashed")

// couchDatasetStep is the PUT of the dataset document with its files
// inline. An "exists" answer (409) is checked by reading the document back:
// every file must be there as an attachment of its length and MD5.
func (d couchdbDriver) couchDatasetStep(k canonical.Keyed, dir string) (driver.Step, error) {
	files, err := driver.DatasetFiles(k.Body)
	if err != nil {
		return driver.Step{}, err
	}
	for _, f := range files {
		if strings.HasPrefix(f.Path, "_") {
			return driver.Step{}, fmt.Errorf("couchdb: file %q: CouchDB refuses attachment names starting with _", f.Path)
		}
		if k.MD5[f.Path] == "" {
			return driver.Step{}, fmt.Errorf("couchdb: no MD5 for file %q (the keyer must be made WithFileMD5)", f.Path)
		}
	}
	head, tail, err := couchInlineFrame(files, k.Body)
	if err != nil {
		return driver.Step{}, err
	}
	size := int64(len(tail))
	for i, f := range files {
		size += int64(len(head[i])) + int64(base64.StdEncoding.EncodedLen(int(f.Size)))
	}
	url := driver.RecordURL(d.endpoint, k.Key)
	return driver.Step{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			h := http.Header{}
			h.Set("Content-Type", "application/json")
			open := func() (io.Reader, error) {
				return newCouchInlineBody(dir, files, head, tail, size), nil
			}
			return driver.Request{Method: http.MethodPut, URL: url, Header: h, Open: open, Size: size}, nil
		},
		Judge:    judgeCouchDB,
		Check:    couchAttachmentsCheck(url, files, k.MD5),
		Fallback: credential.Strip(url),
	}, nil
}

// couchInlineFrame is the JSON around the files' base64 data: head[i]
// comes before file i's data, tail after the last file's. Between them the
// document is
//
//	{"_attachments":{"P1":{"content_type":T,"data":"..."},...},<members of doc>}
func couchInlineFrame(files []driver.DatasetFile, doc []byte) (head [][]byte, tail []byte, err error) {
	if len(doc) < 2 || doc[0] != '{' || doc[len(doc)-1] != '}' {
		return nil, nil, errors.New("couchdb: a document must be a JSON object")
	}
	head = make([][]byte, len(files))
	for i, f := range files {
		name, err := json.Marshal(f.Path)
		if err != nil {
			return nil, nil, err
		}
		var b bytes.Buffer
		if i == 0 {
			b.WriteString(`{"_attachments":{`)
		} else {
			b.WriteString(`"},`)
		}
		b.Write(name)
		b.WriteString(`:{"content_type":"` + couchAttachmentType + `","data":"`)
		head[i] = b.Bytes()
	}
	sep := []byte(`"}},`)
	if len(doc) == 2 { // {}: no members follow
		sep = []byte(`"}}`)
	}
	return head, append(sep, doc[1:]...), nil
}

// couchInlineBody is one attempt's document body. It opens each file when
// its data is reached and closes it at its end, so an attempt holds at most
// one file open.
type couchInlineBody struct {
	io.Reader
	size  int64
	files []*base64File
}

func newCouchInlineBody(dir string, files []driver.DatasetFile, head [][]byte, tail []byte, size int64) *couchInlineBody {
	b := &couchInlineBody{size: size}
	parts := make([]io.Reader, 0, 2*len(files)+1)
	for i, f := range files {
		bf := &base64File{path: filepath.Join(dir, filepath.FromSlash(f.Path)), want: f}
		b.files = append(b.files, bf)
		parts = append(parts, bytes.NewReader(head[i]), bf)
	}
	b.Reader = io.MultiReader(append(parts, bytes.NewReader(tail))...)
	return b
}

// Len tells go-retryablehttp the body's length, so the request carries its
// Content-Length.
func (b *couchInlineBody) Len() int { return int(b.size) }

// Close closes a file left open by an attempt that ended early.
func (b *couchInlineBody) Close() error {
	for _, f := range b.files {
		f.close()
	}
	return nil
}

// base64File reads a dataset file as standard base64, checking its length
// and SHA-256 against the dataset document's entry.
type base64File struct {
	path string
	want driver.DatasetFile
	fh   *os.File
	sum  hash.Hash
	read int64  // file bytes read so far
	raw  []byte // read buffer, a multiple of 3 bytes
	enc  []byte // encoding buffer
	out  []byte // encoded bytes not yet returned, in enc
	done bool
}

// base64Chunk is how many file bytes are encoded at a time (a multiple of 3,
// so the chunks' encodings join without padding).
const base64Chunk = 48 << 10

func (b *base64File) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.done {
			return 0, io.EOF
		}
		if err := b.fill(); err != nil {
			b.close()
			return 0, err
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// fill encodes the next chunk of the file into out, or at the end of the
// file checks it and marks b done.
func (b *base64File) fill() error {
	if b.fh == nil {
		fh, err := os.Open(b.path)
		if err != nil {
			return err
		}
		b.fh, b.sum = fh, sha256.New()
		b.raw = make([]byte, base64Chunk)
	}
	if left := b.want.Size - b.read; left > 0 {
		n, err := io.ReadFull(b.fh, b.raw[:min(int64(len(b.raw)), left)])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("file %q: %w: shorter than %d bytes", b.want.Path, errFileChanged, b.want.Size)
		}
		if err != nil {
			return err
		}
		b.read += int64(n)
		b.sum.Write(b.raw[:n])
		b.enc = base64.StdEncoding.AppendEncode(b.enc[:0], b.raw[:n])
		b.out = b.enc
		return nil
	}
	var one [1]byte
	if n, _ := b.fh.Read(one[:]); n > 0 {
		return fmt.Errorf("file %q: %w: longer than %d bytes", b.want.Path, errFileChanged, b.want.Size)
	}
	if got := hex.EncodeToString(b.sum.Sum(nil)); got != b.want.SHA256 {
		return fmt.Errorf("file %q: %w: its SHA-256 is now %s", b.want.Path, errFileChanged, got)
	}
	b.close()
	b.done = true
	return nil
}

func (b *base64File) close() {
	if b.fh != nil {
		b.fh.Close()
		b.fh = nil
	}
	b.raw, b.enc, b.out = nil, nil, nil
}

// judgeCouchDB judges an answer to a document PUT; a 201 or 202 carries
// the document's new revision as the tag.
func judgeCouchDB(a driver.Answer) driver.Verdict {
	if a.Err != nil {
		if errors.Is(a.Err, errFileChanged) {
			// The body failed before it was complete: nothing was stored,
			// and sending it again sends the same changed file.
			return driver.Verdict{Class: driver.Terminal, Problem: withoutURL(a.Err).Error()}
		}
		return driver.Verdict{Class: driver.Classify(a)}
	}
	switch a.Status {
	case http.StatusCreated, http.StatusAccepted:
		// 202: accepted, not yet on every node.
		return driver.Verdict{Class: driver.Created, Tag: answerRev(a)}
	case http.StatusConflict:
		// {"error":"conflict"}: a document with this id exists. The id is
		// the content key, so it is ours; with an identity it is the object
		// key, and the engine reads the document to learn its version.
		return driver.Verdict{Class: driver.Exists}
	}
	return driver.Verdict{Class: driver.Classify(a)}
}

// couchAttachmentsCheck reads a dataset's document back and finds it ours
// when every file is an attachment of its length and MD5, as CouchDB
// reports them in the document's attachment stubs ("md5-<base64>"). A
// document without them (a dataset stored by a client that sent no file
// bytes, or another document at this id) is foreign: nothing is sent over
// it.
func couchAttachmentsCheck(url string, files []driver.DatasetFile, md5s map[string]string) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) {
			h := http.Header{}
			h.Set("Accept", "application/json")
			return driver.Request{Method: http.MethodGet, URL: url, Header: h}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
			}
			switch a.Status {
			case http.StatusOK:
				if problem := couchMissingFile(a.Body, files, md5s); problem != "" {
					return driver.Finding{Kind: driver.Foreign, Problem: problem}
				}
				return driver.Finding{Kind: driver.Present}
			case http.StatusNotFound:
				return driver.Finding{Kind: driver.Absent}
			}
			return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
		},
	}
}

// couchMissingFile names the first file a document read back does not hold
// as an attachment of the right length and MD5; "" when it holds them all.
func couchMissingFile(doc []byte, files []driver.DatasetFile, md5s map[string]string) string {
	var d struct {
		Attachments map[string]struct {
			Digest string `json:"digest"`
			Length int64  `json:"length"`
		} `json:"_attachments"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return "the document read back is not JSON"
	}
	for _, f := range files {
		att, ok := d.Attachments[f.Path]
		if !ok {
			return fmt.Sprintf("the document exists without the file %q as an attachment", f.Path)
		}
		sum, _ := hex.DecodeString(md5s[f.Path])
		if want := "md5-" + base64.StdEncoding.EncodeToString(sum); att.Length != f.Size || att.Digest != want {
			return fmt.Sprintf("the document's attachment %q is not the file: %d bytes, digest %s; the file has %d bytes, digest %s",
				f.Path, att.Length, att.Digest, f.Size, want)
		}
	}
	return ""
}

// withoutURL is err without the request URL a *url.Error names, which may
// hold a token.
func withoutURL(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}
