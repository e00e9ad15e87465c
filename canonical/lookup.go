package canonical

import "github.com/depositkit/deposit/internal/jsonpointer"

// StringAt returns the string at the first of pointers (RFC 6901 JSON
// Pointers) that names a non-empty string in the JSON text doc; ok is false
// when none does, or a pointer is malformed. It reads doc with the parser
// that keys payloads, without decoding it into Go values: a server's answer
// is read this way for its identifier. err is a [*SyntaxError] when doc is
// not JSON this package accepts as a payload (a duplicate member name, a
// number out of a double's range, invalid UTF-8), which other JSON readers
// may still read.
func StringAt(doc []byte, pointers []string) (s string, ok bool, err error) {
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
		if n := &p.nodes[v]; n.kind == kindString && n.n > 0 {
			return string(p.bytesOf(n)), true, nil
		}
	}
	return "", false, nil
}
