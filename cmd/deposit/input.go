package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync/atomic"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
)

// defaultMaxLineBytes is the default --max-line-bytes: 16 MiB.
const defaultMaxLineBytes = 16 << 20

// readBufferSize is the size of the input buffer: lines longer than this are
// assembled from several reads, and a line over the limit is skipped without
// being held in memory.
const readBufferSize = 64 << 10

// errLineTooLong is the input error of a line over --max-line-bytes.
var errLineTooLong = errors.New("line too long")

// lineReader reads JSON Lines one physical line at a time. Memory is bounded
// by the longest line kept (at most max bytes), never by the input's length:
// a line over max is discarded as it is read.
type lineReader struct {
	r       *bufio.Reader
	max     int
	line    int64        // number of the last line read, 1-based
	eof     bool         // the input has ended: it is not read again
	scratch []byte       // assembles a line longer than the buffer
	read    atomic.Int64 // bytes consumed, for progress
}

func newLineReader(r io.Reader, maxLineBytes int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, readBufferSize), max: maxLineBytes}
}

// inputLine is one non-blank line: its 1-based physical number and a copy of
// its bytes (without the line ending), or the error that makes it invalid.
type inputLine struct {
	num  int64
	text []byte
	err  error
}

// next returns the next non-blank line. At the end of the input it returns
// io.EOF; any other error is a read error that ends the input.
func (lr *lineReader) next() (inputLine, error) {
	for {
		if lr.eof {
			return inputLine{}, io.EOF
		}
		lr.line++
		lr.scratch = lr.scratch[:0]
		var (
			size    int64  // bytes of this line, its ending included
			over    bool   // longer than max: discarding the rest
			whole   []byte // the line, when one read held all of it
			newline bool   // the line ended with "\n" (not the end of input)
		)
		for {
			chunk, err := lr.r.ReadSlice('\n')
			size += int64(len(chunk))
			lr.read.Add(int64(len(chunk)))
			switch {
			case over:
			case len(lr.scratch)+len(chunk) > lr.max+2: // slack for "\r\n"
				over = true
				lr.scratch = lr.scratch[:0]
			case err == nil && len(lr.scratch) == 0:
				whole = chunk // the common case: the whole line in the buffer
			default:
				lr.scratch = append(lr.scratch, chunk...)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				lr.eof = true
				if size == 0 {
					return inputLine{}, io.EOF
				}
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return inputLine{}, err
			}
			newline = err == nil
			break
		}
		if over {
			n := size
			if newline {
				n--
			}
			return inputLine{num: lr.line, err: fmt.Errorf("%w: %d bytes, over --max-line-bytes %d", errLineTooLong, n, lr.max)}, nil
		}
		text := whole
		if text == nil {
			text = lr.scratch
		}
		text = bytes.TrimSuffix(text, []byte("\n"))
		text = bytes.TrimSuffix(text, []byte("\r"))
		if len(text) > lr.max {
			return inputLine{num: lr.line, err: fmt.Errorf("%w: %d bytes, over --max-line-bytes %d", errLineTooLong, len(text), lr.max)}, nil
		}
		if blank(text) {
			continue
		}
		out := inputLine{num: lr.line, text: bytes.Clone(text)}
		if cap(lr.scratch) > 1<<20 {
			lr.scratch = nil // do not keep a long line's buffer for ever
		}
		return out, nil
	}
}

// rest reads the rest of the input without keeping or parsing it and
// returns the number of lines next would still have returned: what a run
// that stopped early never read. Memory is the read buffer, whatever the
// lines' length.
func (lr *lineReader) rest() (int64, error) {
	var (
		n         int64
		size      int64 // bytes of the current line so far, its ending included
		content   bool  // the current line holds a byte that is not whitespace
		prev, end byte  // the line's last two bytes so far
	)
	for !lr.eof {
		chunk, err := lr.r.ReadSlice('\n')
		lr.read.Add(int64(len(chunk)))
		size += int64(len(chunk))
		content = content || !blank(chunk)
		for _, c := range chunk[max(0, len(chunk)-2):] {
			prev, end = end, c
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			lr.eof = true
		case err != nil:
			return n, err
		}
		// An over-long line is an item even if blank, as next reports it:
		// its length is measured without "\n" and "\r".
		text := size
		if end == '\n' {
			text, end = text-1, prev
		}
		if end == '\r' {
			text--
		}
		if size > 0 && (content || text > int64(lr.max)) {
			n++
		}
		size, content, prev, end = 0, false, 0, 0
	}
	return n, nil
}

// blank reports whether a line holds only JSON whitespace; such lines are
// skipped (their numbers still count).
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// datasetLine is the shape of a line under --datasets.
type datasetLine struct {
	Metadata json.RawMessage `json:"metadata"`
	Files    []string        `json:"files"`
}

// parseDatasetLine reads {"metadata":M,"files":[P,...]}. The line must be
// valid in form (no duplicate names, valid UTF-8, ...) and hold nothing else.
func parseDatasetLine(form canonical.Form, text []byte) (datasetLine, error) {
	var d datasetLine
	if _, err := form.Canonicalize(text); err != nil {
		return d, err
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf(`a dataset line is {"metadata":{...},"files":["path",...]}: %w`, err)
	}
	if len(d.Metadata) == 0 || bytes.Equal(d.Metadata, []byte("null")) {
		return d, errors.New(`a dataset line needs "metadata": {"metadata":{...},"files":["path",...]}`)
	}
	if len(d.Files) == 0 {
		return d, errors.New(`a dataset line needs a non-empty "files" list: {"metadata":{...},"files":["path",...]}`)
	}
	return d, nil
}

// items turns the input into the client's items: payloads, or datasets under
// dir when dir is set. A read error ends the sequence and is stored in *rerr.
func items(lr *lineReader, form canonical.Form, dir string, rerr *error) iter.Seq[client.Item] {
	return func(yield func(client.Item) bool) {
		for {
			ln, err := lr.next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				*rerr = fmt.Errorf("reading input at line %d: %w", lr.line, err)
				return
			}
			it := client.Item{Line: ln.num, Err: ln.err}
			switch {
			case ln.err != nil:
			case dir != "":
				d, err := parseDatasetLine(form, ln.text)
				if err != nil {
					it.Err = err
				} else {
					it.Dataset = &client.Dataset{Dir: dir, Metadata: d.Metadata, Files: d.Files}
				}
			default:
				it.Payload = ln.text
			}
			if !yield(it) {
				return
			}
		}
	}
}
