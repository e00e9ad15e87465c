package canonical

import (
	"errors"

	"github.com/depositkit/deposit/internal/jsonpointer"
)

// StringAt returns the string at the first of pointers (RFC 6901 JSON
// Pointers) that names a non-empty string in the JSON text doc; ok is false
// when none does, or a pointer is malformed. It reads doc with the parser
// that keys payloads, without decoding it into Go values: a server's answer
// is read this way for its identifier. err is a [*SyntaxError] when doc is
// not JSON this package accepts as a payload (a duplicate member name, a
// number out of a double's range, invalid UTF-8), which other JSON readers
// may still read.
func StringAt(doc []byte, pointers []string) (s string, ok bool, err error) {
	return valueAt(doc, pointers, false)
}

// ErrInexactNumber is IDAt's error for a number it holds only as a
// double (a fraction, an exponent, more than 15 digits), whose literal
// the parser did not keep.
var ErrInexactNumber = errors.New("canonical: a number held only as a double; read it as text")

// IDAt is [StringAt] that reads an identifier a server may answer as a
// number too: the first of pointers that names a non-empty string or an
// integer literal of at most 15 digits gives its text, the digits as
// written (a JSON integer has no leading zeros, so they are its canonical
// text; -0 is 0). Any other number there is reported as
// [ErrInexactNumber], for the caller to read it as text (1e3, or an
// identifier of 19 digits, which a double would round).
func IDAt(doc []byte, pointers []string) (s string, ok bool, err error) {
	return valueAt(doc, pointers, true)
}

// valueAt is StringAt, and with numbers IDAt: the text of the first of
// pointers that names a non-empty string, or with numbers an exact
// integer.
func valueAt(doc []byte, pointers []string, numbers bool) (string, bool, error) {
	var p parser
	if err := p.parse(doc, false); err != nil {
		return "", false, err
	}
	for _, ptr := range pointers {
		toks, err := jsonpointer.Parse(ptr)
		if err != nil {
			continue
		}
		v, found := p.resolve(toks)
		if !found {
			continue
		}
		switch n := &p.nodes[v]; {
		case n.kind == kindString && n.n > 0:
			return string(p.bytesOf(n)), true, nil
		case !numbers || n.kind != kindNumber:
		case n.flags&flagExact != 0:
			if lit := string(p.src[n.off : n.off+n.n]); lit != "-0" {
				return lit, true, nil
			}
			return "0", true, nil
		default:
			return "", false, ErrInexactNumber
		}
	}
	return "", false, nil
}
