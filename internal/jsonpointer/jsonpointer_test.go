package jsonpointer

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDecodesTokensAndRefusesMalformedPointers(t *testing.T) {
	for s, want := range map[string][]string{
		"":       nil,
		"/":      {""},
		"/a/b":   {"a", "b"},
		"/a~1b":  {"a/b"},
		"/m~0n":  {"m~n"},
		"/~01":   {"~1"},
		"/0/-/x": {"0", "-", "x"},
	} {
		toks, err := Parse(s)
		require.NoError(t, err, s)
		require.Equal(t, want, toks, s)
	}
	for _, s := range []string{"a", "/a~", "/a~2", "/\xff"} {
		_, err := Parse(s)
		require.Error(t, err, s)
	}
}

func TestGetResolvesRFC6901Examples(t *testing.T) {
	var doc any
	require.NoError(t, json.Unmarshal([]byte(`{"foo":["bar","baz"],"":0,"a/b":1,"m~n":8,"n":null}`), &doc))
	tests := []struct {
		pointer string
		want    any
		ok      bool
	}{
		{"/foo/0", "bar", true},
		{"/foo/1", "baz", true},
		{"/", 0.0, true},
		{"/a~1b", 1.0, true},
		{"/m~0n", 8.0, true},
		{"/n", nil, true},
		{"/foo/2", nil, false},
		{"/foo/01", nil, false},
		{"/foo/-", nil, false},
		{"/missing", nil, false},
		{"/foo/0/deeper", nil, false},
	}
	for _, tt := range tests {
		toks, err := Parse(tt.pointer)
		require.NoError(t, err)
		v, ok := Get(doc, toks)
		require.Equal(t, tt.ok, ok, tt.pointer)
		require.Equal(t, tt.want, v, tt.pointer)
	}
	whole, ok := Get(doc, nil)
	require.True(t, ok)
	require.Equal(t, doc, whole)
}
