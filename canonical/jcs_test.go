package canonical

import (
	"bufio"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// jcsTestdata is the shared RFC 8785 conformance data, seen from this package.
const jcsTestdata = "../../shared/testdata/jcs"

func requireTestdata(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(jcsTestdata); err != nil {
		t.Skipf("shared JCS test data not found at %s (a sibling checkout ../shared of the repository): %v", jcsTestdata, err)
	}
}

func TestJCSConformanceCasesMatchExpectedBytes(t *testing.T) {
	requireTestdata(t)
	for _, set := range []string{"", "extra-gowebpki"} {
		inputs, err := filepath.Glob(filepath.Join(jcsTestdata, set, "input", "*.json"))
		require.NoError(t, err)
		require.NotEmpty(t, inputs)
		for _, in := range inputs {
			name := filepath.Join(set, filepath.Base(in))
			t.Run(name, func(t *testing.T) {
				src, err := os.ReadFile(in)
				require.NoError(t, err)
				want, err := os.ReadFile(filepath.Join(jcsTestdata, set, "output", filepath.Base(in)))
				require.NoError(t, err)
				got, err := JCS(src)
				require.NoError(t, err)
				require.Equal(t, string(want), string(got))
				again, err := JCS(got)
				require.NoError(t, err)
				require.Equal(t, string(got), string(again), "canonical bytes are a fixed point")
			})
		}
	}
}

func TestJCSNumbersMatchECMAScriptOnAllTestLines(t *testing.T) {
	requireTestdata(t)
	f, err := os.Open(filepath.Join(jcsTestdata, "numbers", "es6testfile-10k.txt"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := 0
	for sc.Scan() {
		lines++
		hexBits, want, ok := strings.Cut(sc.Text(), ",")
		require.True(t, ok, "line %d: %q", lines, sc.Text())
		bits, err := strconv.ParseUint(hexBits, 16, 64)
		require.NoError(t, err, "line %d", lines)
		v := math.Float64frombits(bits)
		require.Equal(t, want, string(appendES(nil, v)), "line %d: bits %s", lines, hexBits)

		// The same number as JSON text, spelled the way Go spells it,
		// canonicalizes to the same bytes.
		got, err := JCS([]byte(strconv.FormatFloat(v, 'g', -1, 64)))
		require.NoError(t, err, "line %d", lines)
		require.Equal(t, want, string(got), "line %d: bits %s", lines, hexBits)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, 10000, lines)
}

func TestJCSWritesCanonicalBytes(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"top-level scalars stand alone", ` 42 `, `42`},
		{"negative zero prints as zero", `[-0,-0.0,0e5,-0e-5]`, `[0,0,0,0]`},
		{"integers stay as written below 2^53", `[9007199254740991,-123456789012345]`, `[9007199254740991,-123456789012345]`},
		{"large integers print via the double", `[12345678901234567890,1e21,1e20]`, `[12345678901234567000,1e+21,100000000000000000000]`},
		{"small numbers switch to exponent below 1e-6", `[0.000001,0.0000001,1E-7]`, `[0.000001,1e-7,1e-7]`},
		{"underflow reads as zero", `[1e-400,-1e-400]`, `[0,0]`},
		{"escapes decode and re-escape minimally", `"\u0041\/\u00e9\ud83d\ude00\u001F\u007f\b\f\n\r\t\"\\"`, "\"A/é😀\\u001f\u007f\\b\\f\\n\\r\\t\\\"\\\\\""},
		{"raw unicode is kept", `"é😀"`, `"é😀"`},
		{"names sort by UTF-16 code units", `{"\uffff":1,"😀":2,"a":3}`, `{"a":3,"😀":2,"` + "\uffff" + `":1}`},
		{"names compare after unescaping", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"empty containers", `[{},[],""]`, `[{},[],""]`},
		{"nested objects sort at every level", `{"b":{"d":1,"c":2},"a":[{"z":0,"y":1}]}`, `{"a":[{"y":1,"z":0}],"b":{"c":2,"d":1}}`},
		{"whitespace of every kind is dropped", " \t\r\n{ \"a\" :\t[ 1 , 2 ] }\n", `{"a":[1,2]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := JCS([]byte(c.in))
			require.NoError(t, err)
			require.Equal(t, c.want, string(got))
		})
	}
}

func TestPythonWritesJSONDumpsBytes(t *testing.T) {
	// Expected bytes are Python 3's json.dumps(json.loads(in),
	// sort_keys=True, separators=(",", ":")).
	cases := []struct {
		name, in, want string
	}{
		{"ints and floats stay apart", `[1,1.0,1e5,1E+2,-0,-0.0,0.0]`, `[1,1.0,100000.0,100.0,0,-0.0,0.0]`},
		{"float repr switches to exponent below 1e-4", `[0.0001,0.00001,1.5e-7]`, `[0.0001,1e-05,1.5e-07]`},
		{"float repr switches to exponent from 1e16", `[1e15,1e16,123456789012345678.0,1e300]`, `[1000000000000000.0,1e+16,1.2345678901234568e+17,1e+300]`},
		{"integers are exact however large", `[123456789012345678901234567890,-98765432109876543210]`, `[123456789012345678901234567890,-98765432109876543210]`},
		{"shortest float digits", `[0.1,3.141592653589793238,5e-324,1.7976931348623157e308]`, `[0.1,3.141592653589793,5e-324,1.7976931348623157e+308]`},
		{"underflow keeps its sign", `[1e-400,-1e-400]`, `[0.0,-0.0]`},
		{"non-ASCII escapes as lowercase hex", `"é€😀"`, `"\u00e9\u20ac\ud83d\ude00"`},
		{"DEL and controls escape", "\"\u007f\\u0001\\t\\/\"", `"\u007f\u0001\t/"`},
		{"names sort by code point", `{"😀":2,"\uffff":1,"a":3}`, `{"a":3,"\uffff":1,"\ud83d\ude00":2}`},
		{"top-level scalars stand alone", `"x"`, `"x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Python([]byte(c.in))
			require.NoError(t, err)
			require.Equal(t, c.want, string(got))
		})
	}
}

func TestMalformedInputIsRejectedAtItsOffset(t *testing.T) {
	cases := []struct {
		name   string
		in     string
		offset int64
		jcsOK  bool // only the Python form rejects it
	}{
		{"empty input", ``, 0, false},
		{"only whitespace", "  \n", 3, false},
		{"trailing data", `{} {}`, 3, false},
		{"trailing comma in array", `[1,]`, 3, false},
		{"trailing comma in object", `{"a":1,}`, 7, false},
		{"truncated object", `{"a":`, 5, false},
		{"truncated array", `[1`, 2, false},
		{"truncated string", `"abc`, 4, false},
		{"truncated escape", `"\u12`, 5, false},
		{"truncated literal", `tru`, 3, false},
		{"misspelled literal", `nul1`, 3, false},
		{"leading zero", `[01]`, 1, false},
		{"leading zero after minus", `-012`, 1, false},
		{"plus sign", `+1`, 0, false},
		{"bare minus", `-`, 1, false},
		{"fraction without digits", `1.`, 2, false},
		{"exponent without digits", `1e+`, 3, false},
		{"leading decimal point", `.5`, 0, false},
		{"NaN", `[NaN]`, 1, false},
		{"Infinity", `Infinity`, 0, false},
		{"minus Infinity", `[-Infinity]`, 1, false},
		{"float overflowing a double", `[1e400]`, 1, false},
		{"negative float overflowing a double", `-1.8e308`, 0, false},
		{"duplicate names", `{"a":1,"b":2,"a":3}`, 13, false},
		{"duplicate names after unescaping", `{"a":1,"\u0061":2}`, 7, false},
		{"duplicate names in a large object", `{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"b":2}`, 85, false},
		{"invalid UTF-8", "\"a\xffb\"", 2, false},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", 1, false},
		{"overlong UTF-8", "\"\xc0\xaf\"", 1, false},
		{"lone high surrogate", `"\ud83d"`, 1, false},
		{"high surrogate before a non-surrogate", `"\ud83d\u0041"`, 1, false},
		{"lone low surrogate", `"\ude00"`, 1, false},
		{"reversed surrogates", `"\ude00\ud83d"`, 1, false},
		{"raw control character", "\"a\tb\"", 2, false},
		{"invalid escape", `"\x41"`, 1, false},
		{"single quotes", `{'a':1}`, 1, false},
		{"unquoted name", `{a:1}`, 1, false},
		{"missing colon", `{"a" 1}`, 5, false},
		{"byte order mark", "\ufeff{}", 0, false},
		{"comment", `[1 /* c */]`, 3, false},
		{"integer with 4301 digits", strings.Repeat("9", 4301), 0, false},
		{"integer overflowing a double", strings.Repeat("9", 400), 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, form := range []Form{FormJCS, FormPython} {
				out, err := form.Canonicalize([]byte(c.in))
				if form == FormJCS && c.jcsOK {
					// The one documented difference: JCS reads every
					// number as a double, Python keeps integers exact.
					var se *SyntaxError
					require.ErrorAs(t, err, &se)
					require.True(t, se.numberRange)
					continue
				}
				if c.jcsOK {
					require.NoError(t, err, string(form))
					require.Equal(t, c.in, string(out))
					continue
				}
				require.Error(t, err, "%s accepted %q as %q", form, c.in, out)
				var se *SyntaxError
				require.ErrorAs(t, err, &se, string(form))
				require.Equal(t, c.offset, se.Offset, "%s: %v", form, err)
			}
		})
	}
}

func TestSyntaxErrorNamesOffsetAndProblem(t *testing.T) {
	_, err := JCS([]byte(`{"a":1,"a":2}`))
	require.EqualError(t, err, `canonical: offset 7: duplicate member name "a"`)
	_, err = Python([]byte(`[NaN]`))
	require.EqualError(t, err, `canonical: offset 1: NaN is not JSON, want a number`)
	_, err = JCS([]byte(`"\ud800x"`))
	require.EqualError(t, err, `canonical: offset 1: lone surrogate \ud800: not followed by a low surrogate`)
}

func TestNestingBeyondMaxDepthIsAnErrorNotACrash(t *testing.T) {
	for _, form := range []Form{FormJCS, FormPython} {
		t.Run(string(form)+" accepts MaxDepth levels", func(t *testing.T) {
			in := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
			out, err := form.Canonicalize([]byte(in))
			require.NoError(t, err)
			require.Equal(t, in, string(out))
			in = strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
			out, err = form.Canonicalize([]byte(in))
			require.NoError(t, err)
			require.Equal(t, in, string(out))
		})
		t.Run(string(form)+" rejects 100000 levels at the first level too deep", func(t *testing.T) {
			for _, open := range []string{"[", `{"a":`} {
				in := strings.Repeat(open, 100000)
				_, err := form.Canonicalize([]byte(in))
				var se *SyntaxError
				require.ErrorAs(t, err, &se)
				require.Equal(t, int64(MaxDepth*len(open)), se.Offset)
				require.Equal(t, "nesting deeper than 512 levels", se.Msg)
			}
		})
	}
}

func TestParseFormAcceptsKnownNamesOnly(t *testing.T) {
	for in, want := range map[string]Form{"": FormJCS, "jcs": FormJCS, "python": FormPython} {
		got, err := ParseForm(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ParseForm("JCS")
	require.ErrorIs(t, err, ErrUnknownForm)
	_, err = Form("yaml").Canonicalize([]byte(`{}`))
	require.ErrorIs(t, err, ErrUnknownForm)
	require.EqualError(t, err, `canonical: unknown form "yaml": want jcs or python`)
}

func TestMarshalCanonicalizesGoValues(t *testing.T) {
	type rec struct {
		Title   string            `json:"title"`
		Authors []string          `json:"authors"`
		Year    int               `json:"year"`
		Score   float64           `json:"score"`
		Extra   map[string]string `json:"extra,omitempty"`
	}
	got, err := Marshal(rec{Title: "<Ünïcode & co>", Authors: []string{"b", "a"}, Year: 2024, Score: 1e-7, Extra: map[string]string{"z": "1", "a": "2"}})
	require.NoError(t, err)
	require.Equal(t, `{"authors":["b","a"],"extra":{"a":"2","z":"1"},"score":1e-7,"title":"<Ünïcode & co>","year":2024}`, string(got))

	_, err = Marshal(math.NaN())
	require.Error(t, err)
	var se *SyntaxError
	require.False(t, errors.As(err, &se), "an encoding failure is not a syntax error")
}

func TestKeyIsLowercaseHexSHA256(t *testing.T) {
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", Key(nil))
	require.Equal(t, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", Key([]byte("{}")))
}
