package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
)

// getStats reads url (a stats path) and returns its JSON members.
func getStats(t *testing.T, c *http.Client, url string) map[string]any {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "%s", body)
	return m
}

// A running deposit serve answers its counters as JSON on the stats path,
// which no request of the run touches and which the counters do not count;
// when stopped it prints the same counters, with the faults by kind as the
// demo prints them.
func TestServeAnswersItsCountersLiveAndByKindWhenStopped(t *testing.T) {
	dir := t.TempDir()
	p := start(t, "serve", "--addr", "127.0.0.1:0", "--faults", "500=0.2,drop=0.1", "--seed", "3")
	var base, stats string
	waitUntil(func() bool {
		lines := strings.Split(p.stdout.String(), "\n")
		if len(lines) < 3 {
			return false
		}
		_, rest, _ := strings.Cut(lines[0], "listening on ")
		base, _, _ = strings.Cut(rest, " ")
		_, stats, _ = strings.Cut(lines[1], "live counters at ")
		return true
	})
	require.Equal(t, base+statsPath, stats, p.stdout.String())

	input := filepath.Join(dir, "in.jsonl")
	distinct := crashInput(t, input, 40)
	db := filepath.Join(dir, "deposit.db")
	r := deposit(t, nil, "run", "--endpoint", base, "--db", db, "--json", input)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, nil, "run", "--endpoint", base, "--db", db, "--json", input)
	}
	require.Equal(t, exitDone, r.code, r.stderr)

	live := getStats(t, http.DefaultClient, stats)
	require.ElementsMatch(t, []string{"requests", "creates", "replays", "conflicts", "faults", "duplicates", "records", "deletes", "updates", "mismatches", "overlaps", "throttled", "faults_by_kind"},
		slices.Collect(mapsKeys(live)))
	require.Equal(t, live, getStats(t, http.DefaultClient, stats), "reading the counters changes none of them")
	require.EqualValues(t, distinct, live["records"])
	require.EqualValues(t, 0, live["duplicates"])
	require.EqualValues(t, 0, live["overlaps"])
	byKind := map[string]int64{}
	var sum int64
	for k, v := range live["faults_by_kind"].(map[string]any) {
		byKind[k] = int64(v.(float64))
		sum += byKind[k]
	}
	require.Positive(t, byKind["500"], "the seed injects 500s")
	require.Positive(t, byKind["drop"], "the seed injects drops")
	require.EqualValues(t, sum, live["faults"])

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, exitDone, p.wait(t), p.stderr.String())
	out := p.stdout.String()
	require.Contains(t, out, fmt.Sprintf("stopped: %v requests, %v records, ", live["requests"], live["records"]))
	require.Contains(t, out, fmt.Sprintf(", %d faults injected  500=%d  drop=%d\n", sum, byKind["500"], byKind["drop"]))
}

// Under every protocol, GET of the stats path is answered by serve, not by
// the repository: it is not a request and meets no fault, though every
// create meets one. Another method on the path reaches the repository.
func TestTheStatsPathIsNeitherCountedNorFaulted(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		create   func(base string) *http.Request
	}{
		{"put", func(base string) *http.Request {
			req, _ := http.NewRequest(http.MethodPut, base+"/k1", strings.NewReader(`{"a":1}`))
			req.Header.Set("If-None-Match", "*")
			return req
		}},
		{"idempotency-key", func(base string) *http.Request {
			// The stats path, to a create, is a resource like any other.
			req, _ := http.NewRequest(http.MethodPost, base+statsPath, strings.NewReader(`{"a":1}`))
			req.Header.Set("Idempotency-Key", `"k1"`)
			return req
		}},
		{"datacite", func(base string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, base+"/dois",
				strings.NewReader(`{"data":{"type":"dois","attributes":{"prefix":"10.5072"}}}`))
			req.Header.Set("Content-Type", "application/vnd.api+json")
			return req
		}},
		{"invenio", func(base string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, base+"/api/records", strings.NewReader(`{"metadata":{"title":"t"}}`))
			return req
		}},
	} {
		t.Run(tc.protocol+": only the create is counted and faulted", func(t *testing.T) {
			h, err := newRepository(tc.protocol, repotest.Config{Faults: "500=1", Seed: 1}, stubTimes{}, func(string) string { return "" })
			require.NoError(t, err)
			t.Cleanup(func() { h.Close() })
			srv := httptest.NewServer(withStats(h))
			t.Cleanup(srv.Close)

			for range 3 {
				st := getStats(t, srv.Client(), srv.URL+statsPath)
				require.EqualValues(t, 0, st["requests"])
				require.EqualValues(t, 0, st["faults"])
				require.Equal(t, map[string]any{}, st["faults_by_kind"])
			}
			req := tc.create(srv.URL)
			if req.Header.Get("Content-Type") == "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusInternalServerError, resp.StatusCode, "the fault")

			st := getStats(t, srv.Client(), srv.URL+statsPath)
			require.EqualValues(t, 1, st["requests"])
			require.EqualValues(t, 1, st["faults"])
			require.Equal(t, map[string]any{"500": float64(1)}, st["faults_by_kind"])
			require.Contains(t, h.counters(), "1 faults injected  500=1")
		})
	}
}
