package canonical

import (
	"math"
	"strconv"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// outSize estimates the length of the canonical bytes.
func (p *parser) outSize() int {
	if p.python {
		return len(p.src) + len(p.src)/4 + 16
	}
	return len(p.src) + 16
}

// emit appends the canonical bytes of the parsed document to out, leaving out
// values marked removed.
func (p *parser) emit(out []byte) []byte {
	return p.emitValue(out, p.root)
}

func (p *parser) emitValue(out []byte, i int32) []byte {
	n := &p.nodes[i]
	switch n.kind {
	case kindNull:
		return append(out, "null"...)
	case kindFalse:
		return append(out, "false"...)
	case kindTrue:
		return append(out, "true"...)
	case kindNumber:
		return p.emitNumber(out, n)
	case kindString:
		return p.emitString(out, n)
	case kindArray:
		out = append(out, '[')
		first := true
		for _, k := range p.kids[n.off : n.off+n.n] {
			if p.nodes[k].flags&flagRemoved != 0 {
				continue
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			out = p.emitValue(out, k)
		}
		return append(out, ']')
	default:
		out = append(out, '{')
		first := true
		for j := n.off; j < n.off+n.n; j++ {
			m := &p.mems[j]
			if p.nodes[m.val].flags&flagRemoved != 0 {
				continue
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			out = p.emitString(out, &m.key)
			out = append(out, ':')
			out = p.emitValue(out, m.val)
		}
		return append(out, '}')
	}
}

func (p *parser) emitString(out []byte, n *node) []byte {
	b := p.bytesOf(n)
	out = append(out, '"')
	switch {
	case n.flags&flagArena == 0 && (!p.python || n.flags&flagNonASCII == 0):
		// Read without escapes, so nothing needs one.
		out = append(out, b...)
	case p.python:
		out = appendPythonString(out, b)
	default:
		out = appendJCSString(out, b)
	}
	return append(out, '"')
}

// appendJCSString appends valid UTF-8 b escaped as RFC 8785 requires: \" and
// \\, the two-character escapes for \b \f \n \r \t, \u00xx for the other
// control characters, and everything else as it is.
func appendJCSString(out, b []byte) []byte {
	start := 0
	for i, c := range b {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		out = append(out, b[start:i]...)
		out = appendShortEscape(out, c)
		start = i + 1
	}
	return append(out, b[start:]...)
}

// appendShortEscape appends the escape of an ASCII character that JSON text
// cannot hold as it is.
func appendShortEscape(out []byte, c byte) []byte {
	switch c {
	case '"':
		return append(out, '\\', '"')
	case '\\':
		return append(out, '\\', '\\')
	case '\b':
		return append(out, '\\', 'b')
	case '\f':
		return append(out, '\\', 'f')
	case '\n':
		return append(out, '\\', 'n')
	case '\r':
		return append(out, '\\', 'r')
	case '\t':
		return append(out, '\\', 't')
	}
	return appendU(out, rune(c))
}

func appendU(out []byte, u rune) []byte {
	return append(out, '\\', 'u', hexDigits[u>>12&0xf], hexDigits[u>>8&0xf], hexDigits[u>>4&0xf], hexDigits[u&0xf])
}

// appendPythonString appends valid UTF-8 b escaped as Python's json.dumps
// does with ensure_ascii: printable ASCII as it is, the JSON short escapes,
// and every other character as \uxxxx in lowercase hex, with a surrogate
// pair above U+FFFF.
func appendPythonString(out, b []byte) []byte {
	start := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			i++
			continue
		}
		out = append(out, b[start:i]...)
		if c < utf8.RuneSelf {
			out = appendShortEscape(out, c)
			i++
		} else {
			r, size := utf8.DecodeRune(b[i:])
			if r >= 0x10000 {
				r -= 0x10000
				out = appendU(out, 0xD800+r>>10)
				out = appendU(out, 0xDC00+r&0x3ff)
			} else {
				out = appendU(out, r)
			}
			i += size
		}
		start = i
	}
	return append(out, b[start:]...)
}

func (p *parser) emitNumber(out []byte, n *node) []byte {
	if n.flags&flagInt != 0 && (p.python || n.flags&flagExact != 0) {
		lit := p.src[n.off : n.off+n.n]
		if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
			return append(out, '0')
		}
		return append(out, lit...)
	}
	if p.python {
		return appendPythonFloat(out, n.float())
	}
	return appendES(out, n.float())
}

// shortest writes the shortest decimal digits that read back as f into buf
// and returns them with the sign and the position of the decimal point:
// |f| = 0.digits * 10^point.
func shortest(buf *[32]byte, f float64) (neg bool, digits []byte, point int) {
	s := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	if s[0] == '-' {
		neg = true
		s = s[1:]
	}
	e := len(s) - 1
	for s[e] != 'e' {
		e--
	}
	exp := 0
	for _, c := range s[e+2:] {
		exp = exp*10 + int(c-'0')
	}
	if s[e+1] == '-' {
		exp = -exp
	}
	digits = s[:e]
	if len(digits) > 1 {
		// Drop the decimal point after the first digit, in place.
		copy(digits[1:], digits[2:])
		digits = digits[:len(digits)-1]
	}
	return neg, digits, exp + 1
}

// appendES appends f as ECMAScript's Number::toString writes it, which is
// what RFC 8785 requires. f is finite.
func appendES(out []byte, f float64) []byte {
	if f == 0 {
		return append(out, '0')
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.AppendInt(out, int64(f), 10)
	}
	var buf [32]byte
	neg, d, n := shortest(&buf, f)
	if neg {
		out = append(out, '-')
	}
	k := len(d)
	switch {
	case k <= n && n <= 21:
		out = append(out, d...)
		for range n - k {
			out = append(out, '0')
		}
	case 0 < n && n <= 21:
		out = append(out, d[:n]...)
		out = append(out, '.')
		out = append(out, d[n:]...)
	case -6 < n && n <= 0:
		out = append(out, '0', '.')
		for range -n {
			out = append(out, '0')
		}
		out = append(out, d...)
	default:
		out = append(out, d[0])
		if k > 1 {
			out = append(out, '.')
			out = append(out, d[1:]...)
		}
		out = append(out, 'e')
		if n-1 >= 0 {
			out = append(out, '+')
		}
		out = strconv.AppendInt(out, int64(n-1), 10)
	}
	return out
}

// appendPythonFloat appends f as Python's repr(float) writes it: the shortest
// digits that read back, positional notation with at least one digit after
// the point when the decimal exponent is in -4..15, otherwise exponential
// notation with a signed exponent of at least two digits. f is finite.
func appendPythonFloat(out []byte, f float64) []byte {
	var buf [32]byte
	neg, d, n := shortest(&buf, f)
	if neg {
		out = append(out, '-')
	}
	k := len(d)
	if -4 < n && n <= 16 {
		switch {
		case n <= 0:
			out = append(out, '0', '.')
			for range -n {
				out = append(out, '0')
			}
			out = append(out, d...)
		case n < k:
			out = append(out, d[:n]...)
			out = append(out, '.')
			out = append(out, d[n:]...)
		default:
			out = append(out, d...)
			for range n - k {
				out = append(out, '0')
			}
			out = append(out, '.', '0')
		}
		return out
	}
	out = append(out, d[0])
	if k > 1 {
		out = append(out, '.')
		out = append(out, d[1:]...)
	}
	out = append(out, 'e')
	exp := n - 1
	if exp < 0 {
		out = append(out, '-')
		exp = -exp
	} else {
		out = append(out, '+')
	}
	if exp < 10 {
		out = append(out, '0')
	}
	return strconv.AppendInt(out, int64(exp), 10)
}
