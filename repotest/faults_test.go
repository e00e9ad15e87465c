package repotest

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseFaultsReadsTheGrammar(t *testing.T) {
	tests := []struct{ spec, normal string }{
		{"", ""},
		{"drop=0.15,503=0.1:retry-after=1,429=0.05,500=0.05,latency=2ms,nth=3:drop",
			"drop=0.15,503=0.1:retry-after=1,429=0.05,500=0.05,latency=2ms,nth=3:drop"},
		{" reset=0.1 , 502=0.2,504=0.2 ", "reset=0.1,502=0.2,504=0.2"},
		{"429=1:retry-after-date=30", "429=1:retry-after-date=30"},
		{"slow=0.5:every=1ms,409=0.5", "slow=0.5:every=1ms,409=0.5"},
		{"slow=0.5:every=10ms", "slow=0.5"},
		{"nth=2:503:retry-after=3,nth=1:slow,reads", "nth=1:slow,nth=2:503:retry-after=3,reads"},
		{"latency=1ms,latency=2ms", "latency=3ms"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			f, err := ParseFaults(tt.spec)
			require.NoError(t, err)
			require.Equal(t, tt.normal, f.String())
			again, err := ParseFaults(f.String())
			require.NoError(t, err)
			require.Equal(t, f, again)
		})
	}
}

func TestParseFaultsRefusesBadSpecs(t *testing.T) {
	for _, spec := range []string{
		"drop", "drop=0", "drop=1.5", "drop=x", "drop=0.6,500=0.5", "boom=0.1", "404=0.1",
		"500=0.1:retry-after=1", "503=0.1:retry-after=-1", "503=0.1:retry-after=soon",
		"slow=0.1:every=fast", "latency=fast", "latency=-1s", "latency=1ms:x", "nth=0:drop",
		"nth=x:drop", "nth=2", "nth=2:boom", "nth=1:drop,nth=1:500", "reads=1", "drop=0.1,,500=0.1",
	} {
		t.Run(spec, func(t *testing.T) {
			_, err := ParseFaults(spec)
			require.ErrorIs(t, err, ErrFaultSpec)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestFaultsHelpDocumentsEveryKind(t *testing.T) {
	for _, kind := range []string{"drop", "reset", "500", "502", "503", "504", "429", "409", "slow", "latency", "nth", "reads", "retry-after-date"} {
		require.Contains(t, FaultsHelp, kind)
	}
	_, err := ParseFaults("drop=0.15,503=0.1:retry-after=1,429=0.05,500=0.05,latency=2ms,nth=3:drop")
	require.NoError(t, err, "the example in FaultsHelp parses")
}

func TestDrawFollowsTheProbabilities(t *testing.T) {
	f, err := ParseFaults("drop=0.25,500=0.25")
	require.NoError(t, err)
	got := map[string]int{}
	for i := range 4000 {
		ft, ok := f.Draw(1, "create", fmt.Sprint("k", i), 1)
		if ok {
			got[ft.Kind]++
		}
	}
	require.InDelta(t, 1000, got["drop"], 150)
	require.InDelta(t, 1000, got["500"], 150)
}

func TestEachFaultKind(t *testing.T) {
	const body = `{"title":"a"}`
	type check func(t *testing.T, s *Server, a answer, err error)
	noRecord := func(t *testing.T, s *Server) {
		require.Equal(t, int64(0), s.Stats().Records)
		// The key is free: a retry creates it.
		require.Equal(t, http.StatusCreated, mustSend(t, s.Client(), "PUT", s.URL+"/k", body, inm, "*").status)
	}
	status := func(code int, retryAfter string) check {
		return func(t *testing.T, s *Server, a answer, err error) {
			require.NoError(t, err)
			requireProblem(t, code, a)
			require.Equal(t, retryAfter, a.header.Get("Retry-After"))
			noRecord(t, s)
		}
	}
	tests := []struct {
		name  string
		spec  string
		kind  string
		check check
	}{
		{"drop commits and hangs up", "nth=1:drop", "drop", func(t *testing.T, s *Server, _ answer, err error) {
			require.Error(t, err)
			require.Equal(t, int64(1), s.Stats().Records)
			require.Equal(t, http.StatusPreconditionFailed, mustSend(t, s.Client(), "PUT", s.URL+"/k", body, inm, "*").status)
		}},
		{"reset hangs up without committing", "nth=1:reset", "reset", func(t *testing.T, s *Server, _ answer, err error) {
			require.Error(t, err)
			noRecord(t, s)
		}},
		{"500 before commit", "nth=1:500", "500", status(500, "")},
		{"502 before commit", "nth=1:502", "502", status(502, "")},
		{"503 before commit", "nth=1:503", "503", status(503, "")},
		{"504 before commit", "nth=1:504", "504", status(504, "")},
		{"503 with Retry-After seconds", "nth=1:503:retry-after=7", "503", status(503, "7")},
		{"429 with Retry-After seconds", "nth=1:429:retry-after=0", "429", status(429, "0")},
		{"409 in flight with Retry-After", "nth=1:409", "409", status(409, "1")},
		{"429 with Retry-After date", "nth=1:429:retry-after-date=30", "429", func(t *testing.T, s *Server, a answer, err error) {
			require.NoError(t, err)
			requireProblem(t, 429, a)
			at, perr := http.ParseTime(a.header.Get("Retry-After"))
			require.NoError(t, perr)
			require.False(t, at.Before(time.Now().Add(29*time.Second)), "date %v", at)
			noRecord(t, s)
		}},
		{"slow trickles the whole body", "nth=1:slow:every=1ms", "slow", func(t *testing.T, s *Server, a answer, err error) {
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, a.status)
			require.Equal(t, s.Records()[0].Identifier, field(t, a.body, "identifier"))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, Config{Faults: tt.spec})
			a, err := send(s.Client(), "PUT", s.URL+"/k", body, inm, "*")
			tt.check(t, s, a, err)
			st := s.Stats()
			require.Equal(t, map[string]int64{tt.kind: 1}, st.FaultsByKind)
			require.Equal(t, int64(1), st.Faults)
			require.Equal(t, int64(0), st.Duplicates)
		})
	}
}

func TestLatencyDelaysTheCreate(t *testing.T) {
	s := startServer(t, Config{Faults: "latency=30ms", Latency: 20 * time.Millisecond})
	start := time.Now()
	require.Equal(t, 201, mustSend(t, s.Client(), "PUT", s.URL+"/k", `{}`, inm, "*").status)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.Equal(t, int64(0), s.Stats().Faults)
}

func TestReadFaultsApplyOnlyWithReads(t *testing.T) {
	for _, spec := range []string{"nth=2:503", "nth=2:503,reads"} {
		s := startServer(t, Config{Faults: spec})
		c := s.Client()
		require.Equal(t, 201, mustSend(t, c, "PUT", s.URL+"/k", `{}`, inm, "*").status)
		require.Equal(t, 200, mustSend(t, c, "GET", s.URL+"/k", "").status)
		want := 200
		if strings.HasSuffix(spec, "reads") {
			want = 503
		}
		require.Equal(t, want, mustSend(t, c, "GET", s.URL+"/k", "").status, spec)
		require.Equal(t, 200, mustSend(t, c, "GET", s.URL+"/k", "").status)
	}
}

func TestDropOnAReadHangsUp(t *testing.T) {
	s := startServer(t, Config{Faults: "nth=1:drop,reads"})
	_, err := send(s.Client(), "GET", s.URL+"/absent", "")
	require.Error(t, err)
	require.Equal(t, int64(1), s.Stats().FaultsByKind["drop"])
}

// outcome names what a client saw for one attempt.
func outcome(a answer, err error) string {
	if err != nil {
		return "error"
	}
	return fmt.Sprint(a.status)
}

// runRetrying PUTs every key with `workers` goroutines, retrying each key at once
// until it gets 201 or 412, and returns what each key saw attempt by attempt.
func runRetrying(t *testing.T, s *Server, keys []string, workers int) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	seen := map[string][]string{}
	work := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range work {
				var trace []string
				for attempt := 0; attempt < 50; attempt++ {
					a, err := send(s.Client(), "PUT", s.URL+"/"+k, `{"k":"`+k+`"}`, inm, "*")
					trace = append(trace, outcome(a, err))
					if err == nil && (a.status == 201 || a.status == 412) {
						break
					}
				}
				mu.Lock()
				seen[k] = trace
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return seen
}

func TestFaultsAreTheSameAtAnyConcurrency(t *testing.T) {
	const spec = "drop=0.2,reset=0.05,503=0.1,500=0.1,409=0.05,429=0.05,slow=0.05:every=0s,nth=4:504"
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	run := func(seed int64, workers int) (map[string][]string, Stats) {
		s := startServer(t, Config{Faults: spec, Seed: seed})
		seen := runRetrying(t, s, keys, workers)
		st := s.Stats()
		s.Close()
		return seen, st
	}
	one, st1 := run(42, 1)
	eight, st8 := run(42, 8)
	require.Equal(t, one, eight)
	require.Equal(t, st1.FaultsByKind, st8.FaultsByKind)
	require.Equal(t, st1.Requests, st8.Requests)
	require.Equal(t, int64(len(keys)), st8.Records)
	require.Equal(t, int64(0), st8.Duplicates)
	require.Greater(t, st1.FaultsByKind["drop"], int64(0))
	require.Equal(t, st1.Records, st1.Creates)

	other, _ := run(43, 8)
	require.NotEqual(t, one, other, "another seed gives another sequence")

	// A key that ends in 412 was committed by a request whose answer was lost.
	ended412 := 0
	for k, trace := range one {
		if trace[len(trace)-1] == "412" {
			ended412++
			require.Contains(t, trace, "error", "key %s: %v", k, trace)
		}
	}
	require.Positive(t, ended412)
}
