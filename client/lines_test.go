package client

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// readAll reads every item of text with a line limit.
func readAll(t *testing.T, r io.Reader, max int) []Item {
	t.Helper()
	lr := NewLineReader(r, max)
	out := slices.Collect(lr.Items())
	require.NoError(t, lr.Err())
	return out
}

func TestLineReaderNumbersPhysicalLinesAndSkipsBlankOnes(t *testing.T) {
	text := "{\"a\":1}\r\n\n  \t\r\n{\"b\":2}\n\n{\"c\":3}"
	got := readAll(t, strings.NewReader(text), 100)
	require.Equal(t, []Item{
		{Line: 1, Payload: []byte(`{"a":1}`)},
		{Line: 4, Payload: []byte(`{"b":2}`)},
		{Line: 6, Payload: []byte(`{"c":3}`)},
	}, got)
}

func TestLineReaderReportsLongLinesAndReadsOn(t *testing.T) {
	long := strings.Repeat("x", 300_000) // longer than the read buffer
	tests := []struct {
		name    string
		max     int
		text    string
		wantErr []bool // per line: over the limit
	}{
		{name: "a line at the limit is kept", max: 300_000, text: long + "\n{}\n", wantErr: []bool{false, false}},
		{name: "a line at the limit with CRLF is kept", max: 300_000, text: long + "\r\n{}\n", wantErr: []bool{false, false}},
		{name: "a line one byte over is invalid", max: 299_999, text: long + "\n{}\n", wantErr: []bool{true, false}},
		{name: "a last line without newline over the limit is invalid", max: 10, text: "{}\n" + long, wantErr: []bool{false, true}},
		{name: "a short line over a tiny limit is invalid", max: 3, text: "{\"a\":1}\n{}\n", wantErr: []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte per read: lines are assembled from many reads.
			got := readAll(t, iotest.HalfReader(strings.NewReader(tt.text)), tt.max)
			require.Len(t, got, len(tt.wantErr))
			for i, it := range got {
				require.Equal(t, int64(i+1), it.Line)
				require.Equal(t, tt.wantErr[i], errors.Is(it.Err, ErrLineTooLong), "line %d: %v", it.Line, it.Err)
				if it.Err != nil {
					require.Nil(t, it.Payload, "an over-long line is not kept")
					require.Contains(t, it.Err.Error(), "bytes, over the limit of")
				}
			}
		})
	}
}

func TestLineReaderCountsBytesRead(t *testing.T) {
	text := "{}\n\n{\"a\":1}\n"
	lr := NewLineReader(strings.NewReader(text), 100)
	for range lr.Items() {
	}
	require.Equal(t, int64(len(text)), lr.BytesRead())
}

func TestLineReaderZeroLimitIsTheDefault(t *testing.T) {
	long := strings.Repeat("x", DefaultMaxLineBytes)
	got := readAll(t, strings.NewReader(long+"\n"+long+"x\n"), 0)
	require.Len(t, got, 2)
	require.NoError(t, got[0].Err)
	require.ErrorIs(t, got[1].Err, ErrLineTooLong)
}

func TestLineReaderCountsTheLinesLeftWithoutKeepingThem(t *testing.T) {
	long := strings.Repeat("x", 300_000) // longer than the read buffer and the limit
	spaces := strings.Repeat(" ", 300_000)
	tests := []struct {
		name string
		text string
		want int64
	}{
		{name: "blank lines are not counted", text: "{}\n\n  \r\n{}\n", want: 2},
		{name: "a last line without newline is counted", text: "{}\n{}", want: 2},
		{name: "a line over the limit is counted", text: long + "\n{}\n", want: 2},
		{name: "blank but over the limit is counted, as Items reports it invalid", text: spaces + "\n" + spaces[:50] + "\r\n", want: 1},
		{name: "nothing left is none", text: "", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := NewLineReader(iotest.HalfReader(strings.NewReader("{}\n"+tt.text)), 100)
			for it := range lr.Items() {
				require.Equal(t, int64(1), it.Line)
				break
			}
			n, err := lr.Remaining()
			require.NoError(t, err)
			require.Equal(t, tt.want, n)
			require.Equal(t, int64(len(tt.text)+3), lr.BytesRead())
			n, err = lr.Remaining()
			require.NoError(t, err)
			require.Equal(t, int64(0), n, "the end of the input is not read twice")
		})
	}

	t.Run("it counts what Items would have yielded", func(t *testing.T) {
		text := "{}\n\n" + long + "\n \t\n" + spaces + "\r\nnot json\n{}"
		require.Len(t, readAll(t, strings.NewReader(text), 100), 5)
		lr := NewLineReader(strings.NewReader(text), 100)
		n, err := lr.Remaining()
		require.NoError(t, err)
		require.Equal(t, int64(5), n)
	})
}

func TestLineReaderReportsReadErrors(t *testing.T) {
	r := io.MultiReader(strings.NewReader("{}\n{\"a\":1}\n"), iotest.ErrReader(errors.New("disk on fire")))
	lr := NewLineReader(r, 100)
	got := slices.Collect(lr.Items())
	require.Len(t, got, 2, "the lines before the error are items")
	require.ErrorContains(t, lr.Err(), "disk on fire")
	require.ErrorContains(t, lr.Err(), "at line 3")
	n, err := lr.Remaining()
	require.NoError(t, err)
	require.Equal(t, int64(0), n, "the input ended with the error")
}
