package main

import (
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
)

// readAll reads every line of text with a line limit.
func readAll(t *testing.T, r io.Reader, max int) []inputLine {
	t.Helper()
	lr := newLineReader(r, max)
	var out []inputLine
	for {
		ln, err := lr.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out = append(out, ln)
	}
}

func TestLineReaderNumbersPhysicalLinesAndSkipsBlankOnes(t *testing.T) {
	text := "{\"a\":1}\r\n\n  \t\r\n{\"b\":2}\n\n{\"c\":3}"
	got := readAll(t, strings.NewReader(text), 100)
	require.Equal(t, []inputLine{
		{num: 1, text: []byte(`{"a":1}`)},
		{num: 4, text: []byte(`{"b":2}`)},
		{num: 6, text: []byte(`{"c":3}`)},
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
			for i, ln := range got {
				require.Equal(t, int64(i+1), ln.num)
				require.Equal(t, tt.wantErr[i], errors.Is(ln.err, errLineTooLong), "line %d: %v", ln.num, ln.err)
				if ln.err != nil {
					require.Nil(t, ln.text, "an over-long line is not kept")
					require.Contains(t, ln.err.Error(), "--max-line-bytes")
				}
			}
		})
	}
}

func TestLineReaderCountsBytesRead(t *testing.T) {
	text := "{}\n\n{\"a\":1}\n"
	lr := newLineReader(strings.NewReader(text), 100)
	for {
		if _, err := lr.next(); err != nil {
			break
		}
	}
	require.Equal(t, int64(len(text)), lr.read.Load())
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
		{name: "blank but over the limit is counted, as next reports it invalid", text: spaces + "\n" + spaces[:50] + "\r\n", want: 1},
		{name: "nothing left is none", text: "", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := newLineReader(iotest.HalfReader(strings.NewReader("{}\n"+tt.text)), 100)
			ln, err := lr.next()
			require.NoError(t, err)
			require.Equal(t, int64(1), ln.num)
			n, err := lr.rest()
			require.NoError(t, err)
			require.Equal(t, tt.want, n)
			require.Equal(t, int64(len(tt.text)+3), lr.read.Load())
			n, err = lr.rest()
			require.NoError(t, err)
			require.Equal(t, int64(0), n, "the end of the input is not read twice")
		})
	}

	t.Run("it counts what next would have returned", func(t *testing.T) {
		text := "{}\n\n" + long + "\n \t\n" + spaces + "\r\nnot json\n{}"
		require.Len(t, readAll(t, strings.NewReader(text), 100), 5)
		lr := newLineReader(strings.NewReader(text), 100)
		n, err := lr.rest()
		require.NoError(t, err)
		require.Equal(t, int64(5), n)
	})
}

func TestLineReaderReturnsReadErrors(t *testing.T) {
	lr := newLineReader(iotest.ErrReader(errors.New("disk on fire")), 100)
	_, err := lr.next()
	require.ErrorContains(t, err, "disk on fire")
}

func TestDatasetLinesMustHaveMetadataAndFiles(t *testing.T) {
	tests := []struct {
		name, line, wantErr string
	}{
		{name: "metadata and files are accepted", line: `{"metadata":{"t":1},"files":["a"]}`},
		{name: "missing metadata is refused", line: `{"files":["a"]}`, wantErr: `needs "metadata"`},
		{name: "an empty file list is refused", line: `{"metadata":{},"files":[]}`, wantErr: `non-empty "files"`},
		{name: "an unknown member is refused", line: `{"metadata":{},"files":["a"],"extra":1}`, wantErr: "unknown field"},
		{name: "duplicate names are refused", line: `{"metadata":{},"metadata":{},"files":["a"]}`, wantErr: "duplicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := parseDatasetLine(canonical.FormJCS, []byte(tt.line))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, `{"t":1}`, string(d.Metadata))
				require.Equal(t, []string{"a"}, d.Files)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestProgressBarShowsCountsRateAndETA(t *testing.T) {
	var out syncBuffer
	var read atomic.Int64
	p := &progress{w: &out, tty: true, width: func() int { return 200 }, size: 1000, read: &read, done: make(chan struct{})}
	p.start = time.Now().Add(-time.Second)
	read.Store(250)
	p.add(clientResult("created"))
	p.add(clientResult("replayed"))
	p.add(clientResult("invalid"))
	p.tick()
	p.logf("line 3: invalid: not JSON")
	text := out.String()
	require.Contains(t, text, "\r\033[K[=====")
	require.Regexp(t, ` 25% \d+ items/s; ETA \d+s \| 3 items: 2 done \(1 created, 0 existing, 1 replayed\), 0 failed, 1 invalid, 0 unresolved`, text)
	require.Contains(t, text, "\r\033[Kline 3: invalid: not JSON\n\r\033[K[", "a log line clears the bar and redraws it")

	t.Run("a narrow terminal cuts the counts, not the time left", func(t *testing.T) {
		var out syncBuffer
		p.w, p.width = &out, func() int { return 50 }
		p.tick()
		line := strings.TrimPrefix(out.String(), "\r\033[K")
		require.Len(t, line, 49)
		require.Regexp(t, `^\[=====               \]  25% \d+ items/s; ETA \d+s \| `, line)
	})
}

func clientResult(outcome string) client.ItemResult {
	return client.ItemResult{Result: client.Result{Outcome: client.Outcome(outcome)}}
}

func TestProgressWritesPlainLinesWhenNotATerminal(t *testing.T) {
	var out syncBuffer
	var read atomic.Int64
	read.Store(500)
	p := newProgress(&out, 1000, &read, time.Millisecond)
	p.add(clientResult("created"))
	waitUntil(func() bool { return strings.Contains(out.String(), "progress: 1 item: 1 done") })
	p.stop()
	text := out.String()
	require.NotContains(t, text, "\r", "no bar on a log")
	require.Contains(t, text, "(50% of the input read)")
}
