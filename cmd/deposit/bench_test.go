package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/internal/pgtest"
)

// BenchmarkRunBinary measures a whole `deposit run` process against a local
// `deposit serve` process: lines per second, the client's peak RSS, the
// time to replay the same file and, alternated with it, the time `deposit
// key` takes on it (replay-x is the first over the second). In the same
// iterations, alternated with the run, a plain loop sends the same
// canonical bodies to a fresh `deposit serve` with If-None-Match: * over
// keep-alive connections at the same concurrency, with no store: run-x is
// the run's time over the loop's. The input has 20,000 lines unless
// DEPOSIT_BENCH_LINES says otherwise; the figures in docs/performance.md come from
//
//	DEPOSIT_BENCH_LINES=1000000 go test -run '^$' -bench RunBinary -benchtime 1x ./cmd/deposit
func BenchmarkRunBinary(b *testing.B) {
	lines := 20000
	if v := os.Getenv("DEPOSIT_BENCH_LINES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("DEPOSIT_BENCH_LINES=%q: want a positive number", v)
		}
		lines = n
	}
	dir := b.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	writeBenchInput(b, input, lines)
	fi, err := os.Stat(input)
	if err != nil {
		b.Fatal(err)
	}

	plainInput := filepath.Join(dir, "plain.txt")
	writeCanonical(b, input, plainInput)
	var runSecs, replaySecs, keySecs, runRSS, replayRSS, runAnon, runFile float64
	var runXs []float64
	for i := range b.N {
		b.StopTimer()
		plain := func() float64 {
			url, stop := startServe(b)
			defer stop()
			return plainLoop(b, url, plainInput, 16)
		}
		var plainSecs float64
		if i%2 == 0 {
			plainSecs = plain()
		}
		url, stop := startServe(b)
		db := filepath.Join(dir, fmt.Sprintf("deposit-%d.db", i))
		args := []string{"run", "--endpoint", url, "--db", db, "--concurrency", "16", "--json", input}
		b.StartTimer()
		secs, rss, anon, file := runMeasured(b, args)
		b.StopTimer()
		rsecs, rrss, _, _ := runMeasured(b, args)
		ksecs, _, _, _ := runMeasured(b, []string{"key", input})
		stop()
		if i%2 == 1 {
			plainSecs = plain()
		}
		runXs = append(runXs, secs/plainSecs)
		keySecs += ksecs
		runSecs += secs
		replaySecs += rsecs
		runRSS = max(runRSS, rss)
		runAnon, runFile = max(runAnon, anon), max(runFile, file)
		replayRSS = max(replayRSS, rrss)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(float64(lines)*n/runSecs, "lines/s")
	b.ReportMetric(runRSS, "peak-RSS-MB")
	b.ReportMetric(runAnon, "peak-RssAnon-MB")
	b.ReportMetric(runFile, "peak-RssFile-MB")
	b.ReportMetric(replaySecs/n, "replay-s")
	b.ReportMetric(float64(lines)*n/replaySecs, "replay-lines/s")
	b.ReportMetric(replayRSS, "replay-peak-RSS-MB")
	b.ReportMetric(keySecs/n, "key-s")
	b.ReportMetric(replaySecs/keySecs, "replay-x")
	b.ReportMetric(median(runXs), "run-x")
	b.Logf("%d lines (%.1f MB): run %.1f s, peak RSS %.1f MB (sampled: anonymous %.1f MB, file-backed %.1f MB); replay %.1f s, peak RSS %.1f MB",
		lines, float64(fi.Size())/1e6, runSecs/n, runRSS, runAnon, runFile, replaySecs/n, replayRSS)
}

// writeCanonical writes, for each line of the file at in, its key and its
// canonical body as `deposit run` sends them ("KEY BODY" lines) to out. The
// plain loop streams that file: a benchmark process holding a million
// bodies would be counted in the peak RSS of the processes it starts,
// which share its memory until they exec.
func writeCanonical(b *testing.B, in, out string) {
	f, err := os.Open(in)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	o, err := os.Create(out)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(o, 1<<20)
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		body, err := canonical.JCS(lines.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(w, "%s %s\n", canonical.Key(body), body)
	}
	if err := lines.Err(); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := o.Close(); err != nil {
		b.Fatal(err)
	}
}

// plainLoop PUTs each body of the file at path (writeCanonical's) at
// URL/key with If-None-Match: * from conc goroutines over keep-alive
// connections, and returns the seconds it took.
func plainLoop(b *testing.B, url, path string, conc int) float64 {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = conc
	defer t.CloseIdleConnections()
	hc := &http.Client{Transport: t}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	work := make(chan []byte, 4*conc)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range conc {
		wg.Go(func() {
			for line := range work {
				key, body, _ := bytes.Cut(line, []byte(" "))
				r, err := http.NewRequest(http.MethodPut, url+"/"+string(key), bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					continue
				}
				r.Header.Set("If-None-Match", "*")
				r.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(r)
				if err != nil {
					b.Error(err)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					b.Errorf("plain loop: status %d", resp.StatusCode)
				}
			}
		})
	}
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		work <- bytes.Clone(lines.Bytes())
	}
	close(work)
	wg.Wait()
	if err := lines.Err(); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0).Seconds()
}

// median is the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// writeBenchInput writes n distinct payloads of about 150 bytes.
func writeBenchInput(b *testing.B, path string, n int) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range n {
		fmt.Fprintf(w, `{"title":"Observation series %d","creators":[{"name":"Researcher %d"}],"year":%d,"keywords":["benchmark","deposit"],"n":%d}`+"\n",
			i, i%977, 1990+i%35, i)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// startServe starts `deposit serve` on a free port, with flags, and returns
// its URL and a function that stops it.
func startServe(b *testing.B, flags ...string) (string, func()) {
	cmd := exec.Command(binary, append([]string{"serve", "--addr", "127.0.0.1:0"}, flags...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("deposit serve: %v", err)
	}
	_, rest, _ := strings.Cut(line, "listening on ")
	url, _, _ := strings.Cut(rest, " ")
	go io.Copy(io.Discard, out)
	return url, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}

// runMeasured runs the deposit command to exit status 0 and returns its
// wall time in seconds, its peak RSS in MB (from the kernel's accounting),
// and the peaks of its anonymous and file-backed (the store's memory map)
// resident memory, sampled every 100 ms.
func runMeasured(b *testing.B, args []string) (secs, rss, anon, file float64) {
	cmd := exec.Command(binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	sampled := make(chan [2]float64, 1)
	go func() {
		var peak [2]float64
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				sampled <- peak
				return
			case <-tick.C:
				a, f := residentMB(cmd.Process.Pid)
				peak[0], peak[1] = max(peak[0], a), max(peak[1], f)
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	peak := <-sampled
	if err != nil {
		b.Fatalf("deposit %s: %v\n%s", args[0], err, stderr.String())
	}
	secs = time.Since(t0).Seconds()
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatal("no resource usage for the child")
	}
	return secs, float64(ru.Maxrss) / 1024, peak[0], peak[1] // Maxrss is in KiB on Linux
}

// residentMB reads RssAnon and RssFile of a process from /proc, in MB; zeros
// when they cannot be read.
func residentMB(pid int) (anon, file float64) {
	text, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.Lines(string(text)) {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var kb float64
		fmt.Sscanf(strings.TrimSpace(value), "%f", &kb)
		switch name {
		case "RssAnon":
			anon = kb / 1024
		case "RssFile":
			file = kb / 1024
		}
	}
	return anon, file
}

// BenchmarkFleet measures N `deposit run` processes given the same input
// and one store, against one `deposit serve` with 2 ms of latency per
// create, for N = 1 and 4, on SQLite and on PostgreSQL: the wall time until
// every process has exited 0, as lines per second of the input.
//
//	go test -run '^$' -bench Fleet -benchtime 3x ./cmd/deposit
func BenchmarkFleet(b *testing.B) {
	const lines = 4000
	dir := b.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	writeBenchInput(b, input, lines)
	for _, store := range []string{"sqlite", "postgres"} {
		for _, procs := range []int{1, 4} {
			b.Run(fmt.Sprintf("store=%s/procs=%d", store, procs), func(b *testing.B) {
				var secs float64
				for i := range b.N {
					b.StopTimer()
					url, stop := startServe(b, "--latency", "2ms")
					db := filepath.Join(dir, fmt.Sprintf("fleet-%d-%d.db", procs, i))
					if store == "postgres" {
						db = pgtest.URL(b)
					}
					args := []string{"run", "--endpoint", url, "--db", db, "--concurrency", "8", "--json", input}
					b.StartTimer()
					t0 := time.Now()
					errs := make(chan error, procs)
					for range procs {
						go func() {
							out, err := exec.Command(binary, args...).CombinedOutput()
							if err != nil {
								err = fmt.Errorf("%w: %s", err, out)
							}
							errs <- err
						}()
					}
					for range procs {
						if err := <-errs; err != nil {
							b.Fatal(err)
						}
					}
					secs += time.Since(t0).Seconds()
					b.StopTimer()
					stop()
					b.StartTimer()
				}
				b.ReportMetric(float64(lines)*float64(b.N)/secs, "lines/s")
			})
		}
	}
}
