package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
)

func TestProgressBarShowsCountsRateAndETA(t *testing.T) {
	var out syncBuffer
	var read atomic.Int64
	p := &progress{w: &out, tty: true, width: func() int { return 200 }, size: 1000, read: read.Load, done: make(chan struct{})}
	p.start = time.Now().Add(-time.Second)
	read.Store(250)
	p.itemsRead.Store(3)
	p.add(clientResult("created"))
	p.add(clientResult("replayed"))
	p.add(clientResult("invalid"))
	p.tick()
	p.logf("line 3: invalid: not JSON")
	text := out.String()
	require.Contains(t, text, "\r\033[K[=====")
	require.Regexp(t, ` 25% \d+ items/s; ETA \d+s \| 3 items: 2 done \(1 created, 0 existing, 1 replayed\), 0 failed, 1 invalid, 0 unresolved; 0 requests`, text)
	require.Contains(t, text, "\r\033[Kline 3: invalid: not JSON\n\r\033[K[", "a log line clears the bar and redraws it")
}

// The bar drops detail as the terminal narrows, in a fixed order, and
// keeps the failed and unresolved counts at every width.
func TestProgressBarDropsDetailBeforeTheCountsThatMatter(t *testing.T) {
	p := &progress{size: 1000, read: func() int64 { return 250 }}
	p.itemsRead.Store(2500)
	p.requests.Store(1400)
	p.sum = client.Summary{Total: 2000, Created: 1000, Existing: 100, Replayed: 800, Failed: 37, Invalid: 13, Unresolved: 50}
	for _, tc := range []struct {
		columns int
		want    string
	}{
		{200, "[=====               ]  25% 20 items/s; ETA 11m14s | 2000 items: 1900 done (1000 created, 100 existing, 800 replayed), 37 failed, 13 invalid, 50 unresolved; 1400 requests"},
		{120, "[=====               ]  25% 20 items/s; ETA 11m14s | 2000 items: 1900 done, 37 failed, 13 invalid, 50 unresolved"},
		{80, "25% ETA 11m14s | 2000 items: 1900 done, 37 failed, 13 invalid, 50 unresolved"},
		{40, "1900 done, 37 failed, 50 unresolved"},
		{30, "37 failed, 50 unresolved"},
	} {
		got := p.bar(100*time.Second, tc.columns)
		require.Equal(t, tc.want, got, "%d columns", tc.columns)
		require.Less(t, len(got), tc.columns, "the last column stays free")
	}
}

// The time left is the items still to settle at the pace of the items that
// were sent: replays answered from the store at the start of a run do not
// make the new items look quick.
func TestProgressETACountsTheItemsStillToSend(t *testing.T) {
	// Half the input read after 10 s: 1000 items, of which 900 were
	// replays and 100 were sent. The 1000 items left take 100 s at the
	// pace of those sent; averaging the replays in would say 10 s.
	p := &progress{size: 2000, read: func() int64 { return 1000 }}
	p.itemsRead.Store(1000)
	p.sum = client.Summary{Total: 1000, Replayed: 900, Created: 100}
	eta, ok := p.eta(10 * time.Second)
	require.True(t, ok)
	require.Equal(t, 100*time.Second, eta)

	t.Run("no estimate before an item was sent", func(t *testing.T) {
		p.sum = client.Summary{Total: 900, Replayed: 900}
		_, ok := p.eta(10 * time.Second)
		require.False(t, ok)
	})
	t.Run("no estimate when the input's size is unknown", func(t *testing.T) {
		p := &progress{read: func() int64 { return 1000 }}
		p.itemsRead.Store(10)
		p.sum = client.Summary{Total: 10, Created: 10}
		_, ok := p.eta(10 * time.Second)
		require.False(t, ok)
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

// While dataset files are sent, the progress shows the bytes sent, their
// rate and the time left for the files in flight; a file sent for longer
// than fileLineAfter gets a line of its own, and another when it is done.
func TestProgressShowsTheBytesOfFilesInFlight(t *testing.T) {
	var out syncBuffer
	p := &progress{w: &out, size: 0, read: func() int64 { return 0 }, done: make(chan struct{}), start: time.Now()}
	p.files.logf = p.logf
	key := strings.Repeat("ab", 32)
	p.files.event(client.TransferEvent{Key: key, Label: `file "big.bin"`, Size: 3 << 30, Held: 1 << 30, Begin: true})
	p.files.event(client.TransferEvent{Key: key, Label: `file "big.bin"`, Sent: 512 << 20})
	// As if the first byte went 10 s ago and the file began 5 s ago.
	p.files.first = time.Now().Add(-10 * time.Second)
	p.files.active[key+"\x00"+`file "big.bin"`].began = time.Now().Add(-5 * time.Second)

	p.mu.Lock()
	text := p.countsText(partAll)
	p.mu.Unlock()
	require.Regexp(t, `; 512\.0 MiB sent, 51\.\d MiB/s, 30s left for 1 file; 0 requests$`, text, "1.5 GiB left at 51.2 MiB/s")
	p.files.tick()
	p.files.tick()
	require.Equal(t, "file \"big.bin\" of item "+shortKey(key)+": sending 3.0 GiB, 1.0 GiB of it held from an earlier run\n", out.String(), "one line, once")
	p.files.event(client.TransferEvent{Key: key, Label: `file "big.bin"`, Size: 3 << 30, Done: true})
	require.Contains(t, out.String(), "file \"big.bin\" of item "+shortKey(key)+": 512.0 MiB sent in 5s (")
	require.Equal(t, int64(512<<20), p.files.total())
	require.Empty(t, p.files.active)

	var sum strings.Builder
	printSummary(&sum, client.Summary{Total: 1, Created: 1, Requests: 3}, tail{bytes: p.files.total()}, runOptions{})
	require.Contains(t, sum.String(), "; 3 requests, 0 retries, 512.0 MiB of files sent\n")
}

func TestBytesText(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 5 << 20: "5.0 MiB", 3 << 29: "1.5 GiB", 2 << 40: "2.0 TiB"} {
		require.Equal(t, want, bytesText(n), "%d", n)
	}
}

func TestPartSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"64MiB": 64 << 20, "5GiB": 5 << 30, "8388608": 8388608, "100KiB": 100 << 10, "off": -1} {
		var f sizeFlag
		require.NoError(t, f.Set(in), in)
		require.Equal(t, want, f.n, in)
	}
	for _, in := range []string{"", "0", "-1", "12MB", "lots"} {
		var f sizeFlag
		require.Error(t, f.Set(in), in)
	}
}
