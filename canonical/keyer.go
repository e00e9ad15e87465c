package canonical

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/depositkit/deposit/internal/jsonpointer"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// ErrInvalidPointer is returned by [NewKeyer] for an ignore pointer that is
// not an RFC 6901 JSON Pointer naming a part of the payload.
var ErrInvalidPointer = errors.New("canonical: invalid JSON pointer")

// ErrInvalidDataset is returned by [Keyer.DatasetKey] for a file list that
// cannot name a dataset: empty, repeated, outside the dataset folder, or not
// naming regular files. Errors from the file system are wrapped beside it, so
// errors.Is(err, fs.ErrNotExist) works too.
var ErrInvalidDataset = errors.New("canonical: invalid dataset")

// Keyed is a key and the request body that goes with it.
type Keyed struct {
	// Key is the lowercase hex SHA-256 of the canonical bytes with the
	// ignored fields removed.
	Key string
	// Body is the canonical bytes of the payload as given, ignored fields
	// kept. Where nothing was ignored, Key is the key of Body.
	Body []byte
	// MD5 holds, for a dataset keyed by a Keyer made WithFileMD5, the
	// lowercase hex MD5 of each file by its cleaned path, computed in the
	// same read as its SHA-256: repositories such as InvenioRDM report file
	// checksums in MD5 only. Nil otherwise.
	MD5 map[string]string
	// Parts holds, for a dataset keyed by a Keyer made WithFileParts, the
	// digests of each part of every file larger than the part size, by its
	// cleaned path, computed in the same read as its SHA-256: a target
	// that sends such a file in parts (S3's multipart upload) has the
	// server check every part against the bytes the key was computed from.
	// Nil otherwise.
	Parts map[string][]PartSum
	// Object is the object key of a payload named by an identity (the
	// lowercase hex SHA-256 of the canonical JSON array of its identity
	// values): the name of its one record, whose versions Key names. ""
	// without an identity.
	Object string
	// Version, in the Keyed an object's record is created with (whose Key
	// is then the object key), is the content key of the payload: the
	// version the record starts at, for a target that marks it. "" in any
	// other Keyed.
	Version string
	// Order is the value of the payload's version pointer, as text that
	// orders the versions of one object (see the client's Config), "" when
	// there is none.
	Order string
}

// Keyer derives keys and request bodies in one canonical form, leaving
// volatile fields named by JSON Pointers out of the key.
//
// A Keyer is immutable and safe for concurrent use by multiple goroutines.
type Keyer struct {
	form   Form
	python bool
	ignore []string
	ptrs   [][]string // decoded reference tokens of ignore
	md5    bool       // datasets: also hash each file with MD5
	part   int64      // datasets: also hash the parts of files larger than this
}

// PartSum is the digests of one part of a file sent in parts.
type PartSum struct {
	MD5    [md5.Size]byte
	SHA256 [sha256.Size]byte
}

// NewKeyer returns a Keyer for form (the empty form means [FormJCS]) that
// leaves out of every key the values named by the ignore pointers (RFC 6901,
// with ~0 for ~ and ~1 for /). Each pointer starts with "/"; the empty
// pointer, which names the whole payload, is refused. A pointer may step into
// arrays by index. All pointers are resolved against the payload as given,
// then the values they name are removed together; a pointer that names
// nothing in a payload is no error.
func NewKeyer(form Form, ignore []string) (*Keyer, error) {
	python, err := form.python()
	if err != nil {
		return nil, err
	}
	if form == "" {
		form = FormJCS
	}
	k := &Keyer{form: form, python: python, ignore: slices.Clone(ignore)}
	for _, s := range ignore {
		toks, err := parsePointer(s)
		if err != nil {
			return nil, err
		}
		k.ptrs = append(k.ptrs, toks)
	}
	return k, nil
}

// parsePointer returns the decoded reference tokens of JSON Pointer s. The
// empty pointer is valid JSON Pointer but names the whole payload, which a
// key cannot leave out.
func parsePointer(s string) ([]string, error) {
	if s == "" {
		return nil, fmt.Errorf(`%w "": it names the whole payload, want a pointer such as /updated`, ErrInvalidPointer)
	}
	toks, err := jsonpointer.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidPointer, s, err)
	}
	return toks, nil
}

// Form returns the canonical form of k.
func (k *Keyer) Form() Form { return k.form }

// WithFileMD5 returns a copy of k whose dataset keys also carry each file's
// MD5 (Keyed.MD5), read in the same pass as its SHA-256. Keys are the same.
func (k *Keyer) WithFileMD5() *Keyer {
	c := *k
	c.md5 = true
	return &c
}

// WithFileParts returns a copy of k whose dataset keys also carry the
// digests of each size-byte part of every file larger than size
// (Keyed.Parts, the last part the rest), read in the same pass as its
// SHA-256. Keys are the same. size 0 turns it off.
func (k *Keyer) WithFileParts(size int64) *Keyer {
	c := *k
	c.part = size
	return &c
}

// Ignore returns a copy of the ignore pointers, as given to [NewKeyer].
func (k *Keyer) Ignore() []string { return slices.Clone(k.ignore) }

// Key returns the key of the JSON text payload (the SHA-256 of its canonical
// bytes with the ignored values removed) and its body (the canonical bytes
// with nothing removed). Malformed payloads give a [*SyntaxError].
func (k *Keyer) Key(payload []byte) (Keyed, error) {
	return k.key(payload, k.ptrs)
}

func (k *Keyer) key(payload []byte, ptrs [][]string) (Keyed, error) {
	var p parser
	if err := p.parse(payload, k.python); err != nil {
		return Keyed{}, err
	}
	body := p.emit(make([]byte, 0, p.outSize()))
	keyed := body
	if p.remove(ptrs) {
		keyed = p.emit(make([]byte, 0, len(body)))
	}
	return Keyed{Key: Key(keyed), Body: body}, nil
}

// remove marks the values the pointers name as removed and reports whether
// any pointer named one.
func (p *parser) remove(ptrs [][]string) bool {
	found := false
	for _, toks := range ptrs {
		if v, ok := p.resolve(toks); ok {
			p.nodes[v].flags |= flagRemoved
			found = true
		}
	}
	return found
}

// resolve returns the value the pointer tokens name, if any.
func (p *parser) resolve(toks []string) (int32, bool) {
	cur := p.root
	for _, t := range toks {
		n := &p.nodes[cur]
		switch n.kind {
		case kindObject:
			next := int32(-1)
			for j := n.off; j < n.off+n.n; j++ {
				if string(p.bytesOf(&p.mems[j].key)) == t {
					next = p.mems[j].val
					break
				}
			}
			if next < 0 {
				return 0, false
			}
			cur = next
		case kindArray:
			idx, ok := jsonpointer.Index(t)
			if !ok || idx >= int(n.n) {
				return 0, false
			}
			cur = p.kids[int(n.off)+idx]
		default:
			return 0, false
		}
	}
	return cur, true
}

// hashBufferSize is the read buffer of dataset file hashing: the only memory
// DatasetKey needs per file, whatever its size.
const hashBufferSize = 256 << 10

// datasetFile is one entry of a dataset document.
type datasetFile struct {
	path  string
	sum   [sha256.Size]byte
	md5   []byte    // when the keyer asks for it
	parts []PartSum // when the keyer asks for it and the file is large
	size  int64
}

// DatasetKey returns the key and body of a dataset: the canonical document
//
//	{"dataset":[{"path":P,"sha256":H,"size":N},...],"metadata":M}
//
// where M is the JSON text metadata, each P is one of files, a path relative
// to dir with "/" separators, cleaned (no "." or ".." segments, Unicode left
// as given), H is the lowercase hex SHA-256 of the file's bytes and N their
// count. Entries are sorted by the bytes of P. Every file must be a regular
// file inside dir; a path or symbolic link that leads out of dir is refused.
// Symbolic links are followed only when relative (an absolute link is
// refused even if it points inside dir, as [os.Root] does).
// An empty list, or one naming a file twice, is an [ErrInvalidDataset].
// Files are hashed streaming, in memory that does not grow with their size.
// The ignore pointers of k address M. Malformed metadata gives an error
// wrapping a [*SyntaxError] with offsets into metadata.
func (k *Keyer) DatasetKey(dir string, metadata []byte, files []string) (Keyed, error) {
	if len(files) == 0 {
		return Keyed{}, fmt.Errorf("%w: empty file list, want at least one file", ErrInvalidDataset)
	}
	meta, err := k.form.Canonicalize(metadata)
	if err != nil {
		return Keyed{}, fmt.Errorf("canonical: dataset metadata: %w", err)
	}
	entries := make([]datasetFile, 0, len(files))
	for _, f := range files {
		clean, err := cleanDatasetPath(f)
		if err != nil {
			return Keyed{}, err
		}
		entries = append(entries, datasetFile{path: clean})
	}
	slices.SortFunc(entries, func(a, b datasetFile) int { return strings.Compare(a.path, b.path) })
	for i := 1; i < len(entries); i++ {
		if entries[i].path == entries[i-1].path {
			return Keyed{}, fmt.Errorf("%w: file %q is listed twice", ErrInvalidDataset, entries[i].path)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Keyed{}, fmt.Errorf("canonical: dataset folder: %w", err)
	}
	defer root.Close()
	buf := make([]byte, hashBufferSize)
	for i := range entries {
		if err := hashFile(root, &entries[i], buf, k.md5, k.part); err != nil {
			return Keyed{}, err
		}
	}

	doc := make([]byte, 0, len(meta)+len(entries)*128+32)
	doc = append(doc, `{"dataset":[`...)
	for i, e := range entries {
		if i > 0 {
			doc = append(doc, ',')
		}
		doc = append(doc, `{"path":"`...)
		doc = appendJCSString(doc, []byte(e.path))
		doc = append(doc, `","sha256":"`...)
		doc = hex.AppendEncode(doc, e.sum[:])
		doc = append(doc, `","size":`...)
		doc = strconv.AppendInt(doc, e.size, 10)
		doc = append(doc, '}')
	}
	doc = append(doc, `],"metadata":`...)
	doc = append(doc, meta...)
	doc = append(doc, '}')

	ptrs := make([][]string, len(k.ptrs))
	for i, toks := range k.ptrs {
		ptrs[i] = append([]string{"metadata"}, toks...)
	}
	keyed, err := k.key(doc, ptrs)
	if err == nil && k.md5 {
		keyed.MD5 = make(map[string]string, len(entries))
		for _, e := range entries {
			keyed.MD5[e.path] = hex.EncodeToString(e.md5)
		}
	}
	if err == nil && k.part > 0 {
		for _, e := range entries {
			if e.parts != nil {
				if keyed.Parts == nil {
					keyed.Parts = make(map[string][]PartSum)
				}
				keyed.Parts[e.path] = e.parts
			}
		}
	}
	return keyed, err
}

// cleanDatasetPath returns the cleaned form of dataset path p, or why p
// cannot name a file inside the dataset folder.
func cleanDatasetPath(p string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: file %q: %s", ErrInvalidDataset, p, why)
	}
	switch {
	case p == "":
		return "", bad("empty path")
	case !utf8.ValidString(p):
		return "", bad("not valid UTF-8")
	case strings.IndexByte(p, 0) >= 0:
		return "", bad("holds a NUL byte")
	case path.IsAbs(p):
		return "", bad("absolute path, want one relative to the dataset folder")
	}
	c := path.Clean(p)
	switch {
	case c == ".":
		return "", bad("names the dataset folder itself, want a file")
	case c == ".." || strings.HasPrefix(c, "../"):
		return "", bad("leads out of the dataset folder")
	}
	return c, nil
}

// hashFile fills in the digest and size of e, read streaming through buf,
// and with withMD5 its MD5 from the same reads, and, for a file larger
// than partSize (when not 0), its parts' digests.
func hashFile(root *os.Root, e *datasetFile, buf []byte, withMD5 bool, partSize int64) error {
	bad := func(err error) error {
		return fmt.Errorf("%w: file %q: %w", ErrInvalidDataset, e.path, err)
	}
	// Stat first, so that opening never blocks on a named pipe.
	fi, err := root.Stat(e.path)
	if err != nil {
		return bad(err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: file %q is not a regular file (%s)", ErrInvalidDataset, e.path, fi.Mode().Type())
	}
	f, err := root.Open(e.path)
	if err != nil {
		return bad(err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return bad(err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: file %q is not a regular file (%s)", ErrInvalidDataset, e.path, fi.Mode().Type())
	}
	h := sha256.New()
	var m hash.Hash
	if withMD5 {
		m = md5.New()
	}
	if partSize > 0 && fi.Size() > partSize {
		return hashFileParts(f, e, h, m, partSize, bad)
	}
	for {
		n, err := f.Read(buf)
		h.Write(buf[:n])
		if m != nil {
			m.Write(buf[:n])
		}
		e.size += int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return bad(err)
		}
	}
	h.Sum(e.sum[:0])
	if m != nil {
		e.md5 = m.Sum(nil)
	}
	return nil
}

// hashFileParts is hashFile for a file hashed in parts too: the file's
// digests and its parts' MD5 and SHA-256 are computed side by side, each
// in a goroutine of its own fed the same reads, so the three hashes cost
// about as long as the slowest alone on a machine with cores to spare.
func hashFileParts(f io.Reader, e *datasetFile, h, m hash.Hash, partSize int64, bad func(error) error) error {
	whole := func(b []byte) {
		h.Write(b)
		if m != nil {
			m.Write(b)
		}
	}
	md5s := &cutHasher{size: partSize, h: md5.New()}
	shas := &cutHasher{size: partSize, h: sha256.New()}
	size, err := hashSideBySide(f, whole, md5s.write, shas.write)
	if err != nil {
		return bad(err)
	}
	e.size = size
	h.Sum(e.sum[:0])
	if m != nil {
		e.md5 = m.Sum(nil)
	}
	if size <= partSize {
		return nil // the file shrank since its size was read
	}
	md5s.end()
	shas.end()
	e.parts = make([]PartSum, len(md5s.sums))
	for i := range e.parts {
		copy(e.parts[i].MD5[:], md5s.sums[i])
		copy(e.parts[i].SHA256[:], shas.sums[i])
	}
	return nil
}

// sideChunks is how many read buffers hashSideBySide cycles through.
const sideChunks = 4

// hashSideBySide reads f to its end and feeds every read to each of
// writers, each in a goroutine of its own, in order; it returns the bytes
// read. Its memory is sideChunks read buffers, whatever f's size.
func hashSideBySide(f io.Reader, writers ...func([]byte)) (int64, error) {
	type chunk struct {
		b    []byte
		n    int
		left atomic.Int32
	}
	free := make(chan *chunk, sideChunks)
	for range sideChunks {
		free <- &chunk{b: make([]byte, hashBufferSize)}
	}
	ins := make([]chan *chunk, len(writers))
	var wg sync.WaitGroup
	for i, w := range writers {
		ins[i] = make(chan *chunk, sideChunks)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ins[i] {
				w(c.b[:c.n])
				if c.left.Add(-1) == 0 {
					free <- c
				}
			}
		}()
	}
	var size int64
	var rerr error
	for {
		c := <-free
		n, err := f.Read(c.b)
		size += int64(n)
		if n > 0 {
			c.n = n
			c.left.Store(int32(len(writers)))
			for _, in := range ins {
				in <- c
			}
		} else {
			free <- c
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	for _, in := range ins {
		close(in)
	}
	wg.Wait()
	return size, rerr
}

// cutHasher hashes a file's parts of size bytes with h as the file is
// read.
type cutHasher struct {
	size int64
	h    hash.Hash
	in   int64 // bytes of the current part hashed
	sums [][]byte
}

func (p *cutHasher) write(b []byte) {
	for len(b) > 0 {
		n := min(int64(len(b)), p.size-p.in)
		p.h.Write(b[:n])
		p.in += n
		b = b[n:]
		if p.in == p.size {
			p.cut()
		}
	}
}

// cut ends the current part.
func (p *cutHasher) cut() {
	p.sums = append(p.sums, p.h.Sum(nil))
	p.h.Reset()
	p.in = 0
}

// end ends the last part, the rest.
func (p *cutHasher) end() {
	if p.in > 0 {
		p.cut()
	}
}
