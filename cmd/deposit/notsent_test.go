package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// keyLog is a repository's log of the keys it was sent a write for.
type keyLog struct {
	mu   sync.Mutex
	keys map[string]bool
}

// add logs key and returns how many keys the log holds.
func (l *keyLog) add(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys[key] = true
	return len(l.keys)
}

func (l *keyLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// A run that stops or is interrupted counts apart the items it sent
// nothing for: "not sent", not "outcome unknown". A server creates the
// first 3 records at once; then it holds every write until the run is
// interrupted and answers 503, or answers 401, which stops the run. The
// run's not_sent are exactly the lines read whose key the server never
// saw, the rest of its unresolved items those it saw and did not create,
// and the summary says so in words.
func TestARunCountsTheItemsItNeverSent(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stop    bool // the server answers 401, else the test interrupts the run
		code    int
		notSent string
	}{
		{"interrupted", false, exitUnresolved, "not sent: the run was interrupted before their first request; run the same command again to send them\n"},
		{"stopped by a 401", true, exitStop, "not sent: the run stopped before their first request; once that is fixed, running again sends them\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := &keyLog{keys: map[string]bool{}}
			release := make(chan struct{})
			held := make(chan struct{}, 100)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPut {
					http.Error(w, "writes only", http.StatusMethodNotAllowed)
					return
				}
				switch n := seen.add(path.Base(r.URL.Path)); {
				case n <= 3:
					w.WriteHeader(http.StatusCreated)
				case tc.stop:
					w.WriteHeader(http.StatusUnauthorized)
				default:
					held <- struct{}{}
					select {
					case <-release:
					case <-r.Context().Done():
					}
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusServiceUnavailable)
				}
			}))
			t.Cleanup(srv.Close)
			dir := t.TempDir()
			input := writeFile(t, dir, "in.jsonl", payloads(40)...)
			resultsPath := filepath.Join(dir, "results.jsonl")

			p := start(t, "run", "--endpoint", srv.URL, "--db", filepath.Join(dir, "deposit.db"), "--concurrency", "2",
				"--results", resultsPath, "--json", input)
			if !tc.stop {
				<-held
				<-held
				require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
				// The held writes are answered once the run has stopped
				// taking items: its first unresolved result is an item
				// read and never sent.
				waitUntil(func() bool {
					b, _ := os.ReadFile(resultsPath)
					return strings.Contains(string(b), `"unresolved"`)
				})
				close(release)
			}
			require.Equal(t, tc.code, p.wait(t), p.stderr.String())

			s := summaryOf(t, p.stdout.String())
			require.Equal(t, 3, s.Created)
			require.Positive(t, s.NotSent, p.stderr.String())
			require.Equal(t, s.Total-seen.len(), s.NotSent, "not sent: the lines read whose key the server never saw")
			require.Equal(t, seen.len()-s.Created, s.Unresolved-s.NotSent, "the other unresolved items were sent")
			require.Contains(t, p.stderr.String(), fmt.Sprintf("\n  %s %s", plural(s.NotSent, "item"), tc.notSent))
			require.Contains(t, p.stderr.String(), fmt.Sprintf("\n  %s unresolved: ", plural(s.Unresolved-s.NotSent, "item")))
		})
	}
}
