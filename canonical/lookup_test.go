package canonical

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/jsonpointer"
)

func TestStringAtFindsTheFirstPointerNamingAString(t *testing.T) {
	doc := []byte(`{"id":"","n":7,"meta":{"a/b":"slash","t~x":"tilde","esc":"caf\u00e9 \"q\""},"list":["zero",{"deep":"one"}]}`)
	for _, c := range []struct {
		pointers []string
		want     string
		ok       bool
	}{
		{[]string{"/id", "/meta/esc"}, `café "q"`, true}, // an empty string is passed over
		{[]string{"/meta/a~1b"}, "slash", true},
		{[]string{"/meta/t~0x"}, "tilde", true},
		{[]string{"/list/0"}, "zero", true},
		{[]string{"/list/1/deep"}, "one", true},
		{[]string{"/n", "/list", "/meta"}, "", false}, // a number, an array, an object
		{[]string{"/missing", "/list/2", "/list/01", "/n/x"}, "", false},
		{[]string{"no-slash", "/meta/esc"}, `café "q"`, true}, // a malformed pointer is passed over
		{nil, "", false},
	} {
		got, ok, err := StringAt(doc, c.pointers)
		require.NoError(t, err)
		require.Equal(t, c.ok, ok, "%q", c.pointers)
		require.Equal(t, c.want, got, "%q", c.pointers)
	}
}

func TestStringAtRefusesWhatItCannotParse(t *testing.T) {
	for _, doc := range []string{``, `{`, `{"id":"a","id":"b"}`, `{"id":"a"} x`, `{"n":1e400}`, "{\"id\":\"\xff\"}"} {
		_, ok, err := StringAt([]byte(doc), []string{"/id"})
		var se *SyntaxError
		require.ErrorAs(t, err, &se, "%q", doc)
		require.False(t, ok)
	}
}

// StringAt agrees with decoding into Go values and walking them, for every
// string in thousands of random documents and for pointers that miss.
func TestStringAtAgreesWithEncodingJSON(t *testing.T) {
	g := newPayloadGen(11, false)
	checked := 0
	for range 1500 {
		doc := g.payload()
		var v any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&v), "%s", doc)
		var ptrs []string
		walkPointers(v, "", func(p string) { ptrs = append(ptrs, p) })
		for _, p := range append(ptrs, "/nothing-here", "/0/nothing") {
			want, wantOK := "", false
			if toks, err := jsonpointer.Parse(p); err == nil {
				if s, isStr := must(jsonpointer.Get(v, toks)).(string); isStr && s != "" {
					want, wantOK = s, true
				}
			}
			got, ok, err := StringAt(doc, []string{p})
			require.NoError(t, err, "%s", doc)
			require.Equal(t, wantOK, ok, "%s at %q", doc, p)
			require.Equal(t, want, got, "%s at %q", doc, p)
			checked++
		}
	}
	require.Greater(t, checked, 5000)
}

func must(v any, _ bool) any { return v }

// walkPointers calls f with the pointer of every value in v.
func walkPointers(v any, at string, f func(string)) {
	if at != "" {
		f(at)
	}
	switch v := v.(type) {
	case map[string]any:
		for k, m := range v {
			walkPointers(m, at+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), f)
		}
	case []any:
		for i, e := range v {
			walkPointers(e, at+"/"+strconv.Itoa(i), f)
		}
	}
}

// IDAt reads an identifier a server answers as a string or an integer; a
// number the parser holds only as a double is left to the caller.
func TestIDAtReadsAStringOrAnInteger(t *testing.T) {
	doc := []byte(`{"s":"a","i":42,"neg":-7,"z":-0,"f":1.5,"e":1e3,"long":12345678901234567890,"o":{}}`)
	for _, c := range []struct {
		ptr  string
		want string
		ok   bool
		err  error
	}{
		{"/s", "a", true, nil}, {"/i", "42", true, nil}, {"/neg", "-7", true, nil}, {"/z", "0", true, nil},
		{"/f", "", false, ErrInexactNumber}, {"/e", "", false, ErrInexactNumber}, {"/long", "", false, ErrInexactNumber},
		{"/o", "", false, nil}, {"/none", "", false, nil},
	} {
		got, ok, err := IDAt(doc, []string{c.ptr})
		require.Equal(t, c.err, err, c.ptr)
		require.Equal(t, c.ok, ok, c.ptr)
		require.Equal(t, c.want, got, c.ptr)
	}
}
