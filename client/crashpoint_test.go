package client

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// crashEnv selects the crash point of TestCrashHelperProcess's child.
const crashEnv = "CLIENT_CRASH_POINT"

// crashItems is the input of the crash-point tests: n distinct payloads.
func crashItems(n int) func(yield func(Item) bool) {
	return func(yield func(Item) bool) {
		for i := range n {
			if !yield(Item{Line: int64(i + 1), Payload: fmt.Appendf(nil, `{"title":"crash point %d"}`, i)}) {
				return
			}
		}
	}
}

// stallingStore is the child's store: the real one, which at the crash
// point announces the keys concerned on stdout and never returns, so that
// the parent kills the process exactly there.
type stallingStore struct {
	*dedup.SQLite
	point string
}

// ClaimMany, at the crash point "intents", stalls once a group of intents
// is committed: before any of its requests is sent. Each group waits a
// little first, so that intents queue up and groups form. At "ahead" it
// stalls once a group the look-ahead claimed ahead is committed: larger
// than the batch's 32 workers could claim at once.
func (s stallingStore) ClaimMany(ctx context.Context, lease dedup.Lease, intents []dedup.Intent) ([]dedup.Claimed, error) {
	if s.point == "intents" {
		time.Sleep(2 * time.Millisecond)
	}
	got, err := s.SQLite.ClaimMany(ctx, lease, intents)
	if err == nil && (s.point == "intents" && len(intents) > 1 || s.point == "ahead" && len(intents) > 32) {
		announce(s.point, func(yield func(string) bool) {
			for _, in := range intents {
				yield(in.Key)
			}
		})
	}
	return got, err
}

// ConfirmMany, at the crash point "outcomes", stalls before it writes a
// group of outcomes: the server has answered, nothing is recorded yet.
func (s stallingStore) ConfirmMany(ctx context.Context, target string, items map[string]dedup.Confirmation) (map[string]string, error) {
	if s.point == "outcomes" && len(items) > 1 {
		announce("outcomes", func(yield func(string) bool) {
			for k := range items {
				yield(k)
			}
		})
	}
	return s.SQLite.ConfirmMany(ctx, target, items)
}

// announce prints "point KEY..." and waits to be killed.
func announce(point string, keys func(yield func(string) bool)) {
	var b strings.Builder
	b.WriteString(point)
	for k := range keys {
		b.WriteString(" " + k)
	}
	fmt.Println(b.String())
	select {}
}

// TestCrashHelperProcess is not a test: it is the child process of
// TestAKillAtEachBatchedWriteLosesNothing, which re-executes the test
// binary with crashEnv set. It runs a batch and prints each result as
// "result LINE KEY OUTCOME".
func TestCrashHelperProcess(t *testing.T) {
	point := os.Getenv(crashEnv)
	if point == "" {
		return // run as a normal test: nothing to do
	}
	store, err := dedup.Open(os.Getenv("CLIENT_CRASH_DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	// A short lease: the next run need not wait long for the keys this
	// process holds when it is killed. The look-ahead claims a group
	// larger than the workers could only while a quarter of the lease
	// covers many requests at the pace it measures: at "ahead" the lease
	// is 10 s, so that a loaded machine's pace still lets a large group
	// form.
	lease := time.Second
	if point == "ahead" {
		lease = 10 * time.Second
	}
	c, err := New(Config{Target: put.Target{Endpoint: os.Getenv("CLIENT_CRASH_URL")}, Store: stallingStore{SQLite: store, point: point}, Lease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	_, err = c.Run(context.Background(), crashItems(300), BatchOptions{Concurrency: 8, OnResult: func(r ItemResult) {
		fmt.Printf("result %d %s %s\n", r.Line, r.Key, r.Outcome)
	}})
	fmt.Println("finished", err)
	os.Exit(0)
}

// A process killed between a group's intents and its requests (a group
// its workers claimed, or one the look-ahead claimed ahead), or between
// the server's answers and the commit of their outcomes, loses nothing: no
// result was delivered for those keys, their rows are pending, and the next
// run settles each, as recovered, with one record per key on the server.
func TestAKillAtEachBatchedWriteLosesNothing(t *testing.T) {
	for _, point := range []string{"intents", "ahead", "outcomes"} {
		t.Run(point, func(t *testing.T) {
			srv, err := repotest.NewServer(repotest.Config{})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			db := filepath.Join(t.TempDir(), "deposit.db")

			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashEnv+"="+point, "CLIENT_CRASH_DB="+db, "CLIENT_CRASH_URL="+srv.URL)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

			delivered := map[string]bool{}
			var stalled []string
			lines := bufio.NewScanner(out)
			for stalled == nil && lines.Scan() {
				f := strings.Fields(lines.Text())
				switch {
				case len(f) == 4 && f[0] == "result":
					delivered[f[2]] = true
				case len(f) > 2 && f[0] == point:
					stalled = f[1:]
				case len(f) > 0 && f[0] == "finished":
					t.Fatalf("the batch finished without reaching the crash point: %s", lines.Text())
				}
			}
			require.NotEmpty(t, stalled, "the child ended before the crash point")
			require.NoError(t, cmd.Process.Kill()) // SIGKILL, at the crash point
			_ = cmd.Wait()

			store, err := dedup.Open(db)
			require.NoError(t, err)
			t.Cleanup(func() { store.Close() })
			c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
			require.NoError(t, err)
			onServer := map[string]bool{}
			for _, r := range srv.Records() {
				onServer[r.Key] = true
			}
			for _, key := range stalled {
				require.False(t, delivered[key], "a result was delivered for %s before its outcome was durable", key)
				rec, err := store.Lookup(context.Background(), c.StoreTarget(), key)
				require.NoError(t, err)
				require.Equal(t, dedup.StatePending, rec.State, key)
				if point != "outcomes" {
					require.False(t, onServer[key], "%s was sent although its group had not been dispatched", key)
				} else {
					require.True(t, onServer[key], "%s was answered, so the server holds it", key)
				}
			}

			results := map[string]ItemResult{}
			sum, err := c.Run(context.Background(), crashItems(300), BatchOptions{Concurrency: 8, OnResult: func(r ItemResult) {
				results[r.Key] = r
			}})
			require.NoError(t, err)
			require.Equal(t, 300, sum.Total)
			require.Zero(t, sum.Unresolved+sum.Failed)
			for _, key := range stalled {
				// At "outcomes" the killed process's request took effect:
				// the server's "exists" answers an attempt of this store's,
				// so it is created too.
				r := results[key]
				require.Equal(t, OutcomeCreated, r.Outcome, key)
				require.True(t, r.Recovered, "%s was left pending by another process", key)
			}
			st := srv.Stats()
			require.Zero(t, st.Duplicates)
			require.EqualValues(t, 300, st.Records)
			for _, r := range srv.Records() {
				require.Equal(t, r.Identifier, results[r.Key].Identifier, r.Key)
			}
		})
	}
}
