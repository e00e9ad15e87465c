package canonical

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// payloadGen writes random, valid, duplicate-free JSON text exercising what
// canonicalization must get right: nesting, member order, every kind of
// string escape, astral and control characters, names that sort differently
// by code point and by UTF-16, floats across all magnitudes spelled many
// ways, and integers far beyond a double. It is deterministic for a seed.
type payloadGen struct {
	r        *rand.Rand
	maxDepth int
	// bigInts allows integer literals a double cannot hold (Python form
	// only; JCS rejects them).
	bigInts bool
}

func newPayloadGen(seed uint64, bigInts bool) *payloadGen {
	return &payloadGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), maxDepth: 4, bigInts: bigInts}
}

func (g *payloadGen) payload() []byte {
	var b strings.Builder
	g.ws(&b)
	g.value(&b, 0)
	g.ws(&b)
	return []byte(b.String())
}

// ws writes optional insignificant whitespace (never a newline, so payloads
// fit on one line).
func (g *payloadGen) ws(b *strings.Builder) {
	if g.r.IntN(4) != 0 {
		return
	}
	for range g.r.IntN(3) + 1 {
		b.WriteByte(" \t\r"[g.r.IntN(3)])
	}
}

func (g *payloadGen) value(b *strings.Builder, depth int) {
	n := g.r.IntN(100)
	if depth >= g.maxDepth && n < 35 {
		n += 35
	}
	switch {
	case n < 20:
		g.object(b, depth+1)
	case n < 35:
		g.array(b, depth+1)
	case n < 55:
		g.str(b, g.text())
	case n < 70:
		b.WriteString(g.integer())
	case n < 92:
		b.WriteString(g.float())
	default:
		b.WriteString([]string{"true", "false", "null"}[g.r.IntN(3)])
	}
}

func (g *payloadGen) object(b *strings.Builder, depth int) {
	b.WriteByte('{')
	seen := map[string]bool{}
	n := g.r.IntN(7)
	if g.r.IntN(20) == 0 {
		n = 20 + g.r.IntN(30)
	}
	for i := 0; i < n; i++ {
		k := g.name()
		if seen[k] {
			continue
		}
		seen[k] = true
		if len(seen) > 1 {
			b.WriteByte(',')
		}
		g.ws(b)
		g.str(b, k)
		g.ws(b)
		b.WriteByte(':')
		g.ws(b)
		g.value(b, depth)
		g.ws(b)
	}
	b.WriteByte('}')
}

func (g *payloadGen) array(b *strings.Builder, depth int) {
	b.WriteByte('[')
	for i := range g.r.IntN(6) {
		if i > 0 {
			b.WriteByte(',')
		}
		g.ws(b)
		g.value(b, depth)
		g.ws(b)
	}
	b.WriteByte(']')
}

// awkwardNames sort differently by bytes, code points and UTF-16 units, or
// look like other things.
var awkwardNames = []string{
	"", " ", "\x00", "\x1f", "\x7f", "a", "A", "aa", "a\x00", "1", "10", "2", "-1", "true", "null",
	"é", "e\u0301", "\u00ff", "\u0100", "\u20ac", "\ue000", "\uffff", "\ufb33", "\U0001f600", "\U0001f602",
	"\U00010000", "\U0010ffff", "~", "/", "~0", "~1", "\"", "\\", "</script>", "\u2028", "\u2029",
}

func (g *payloadGen) name() string {
	if g.r.IntN(2) == 0 {
		return awkwardNames[g.r.IntN(len(awkwardNames))]
	}
	return g.text()
}

// text returns a random string of characters from every range that matters.
func (g *payloadGen) text() string {
	var b strings.Builder
	n := g.r.IntN(12)
	if g.r.IntN(30) == 0 {
		n = 100 + g.r.IntN(200)
	}
	for range n {
		var r rune
		switch g.r.IntN(10) {
		case 0, 1, 2:
			r = rune(0x20 + g.r.IntN(0x5f)) // printable ASCII
		case 3:
			r = rune(g.r.IntN(0x20)) // control characters
		case 4:
			r = []rune{'"', '\\', '/', 0x7f, '\b', '\f', '\n', '\r', '\t'}[g.r.IntN(9)]
		case 5:
			r = rune(0x80 + g.r.IntN(0x780)) // two-byte UTF-8
		case 6:
			r = rune(0x800 + g.r.IntN(0xD800-0x800)) // three-byte, below surrogates
		case 7:
			r = rune(0xE000 + g.r.IntN(0x2000)) // three-byte, above surrogates
		default:
			r = rune(0x10000 + g.r.IntN(0x100000)) // astral
		}
		b.WriteRune(r)
	}
	return b.String()
}

// str writes s as a JSON string, choosing for each character whether to
// write it as it is or escaped, and how.
// shortEscapes are the two-character escapes JSON allows.
var shortEscapes = map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}

func (g *payloadGen) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		mustEscape := r < 0x20 || r == '"' || r == '\\'
		if !mustEscape && g.r.IntN(4) != 0 {
			b.WriteRune(r)
			continue
		}
		if e, ok := shortEscapes[r]; ok && g.r.IntN(2) == 0 {
			b.WriteString(e)
			continue
		}
		hexFmt := func(u rune) {
			h := strconv.FormatInt(int64(u)+0x10000, 16)[1:]
			if g.r.IntN(2) == 0 {
				h = strings.ToUpper(h)
			}
			b.WriteString(`\u` + h)
		}
		if r >= 0x10000 {
			r -= 0x10000
			hexFmt(0xD800 + r>>10)
			hexFmt(0xDC00 + r&0x3ff)
		} else {
			hexFmt(r)
		}
	}
	b.WriteByte('"')
}

func (g *payloadGen) digits(n int) string {
	var b strings.Builder
	b.WriteByte(byte('1' + g.r.IntN(9)))
	for range n - 1 {
		b.WriteByte(byte('0' + g.r.IntN(10)))
	}
	return b.String()
}

func (g *payloadGen) integer() string {
	sign := ""
	if g.r.IntN(3) == 0 {
		sign = "-"
	}
	switch n := g.r.IntN(20); {
	case n == 0:
		return sign + "0"
	case n < 12:
		return sign + g.digits(1+g.r.IntN(15))
	case n < 17 || !g.bigInts:
		return sign + g.digits(16+g.r.IntN(3)) // beyond 2^53, within a double
	case n < 19:
		return sign + g.digits(19+g.r.IntN(300))
	default:
		return sign + g.digits(300+g.r.IntN(500))
	}
}

// float returns a number literal with a fraction or an exponent that reads
// as a finite double.
func (g *payloadGen) float() string {
	for {
		s := g.floatLiteral()
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) {
			return s
		}
	}
}

func (g *payloadGen) floatLiteral() string {
	sign := ""
	if g.r.IntN(3) == 0 {
		sign = "-"
	}
	switch g.r.IntN(8) {
	case 0:
		// Boundaries of repr's and ECMAScript's notations.
		return sign + []string{"0.0", "1.0", "1e-4", "1e-5", "1e-6", "1e-7", "1e15", "1e16", "1e17", "1e20", "1e21", "1e22",
			"9.999999999999999e15", "0.1", "0.5", "2.5", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308",
			"9007199254740993.0", "1E2", "1e+2", "1e-02", "0e0", "123.456e-2"}[g.r.IntN(25)]
	case 1, 2:
		// Any finite double, spelled the shortest way.
		f := math.Float64frombits(g.r.Uint64())
		for math.IsNaN(f) || math.IsInf(f, 0) {
			f = math.Float64frombits(g.r.Uint64())
		}
		s := strconv.FormatFloat(f, 'e', -1, 64)
		if g.r.IntN(2) == 0 {
			s = strconv.FormatFloat(f, 'e', 16+g.r.IntN(5), 64) // more digits than needed
		}
		return s
	case 3:
		// A double of moderate size written out in full.
		f := g.r.NormFloat64() * math.Pow(10, float64(g.r.IntN(40)-20))
		return strconv.FormatFloat(f, 'f', -1, 64) + ".0"[:2*g.r.IntN(2)]
	default:
		// Decimal text with more digits than a double holds, so reading
		// it must round correctly.
		s := sign + g.digits(1+g.r.IntN(25))
		if g.r.IntN(2) == 0 {
			s = sign + "0"
		}
		s += "." + g.digits(1+g.r.IntN(20))
		if g.r.IntN(2) == 0 {
			s += []string{"e", "E", "e+", "e-", "E-"}[g.r.IntN(5)] + strconv.Itoa(g.r.IntN(330))
		}
		return s
	}
}
