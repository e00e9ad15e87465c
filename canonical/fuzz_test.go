package canonical

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// fuzzSeeds are inputs worth starting from: every kind of value and escape,
// and the malformed inputs the parser must refuse.
func fuzzSeeds(f *testing.F) {
	for _, s := range []string{
		`{"b":[1,2.5,-0,1e400,"x"],"a":{"\u00e9":null,"é":true}}`,
		`[1,1.0,1e5,123456789012345678901234567890,5e-324,-1.7976931348623157e308]`,
		`"\ud83d\ude00\u0000\u001f\u007f\/\b\f\n\r\t\"\\"`,
		`{"\uffff":1,"😀":2,"\ue000":3,"":4}`,
		`[NaN]`, `[01]`, `{"a":1,"a":2}`, `"\ud800"`, "\"\xff\"", `[1,]`, `{"a"}`, ` `, `tru`, `-`,
		`[[[[[[[[[[]]]]]]]]]]`,
	} {
		f.Add([]byte(s))
	}
	g := newPayloadGen(7, true)
	for range 64 {
		f.Add(g.payload())
	}
}

func FuzzJCS(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		checkForm(t, FormJCS, in)
		checkFormsAgreeOnMalformed(t, in)
	})
}

func FuzzPython(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		checkForm(t, FormPython, in)
		checkFormsAgreeOnMalformed(t, in)
	})
}

// checkForm checks what must hold for any input in one form: errors are
// syntax errors inside the input, canonical bytes are a fixed point, and
// member order and whitespace never change the key.
func checkForm(t *testing.T, form Form, in []byte) {
	out, err := form.Canonicalize(in)
	if err != nil {
		var se *SyntaxError
		require.True(t, errors.As(err, &se), "%s: error is a *SyntaxError: %v", form, err)
		require.GreaterOrEqual(t, se.Offset, int64(0))
		require.LessOrEqual(t, se.Offset, int64(len(in)))
		return
	}
	again, err := form.Canonicalize(out)
	require.NoError(t, err, "%s: canonical bytes %q", form, out)
	require.Equal(t, string(out), string(again), "%s: C(C(x)) == C(x)", form)

	scrambled := scramble(t, form, out)
	re, err := form.Canonicalize(scrambled)
	require.NoError(t, err, "%s: scrambled %q", form, scrambled)
	require.Equal(t, Key(out), Key(re), "%s: member order and whitespace do not change the key: %q", form, scrambled)
}

// checkFormsAgreeOnMalformed checks that the forms reject the same inputs,
// except integers beyond a double, which only JCS rejects.
func checkFormsAgreeOnMalformed(t *testing.T, in []byte) {
	_, jerr := JCS(in)
	_, perr := Python(in)
	if jerr == nil {
		require.NoError(t, perr, "JCS accepts %q", in)
		return
	}
	if perr == nil {
		var se *SyntaxError
		require.True(t, errors.As(jerr, &se))
		require.True(t, se.numberRange, "only Python accepts %q; JCS: %v", in, jerr)
	}
}

// scramble rewrites JSON text with every object's members in reverse order
// and whitespace between all tokens.
func scramble(t *testing.T, form Form, in []byte) []byte {
	var p parser
	require.NoError(t, p.parse(in, form == FormPython))
	return p.emitScrambled([]byte("\n "), p.root)
}

func (p *parser) emitScrambled(out []byte, i int32) []byte {
	n := &p.nodes[i]
	switch n.kind {
	case kindArray:
		out = append(out, "[ "...)
		for j, k := range p.kids[n.off : n.off+n.n] {
			if j > 0 {
				out = append(out, "\t, "...)
			}
			out = p.emitScrambled(out, k)
		}
		return append(out, " ]\r\n"...)
	case kindObject:
		out = append(out, "{\n"...)
		for j := n.off + n.n - 1; j >= n.off; j-- {
			m := &p.mems[j]
			out = p.emitString(out, &m.key)
			out = append(out, " : "...)
			out = p.emitScrambled(out, m.val)
			if j > n.off {
				out = append(out, " ,\n"...)
			}
		}
		return append(out, "\n}"...)
	}
	return append(p.emitValue(out, i), ' ')
}
