// Package jsonpointer provides JSON Pointers (RFC 6901): parsing a pointer
// into its reference tokens, and resolving those against a document decoded
// by encoding/json. canonical uses it to remove ignored members from a key,
// client to find an identifier in an answer.
package jsonpointer

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

var unescape = strings.NewReplacer("~1", "/", "~0", "~")

// Parse returns the decoded reference tokens of pointer s; "" names the
// whole document and has none. The error says what is wrong, without
// quoting s.
func Parse(s string) ([]string, error) {
	switch {
	case s == "":
		return nil, nil
	case s[0] != '/':
		return nil, errors.New("want a leading /")
	case !utf8.ValidString(s):
		return nil, errors.New("not valid UTF-8")
	}
	toks := strings.Split(s[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, errors.New("~ must be followed by 0 or 1")
			}
		}
		toks[i] = unescape.Replace(t)
	}
	return toks, nil
}

// Index returns the array index a token names: decimal digits without a
// leading zero (RFC 6901 section 4); ok is false for anything else,
// including "-", which names no element that exists.
func Index(tok string) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') || strings.Trim(tok, "0123456789") != "" {
		return 0, false
	}
	i, err := strconv.Atoi(tok)
	return i, err == nil
}

// Get resolves toks against doc, a value decoded by encoding/json into
// any (objects as map[string]any, arrays as []any). ok is false when the
// pointer names nothing.
func Get(doc any, toks []string) (v any, ok bool) {
	cur := doc
	for _, tok := range toks {
		switch n := cur.(type) {
		case map[string]any:
			if cur, ok = n[tok]; !ok {
				return nil, false
			}
		case []any:
			i, ok := Index(tok)
			if !ok || i >= len(n) {
				return nil, false
			}
			cur = n[i]
		default:
			return nil, false
		}
	}
	return cur, true
}
