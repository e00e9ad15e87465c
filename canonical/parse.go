package canonical

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// kind is the type of a parsed JSON value.
type kind uint8

const (
	kindNull kind = iota
	kindFalse
	kindTrue
	kindNumber
	kindString
	kindArray
	kindObject
)

// node flags.
const (
	flagArena    = 1 << iota // string: bytes live in parser.arena (escapes decoded), not in src
	flagNonASCII             // string: holds bytes >= 0x7f, which Python escapes
	flagInt                  // number: the literal has no fraction and no exponent
	flagExact                // number: integer literal short enough to print as written in JCS
	flagRemoved              // value removed by an ignore pointer
)

// node is one parsed JSON value.
type node struct {
	kind  kind
	flags uint8
	// off and n locate the value: for a string its bytes (in src, or in
	// arena with flagArena), for a number its literal in src, for an array
	// its elements kids[off:off+n], for an object its members mems[off:off+n].
	// A number read as a double (without flagExact) keeps the bits of
	// the double in off and n instead; see float.
	off, n int32
}

// float returns the double of a number node read as one.
func (n *node) float() float64 {
	return math.Float64frombits(uint64(uint32(n.off)) | uint64(uint32(n.n))<<32)
}

// setFloat stores f in a number node.
func (n *node) setFloat(f float64) {
	bits := math.Float64bits(f)
	n.off, n.n = int32(uint32(bits)), int32(uint32(bits>>32))
}

// member is one object member: its name (a string node) and its value.
type member struct {
	key node
	val int32 // index in nodes
	pos int32 // offset of the name in src
}

// parser reads JSON text into a small tree in one pass. Object members are
// sorted in the order of the form (UTF-16 code units for JCS, code points for
// Python) as each object closes, which is also where duplicate names are
// found. A parser is used by one goroutine for one document.
type parser struct {
	src    []byte
	i      int
	python bool
	root   int32

	nodes []node
	kids  []int32
	mems  []member
	arena []byte

	// scratch stacks of the containers still open.
	skids []int32
	smems []member
}

// parse reads src, which must hold exactly one JSON value with optional
// whitespace around it.
func (p *parser) parse(src []byte, python bool) error {
	if len(src) > math.MaxInt32 {
		return p.fail(0, "input of %d bytes is larger than the 2 GiB limit", len(src))
	}
	p.src = src
	p.python = python
	// Capacities from the density of typical payloads, so that small
	// ones need no growth at all.
	p.nodes = make([]node, 0, len(src)/8+8)
	p.kids = make([]int32, 0, len(src)/16+8)
	p.mems = make([]member, 0, len(src)/24+8)
	p.skids = make([]int32, 0, 32)
	p.smems = make([]member, 0, 32)
	v, err := p.value(0)
	if err != nil {
		return err
	}
	p.skipSpace()
	if p.i < len(p.src) {
		return p.fail(p.i, "%s after the top-level value, want the end of input", describe(p.src[p.i:]))
	}
	p.root = v
	return nil
}

func (p *parser) fail(off int, format string, args ...any) error {
	return &SyntaxError{Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
}

// describe names the character at the start of b for an error message.
func describe(b []byte) string {
	if len(b) == 0 {
		return "end of input"
	}
	c := b[0]
	if c < utf8.RuneSelf {
		return "character " + strconv.QuoteRuneToASCII(rune(c))
	}
	r, size := utf8.DecodeRune(b)
	if r == utf8.RuneError && size == 1 {
		return fmt.Sprintf("byte 0x%02x", c)
	}
	return "character " + strconv.QuoteRuneToASCII(r)
}

func (p *parser) skipSpace() {
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) add(n node) int32 {
	p.nodes = append(p.nodes, n)
	return int32(len(p.nodes) - 1)
}

// value reads one value inside depth open containers.
func (p *parser) value(depth int) (int32, error) {
	p.skipSpace()
	if p.i >= len(p.src) {
		return 0, p.fail(p.i, "unexpected end of input, want a value")
	}
	switch c := p.src[p.i]; c {
	case '{':
		return p.object(depth + 1)
	case '[':
		return p.array(depth + 1)
	case '"':
		s, err := p.str()
		if err != nil {
			return 0, err
		}
		return p.add(s), nil
	case 't':
		return p.literal("true", kindTrue)
	case 'f':
		return p.literal("false", kindFalse)
	case 'n':
		return p.literal("null", kindNull)
	case 'N':
		if bytes.HasPrefix(p.src[p.i:], []byte("NaN")) {
			return 0, p.fail(p.i, "NaN is not JSON, want a number")
		}
	case 'I':
		if bytes.HasPrefix(p.src[p.i:], []byte("Infinity")) {
			return 0, p.fail(p.i, "Infinity is not JSON, want a number")
		}
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return p.number()
		}
	}
	return 0, p.fail(p.i, "invalid %s, want a value", describe(p.src[p.i:]))
}

func (p *parser) literal(word string, k kind) (int32, error) {
	for j := 0; j < len(word); j++ {
		at := p.i + j
		if at >= len(p.src) {
			return 0, p.fail(at, "unexpected end of input in literal %s", word)
		}
		if p.src[at] != word[j] {
			return 0, p.fail(at, "invalid %s in literal %s", describe(p.src[at:]), word)
		}
	}
	p.i += len(word)
	return p.add(node{kind: k}), nil
}

func (p *parser) array(depth int) (int32, error) {
	if depth > MaxDepth {
		return 0, p.fail(p.i, "nesting deeper than %d levels", MaxDepth)
	}
	p.i++
	base := len(p.skids)
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == ']' {
		p.i++
		return p.add(node{kind: kindArray, off: int32(len(p.kids))}), nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			return 0, err
		}
		p.skids = append(p.skids, v)
		p.skipSpace()
		if p.i >= len(p.src) {
			return 0, p.fail(p.i, "unexpected end of input in array, want , or ]")
		}
		c := p.src[p.i]
		p.i++
		if c == ']' {
			break
		}
		if c != ',' {
			return 0, p.fail(p.i-1, "invalid %s after array element, want , or ]", describe(p.src[p.i-1:]))
		}
	}
	off := int32(len(p.kids))
	p.kids = append(p.kids, p.skids[base:]...)
	n := int32(len(p.skids) - base)
	p.skids = p.skids[:base]
	return p.add(node{kind: kindArray, off: off, n: n}), nil
}

func (p *parser) object(depth int) (int32, error) {
	if depth > MaxDepth {
		return 0, p.fail(p.i, "nesting deeper than %d levels", MaxDepth)
	}
	p.i++
	base := len(p.smems)
	p.skipSpace()
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		return p.add(node{kind: kindObject, off: int32(len(p.mems))}), nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.src) {
			return 0, p.fail(p.i, "unexpected end of input in object, want a member name")
		}
		if p.src[p.i] != '"' {
			return 0, p.fail(p.i, "invalid %s in object, want a member name (a string)", describe(p.src[p.i:]))
		}
		pos := p.i
		k, err := p.str()
		if err != nil {
			return 0, err
		}
		p.skipSpace()
		if p.i >= len(p.src) {
			return 0, p.fail(p.i, "unexpected end of input after member name, want :")
		}
		if p.src[p.i] != ':' {
			return 0, p.fail(p.i, "invalid %s after member name, want :", describe(p.src[p.i:]))
		}
		p.i++
		v, err := p.value(depth)
		if err != nil {
			return 0, err
		}
		p.smems = append(p.smems, member{key: k, val: v, pos: int32(pos)})
		p.skipSpace()
		if p.i >= len(p.src) {
			return 0, p.fail(p.i, "unexpected end of input in object, want , or }")
		}
		c := p.src[p.i]
		p.i++
		if c == '}' {
			break
		}
		if c != ',' {
			return 0, p.fail(p.i-1, "invalid %s after object member, want , or }", describe(p.src[p.i-1:]))
		}
	}
	ms := p.smems[base:]
	if err := p.sortMembers(ms); err != nil {
		return 0, err
	}
	off := int32(len(p.mems))
	p.mems = append(p.mems, ms...)
	p.smems = p.smems[:base]
	return p.add(node{kind: kindObject, off: off, n: int32(len(ms))}), nil
}

// bytesOf returns the decoded bytes of string node s.
func (p *parser) bytesOf(s *node) []byte {
	if s.flags&flagArena != 0 {
		return p.arena[s.off : s.off+s.n]
	}
	return p.src[s.off : s.off+s.n]
}

// sortMembers sorts one object's members by name and rejects duplicates.
func (p *parser) sortMembers(ms []member) error {
	if len(ms) < 2 {
		return nil
	}
	cmp := compareUTF16
	if p.python {
		cmp = bytes.Compare
	}
	if len(ms) <= 12 {
		for i := 1; i < len(ms); i++ {
			for j := i; j > 0 && cmp(p.bytesOf(&ms[j-1].key), p.bytesOf(&ms[j].key)) > 0; j-- {
				ms[j-1], ms[j] = ms[j], ms[j-1]
			}
		}
	} else {
		slices.SortFunc(ms, func(a, b member) int {
			return cmp(p.bytesOf(&a.key), p.bytesOf(&b.key))
		})
	}
	for i := 1; i < len(ms); i++ {
		prev, cur := p.bytesOf(&ms[i-1].key), p.bytesOf(&ms[i].key)
		if bytes.Equal(prev, cur) {
			return p.fail(int(max(ms[i-1].pos, ms[i].pos)), "duplicate member name %s", quoteName(cur))
		}
	}
	return nil
}

// quoteName quotes a member name for an error message, shortened if long.
func quoteName(b []byte) string {
	const limit = 40
	if len(b) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return strconv.QuoteToASCII(string(b[:cut])) + "..."
	}
	return strconv.QuoteToASCII(string(b))
}

// compareUTF16 compares valid UTF-8 strings by their UTF-16 code units, the
// order RFC 8785 sorts member names in. It differs from byte order only
// between characters above U+FFFF and those in U+E000..U+FFFF.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return int(a[i]) - int(b[i])
	}
	// Both strings agree up to i, so they share the start of the
	// characters that differ.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	ua, ub := firstUnit(ra), firstUnit(rb)
	if ua != ub {
		return int(ua) - int(ub)
	}
	return int(ra) - int(rb)
}

// firstUnit returns the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r >= 0x10000 {
		return 0xD800 + (r-0x10000)>>10
	}
	return r
}

// str reads a string starting at the quote at p.i.
func (p *parser) str() (node, error) {
	start := p.i + 1
	var flags uint8
	for i := start; ; {
		if i >= len(p.src) {
			return node{}, p.fail(i, "unexpected end of input in string")
		}
		c := p.src[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			i++
			continue
		}
		switch {
		case c == 0x7f:
			// Raw in JCS, escaped by Python.
			flags |= flagNonASCII
			i++
			continue
		case c == '"':
			p.i = i + 1
			return node{kind: kindString, flags: flags, off: int32(start), n: int32(i - start)}, nil
		case c == '\\':
			return p.strEscaped(start, i, flags)
		case c < 0x20:
			return node{}, p.fail(i, "control character U+%04X in string, want it escaped", c)
		}
		r, size := utf8.DecodeRune(p.src[i:])
		if r == utf8.RuneError && size == 1 {
			return node{}, p.fail(i, "invalid UTF-8 byte 0x%02x in string", c)
		}
		flags |= flagNonASCII
		i += size
	}
}

// strEscaped finishes reading a string that holds escapes, decoding it into
// the arena. src[start:i] has been read and holds none.
func (p *parser) strEscaped(start, i int, flags uint8) (node, error) {
	aoff := len(p.arena)
	p.arena = append(p.arena, p.src[start:i]...)
	for {
		j := i
		for j < len(p.src) {
			c := p.src[j]
			if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
				break
			}
			j++
		}
		p.arena = append(p.arena, p.src[i:j]...)
		i = j
		if i >= len(p.src) {
			return node{}, p.fail(i, "unexpected end of input in string")
		}
		c := p.src[i]
		switch {
		case c == '"':
			p.i = i + 1
			return node{kind: kindString, flags: flags | flagArena, off: int32(aoff), n: int32(len(p.arena) - aoff)}, nil
		case c < 0x20:
			return node{}, p.fail(i, "control character U+%04X in string, want it escaped", c)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(p.src[i:])
			if r == utf8.RuneError && size == 1 {
				return node{}, p.fail(i, "invalid UTF-8 byte 0x%02x in string", c)
			}
			flags |= flagNonASCII
			p.arena = append(p.arena, p.src[i:i+size]...)
			i += size
			continue
		}
		// A backslash.
		if i+1 >= len(p.src) {
			return node{}, p.fail(i+1, "unexpected end of input in escape")
		}
		e := p.src[i+1]
		switch e {
		case '"', '\\', '/':
			p.arena = append(p.arena, e)
		case 'b':
			p.arena = append(p.arena, '\b')
		case 'f':
			p.arena = append(p.arena, '\f')
		case 'n':
			p.arena = append(p.arena, '\n')
		case 'r':
			p.arena = append(p.arena, '\r')
		case 't':
			p.arena = append(p.arena, '\t')
		case 'u':
			r, err := p.hex4(i)
			if err != nil {
				return node{}, err
			}
			if r >= 0xD800 && r < 0xDC00 {
				if i+7 < len(p.src) && p.src[i+6] == '\\' && p.src[i+7] == 'u' {
					lo, err := p.hex4(i + 6)
					if err != nil {
						return node{}, err
					}
					if lo < 0xDC00 || lo > 0xDFFF {
						return node{}, p.fail(i, "lone surrogate \\u%04x: not followed by a low surrogate", r)
					}
					r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
					i += 6
				} else {
					return node{}, p.fail(i, "lone surrogate \\u%04x: not followed by a low surrogate", r)
				}
			} else if r >= 0xDC00 && r <= 0xDFFF {
				return node{}, p.fail(i, "lone surrogate \\u%04x: not preceded by a high surrogate", r)
			}
			if r >= utf8.RuneSelf {
				flags |= flagNonASCII
			}
			p.arena = utf8.AppendRune(p.arena, r)
			i += 6
			continue
		default:
			return node{}, p.fail(i, "invalid escape \\%s in string", describeEscape(p.src[i+1:]))
		}
		i += 2
	}
}

func describeEscape(b []byte) string {
	if b[0] < utf8.RuneSelf && b[0] > 0x20 && b[0] < 0x7f {
		return string(b[:1])
	}
	return fmt.Sprintf("followed by byte 0x%02x", b[0])
}

// hex4 reads the four hex digits of the \u escape whose backslash is at at.
func (p *parser) hex4(at int) (rune, error) {
	var r rune
	for k := at + 2; k < at+6; k++ {
		if k >= len(p.src) {
			return 0, p.fail(k, "unexpected end of input in \\u escape")
		}
		c := p.src[k]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.fail(k, "invalid %s in \\u escape, want a hex digit", describe(p.src[k:]))
		}
		r = r<<4 | rune(d)
	}
	return r, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a number starting at p.i.
func (p *parser) number() (int32, error) {
	start := p.i
	i := start
	neg := p.src[i] == '-'
	if neg {
		i++
		if i < len(p.src) && p.src[i] == 'I' && bytes.HasPrefix(p.src[i:], []byte("Infinity")) {
			return 0, p.fail(start, "-Infinity is not JSON, want a number")
		}
	}
	if i >= len(p.src) {
		return 0, p.fail(i, "unexpected end of input in number")
	}
	switch c := p.src[i]; {
	case c == '0':
		i++
		if i < len(p.src) && isDigit(p.src[i]) {
			return 0, p.fail(i-1, "leading zero in number")
		}
	case c >= '1' && c <= '9':
		i++
		for i < len(p.src) && isDigit(p.src[i]) {
			i++
		}
	default:
		return 0, p.fail(i, "invalid %s in number, want a digit", describe(p.src[i:]))
	}
	intDigits := i - start
	if neg {
		intDigits--
	}
	isInt := true
	if i < len(p.src) && p.src[i] == '.' {
		isInt = false
		i++
		if i >= len(p.src) || !isDigit(p.src[i]) {
			return 0, p.fail(i, "invalid %s after decimal point, want a digit", describe(p.src[i:]))
		}
		for i < len(p.src) && isDigit(p.src[i]) {
			i++
		}
	}
	if i < len(p.src) && (p.src[i] == 'e' || p.src[i] == 'E') {
		isInt = false
		i++
		if i < len(p.src) && (p.src[i] == '+' || p.src[i] == '-') {
			i++
		}
		if i >= len(p.src) || !isDigit(p.src[i]) {
			return 0, p.fail(i, "invalid %s in exponent, want a digit", describe(p.src[i:]))
		}
		for i < len(p.src) && isDigit(p.src[i]) {
			i++
		}
	}
	p.i = i
	n := node{kind: kindNumber, off: int32(start), n: int32(i - start)}
	if isInt {
		n.flags |= flagInt
		if p.python {
			if intDigits > maxIntDigits {
				return 0, p.fail(start, "integer has %d digits, more than Python's limit of %d", intDigits, maxIntDigits)
			}
			return p.add(n), nil
		}
		if intDigits <= 15 {
			// Below 10^15 < 2^53 the double holds the integer exactly
			// and JCS prints it as written.
			n.flags |= flagExact
			return p.add(n), nil
		}
	}
	f, err := strconv.ParseFloat(string(p.src[start:i]), 64)
	if err != nil || math.IsInf(f, 0) {
		// The grammar is checked, so the only error left is range.
		return 0, &SyntaxError{Offset: int64(start), Msg: "number overflows a double", numberRange: isInt}
	}
	n.setFloat(f)
	return p.add(n), nil
}
