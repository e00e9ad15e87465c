package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync/atomic"
)

// DefaultMaxLineBytes is the longest line a [LineReader] accepts when
// NewLineReader is given no limit: 16 MiB.
const DefaultMaxLineBytes = 16 << 20

// ErrLineTooLong is the Err of an [Item] whose line is longer than the
// LineReader's limit.
var ErrLineTooLong = errors.New("line too long")

// lineBufferSize is the size of the input buffer: lines longer than this
// are assembled from several reads, and a line over the limit is skipped
// without being held in memory.
const lineBufferSize = 64 << 10

// LineReader reads JSON Lines, one payload a line, as the deposit command
// does: lines are numbered from 1, every physical line counted; a line of
// JSON whitespace only is skipped; a trailing "\r" is dropped; a line
// longer than the limit becomes an Item whose Err wraps ErrLineTooLong,
// and is never held in memory. Memory is bounded by the longest line
// kept, never by the input's length. Payloads are not parsed: an invalid
// one is reported by the Client that deposits it.
//
// Range over Items, then check Err, as with bufio.Scanner. A LineReader is
// read by one goroutine; BytesRead may be called from any.
type LineReader struct {
	r       *bufio.Reader
	max     int
	line    int64        // number of the last line read, 1-based
	eof     bool         // the input has ended: it is not read again
	err     error        // the read error that ended the input
	scratch []byte       // assembles a line longer than the buffer
	read    atomic.Int64 // bytes consumed
}

// NewLineReader returns a LineReader of r that accepts lines of at most
// maxLineBytes bytes (not counting the line ending); 0 or less means
// DefaultMaxLineBytes.
func NewLineReader(r io.Reader, maxLineBytes int) *LineReader {
	if maxLineBytes <= 0 {
		maxLineBytes = DefaultMaxLineBytes
	}
	return &LineReader{r: bufio.NewReaderSize(r, lineBufferSize), max: maxLineBytes}
}

// Items yields an Item for each non-blank line: Line is its 1-based
// physical number, Payload a copy of its bytes without the line ending, or
// Err an error wrapping ErrLineTooLong. A read error ends the sequence;
// Err returns it.
func (lr *LineReader) Items() iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for {
			it, err := lr.next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				lr.err = fmt.Errorf("reading input at line %d: %w", lr.line, err)
				return
			}
			if !yield(it) {
				return
			}
		}
	}
}

// Err returns the read error that ended Items, or nil when the input
// ended (or Items stopped early) without one.
func (lr *LineReader) Err() error { return lr.err }

// BytesRead returns the number of bytes read from the input so far, line
// endings and skipped lines included: with the input's size, how far a
// batch has come. It is safe to call while another goroutine reads.
func (lr *LineReader) BytesRead() int64 { return lr.read.Load() }

// Remaining reads the rest of the input without keeping or parsing it and
// returns the number of items Items would still have yielded: what a batch
// that stopped early never read. Memory is the read buffer, whatever the
// lines' length.
func (lr *LineReader) Remaining() (int64, error) {
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

// next returns the next non-blank line as an Item. At the end of the input
// it returns io.EOF; any other error is a read error that ends the input.
func (lr *LineReader) next() (Item, error) {
	for {
		if lr.eof {
			return Item{}, io.EOF
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
					return Item{}, io.EOF
				}
			}
			if err != nil && !errors.Is(err, io.EOF) {
				lr.eof = true
				return Item{}, err
			}
			newline = err == nil
			break
		}
		if over {
			n := size
			if newline {
				n--
			}
			return Item{Line: lr.line, Err: lr.tooLong(n)}, nil
		}
		text := whole
		if text == nil {
			text = lr.scratch
		}
		text = bytes.TrimSuffix(text, []byte("\n"))
		text = bytes.TrimSuffix(text, []byte("\r"))
		if len(text) > lr.max {
			return Item{Line: lr.line, Err: lr.tooLong(int64(len(text)))}, nil
		}
		if blank(text) {
			continue
		}
		out := Item{Line: lr.line, Payload: bytes.Clone(text)}
		if cap(lr.scratch) > 1<<20 {
			lr.scratch = nil // do not keep a long line's buffer for ever
		}
		return out, nil
	}
}

func (lr *LineReader) tooLong(n int64) error {
	return fmt.Errorf("%w: %d bytes, over the limit of %d", ErrLineTooLong, n, lr.max)
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
