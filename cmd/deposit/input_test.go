package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
)

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
	p := &progress{w: &out, tty: true, width: func() int { return 200 }, size: 1000, read: read.Load, done: make(chan struct{})}
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
	p := newProgress(&out, 1000, read.Load, time.Millisecond)
	p.add(clientResult("created"))
	waitUntil(func() bool { return strings.Contains(out.String(), "progress: 1 item: 1 done") })
	p.stop()
	text := out.String()
	require.NotContains(t, text, "\r", "no bar on a log")
	require.Contains(t, text, "(50% of the input read)")
}
