// Package canonical provides canonical JSON bytes and the content keys derived
// from them.
//
// A key names the effect a payload intends: the lowercase hex SHA-256 of the
// payload's canonical bytes, so two texts that differ only in member order,
// whitespace, escapes or number spelling get the same key in every process and
// on every machine. Two canonical forms are offered. [FormJCS] (the default) is
// RFC 8785, the JSON Canonicalization Scheme. [FormPython] produces exactly the
// bytes of Python 3's
//
//	json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
//
// so a Go worker derives the same key as a Python worker. Both forms are
// strict: input that is not I-JSON (RFC 7493) is rejected with a [*SyntaxError]
// naming the byte offset, including inputs Python itself would accept (NaN,
// Infinity, duplicate member names, lone surrogates).
//
// The forms differ in number range on purpose. JCS reads every number as an
// IEEE 754 double and rejects numbers that overflow it. The Python form keeps
// integer literals exact at any size up to 4300 digits (Python's own limit) and
// reads other numbers as doubles.
//
// Both forms accept any JSON value at the top level, nesting up to
// [MaxDepth] levels, and inputs up to 2 GiB.
//
// Most callers want a [Keyer]: it removes volatile fields named by JSON
// Pointers from the key (not from the body), and derives dataset keys that
// cover file bytes. Every function here, and every method of [Form] and
// [Keyer], is safe for concurrent use by multiple goroutines.
package canonical

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Form names a canonical form.
type Form string

const (
	// FormJCS is RFC 8785, the JSON Canonicalization Scheme. It is the
	// default form.
	FormJCS Form = "jcs"
	// FormPython is Python 3's json.dumps(json.loads(text), sort_keys=True,
	// separators=(",", ":")) with ensure_ascii on.
	FormPython Form = "python"
)

// MaxDepth is the deepest nesting of arrays and objects either form accepts:
// a document may hold 512 containers inside one another, and the 513th is an
// error. Python's own json.loads gives up near 1000 levels, so every document
// accepted here is one Python can read.
const MaxDepth = 512

// maxIntDigits is the longest integer literal the Python form accepts, the
// default of Python's sys.get_int_max_str_digits().
const maxIntDigits = 4300

// ErrUnknownForm is returned for a canonical form name other than "jcs" or
// "python".
var ErrUnknownForm = errors.New("canonical: unknown form")

// ParseForm returns the form named by s: "jcs" or "python"; the empty string
// means [FormJCS].
func ParseForm(s string) (Form, error) {
	switch Form(s) {
	case "", FormJCS:
		return FormJCS, nil
	case FormPython:
		return FormPython, nil
	}
	return "", fmt.Errorf("%w %q: want jcs or python", ErrUnknownForm, s)
}

// Canonicalize returns the canonical bytes of the JSON text in, in form f.
// The empty form means [FormJCS]. Malformed input gives a [*SyntaxError].
func (f Form) Canonicalize(in []byte) ([]byte, error) {
	python, err := f.python()
	if err != nil {
		return nil, err
	}
	var p parser
	if err := p.parse(in, python); err != nil {
		return nil, err
	}
	return p.emit(make([]byte, 0, p.outSize())), nil
}

// python reports whether f is the Python form, and an error for a form that
// is neither.
func (f Form) python() (bool, error) {
	switch f {
	case "", FormJCS:
		return false, nil
	case FormPython:
		return true, nil
	}
	return false, fmt.Errorf("%w %q: want jcs or python", ErrUnknownForm, string(f))
}

// JCS returns the RFC 8785 canonical bytes of the JSON text in. Any JSON value
// may stand at the top level. Malformed input gives a [*SyntaxError].
func JCS(in []byte) ([]byte, error) {
	return FormJCS.Canonicalize(in)
}

// Python returns the bytes Python 3 writes for
// json.dumps(json.loads(in), sort_keys=True, separators=(",", ":")).
// Malformed input, and input Python accepts that is not I-JSON, gives a
// [*SyntaxError].
func Python(in []byte) ([]byte, error) {
	return FormPython.Canonicalize(in)
}

// Marshal returns the JCS bytes of the Go value v, encoded first by the rules
// of encoding/json (struct tags, Marshaler implementations, map keys) and then
// canonicalized, so every number becomes a double as JCS requires (an int64
// beyond 2^53 loses precision). Values encoding/json cannot encode, such as
// NaN or a channel, are an error.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical: %w", err)
	}
	return JCS(buf.Bytes())
}

// Key returns the key of canonical bytes: their SHA-256 as 64 lowercase hex
// digits.
func Key(canonicalBytes []byte) string {
	sum := sha256.Sum256(canonicalBytes)
	return hex.EncodeToString(sum[:])
}

// SyntaxError reports JSON text that is malformed or not I-JSON.
type SyntaxError struct {
	// Offset is the byte offset in the input where the problem was found.
	Offset int64
	// Msg says what is wrong.
	Msg string

	// numberRange marks the one rejection the forms may disagree on: an
	// integer literal too large for a double, which the Python form accepts.
	numberRange bool
}

// Error returns "canonical: offset N: msg".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("canonical: offset %d: %s", e.Offset, e.Msg)
}
