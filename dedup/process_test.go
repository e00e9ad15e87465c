package dedup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// helperEnv selects what TestHelperProcess does in a child process.
const helperEnv = "DEDUP_TEST_HELPER"

// TestHelperProcess is not a test: it is the child process of the crash and
// multi-process tests, which re-execute the test binary with helperEnv set.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return // run as a normal test: nothing to do
	}
	var err error
	switch mode {
	case "crash":
		err = crashChild()
	case "race":
		err = raceChild()
	case "hold":
		err = holdChild()
	case "claim":
		err = claimChild()
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// helper starts the test binary as a child process in mode, with env.
func helper(t *testing.T, mode string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode}, env...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, stdin, bufio.NewScanner(stdout)
}

// crashBody is the body the crash child sends for key.
func crashBody(key string) []byte { return []byte(`{"title":"` + key + `"}`) }

// crashChild writes pending then done rows from 4 goroutines until killed,
// printing "pending KEY" or "done KEY" after each write has committed.
func crashChild() error {
	ctx := context.Background()
	s, err := Open(os.Getenv("DEDUP_DB"))
	if err != nil {
		return err
	}
	defer s.Close()
	start, err := strconv.Atoi(os.Getenv("DEDUP_START"))
	if err != nil {
		return err
	}
	var mu sync.Mutex
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := start + g; i < start+100_000; i += 4 {
				key := fmt.Sprintf("k%08d", i)
				if _, err := s.Begin(ctx, target, key, crashBody(key)); err != nil {
					errs <- err
					return
				}
				report("pending %s", key)
				if i%3 == 0 {
					continue // leave some pending
				}
				c := Confirmation{Outcome: OutcomeCreated, Identifier: "id-" + key, Status: 201}
				if _, err := s.Complete(ctx, target, key, c); err != nil {
					errs <- err
					return
				}
				report("done %s", key)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestCrashKeepsEveryCommittedRow kills a writing child process with SIGKILL
// at random moments. After each kill the store opens, passes
// integrity_check, and holds every row the child reported as committed.
func TestCrashKeepsEveryCommittedRow(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	rng := rand.New(rand.NewPCG(1, 2))
	reported := map[string]State{}
	for round := range 8 {
		cmd, _, out := helper(t, "crash", "DEDUP_DB="+path, fmt.Sprintf("DEDUP_START=%d", round*1_000_000))
		killAt := 20 + rng.IntN(300)
		lines := 0
		for out.Scan() {
			lines++
			state, key, ok := strings.Cut(out.Text(), " ")
			require.True(t, ok, "child printed %q", out.Text())
			if reported[key] != StateDone {
				reported[key] = State(state)
			}
			if lines == killAt {
				require.NoError(t, cmd.Process.Kill()) // SIGKILL
			}
		}
		err := cmd.Wait()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "round %d: the child was killed", round)
		require.False(t, exit.Success())
		require.GreaterOrEqual(t, lines, killAt, "round %d: the child wrote until killed", round)

		s, err := Open(path)
		require.NoError(t, err, "round %d", round)
		var check string
		require.NoError(t, s.rdb.QueryRow("PRAGMA integrity_check").Scan(&check))
		require.Equal(t, "ok", check, "round %d", round)
		for key, state := range reported {
			r, err := s.Lookup(ctx, target, key)
			require.NoError(t, err, "round %d: key %s reported %s", round, key, state)
			require.Equal(t, crashBody(key), r.Body)
			require.Equal(t, 1, r.Attempts)
			switch {
			case state == StateDone:
				require.Equal(t, StateDone, r.State, "key %s", key)
				require.Equal(t, "id-"+key, r.Identifier)
				require.Equal(t, OutcomeCreated, r.Outcome)
			case r.State == StateDone: // committed, killed before the report
				require.Equal(t, "id-"+key, r.Identifier)
			default:
				require.Equal(t, StatePending, r.State, "key %s", key)
			}
		}
		require.NoError(t, s.Close())
	}
	require.Greater(t, len(reported), 8*20)
}

// raceChild completes every key 0..DEDUP_KEYS-1 with its own identifier,
// after a line on stdin, and prints "KEY IDENTIFIER ok|conflict" for each.
func raceChild() error {
	ctx := context.Background()
	s, err := Open(os.Getenv("DEDUP_DB"))
	if err != nil {
		return err
	}
	defer s.Close()
	id := os.Getenv("DEDUP_ID")
	n, err := strconv.Atoi(os.Getenv("DEDUP_KEYS"))
	if err != nil {
		return err
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	seed, _ := strconv.Atoi(id)
	keys := rand.New(rand.NewPCG(uint64(seed), 7)).Perm(n)
	own := Confirmation{Outcome: OutcomeCreated, Identifier: "id-" + id, Status: 201}
	var mu sync.Mutex
	report := func(key string, r Record, err error) error {
		verdict := "ok"
		switch {
		case errors.Is(err, ErrConflict):
			verdict = "conflict"
		case err != nil:
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%s %s %s\n", key, r.Identifier, verdict)
		return nil
	}
	if seed%2 == 0 { // batches
		for chunk := range slicesChunk(keys, 16) {
			items := map[string]Confirmation{}
			for _, k := range chunk {
				items[fmt.Sprintf("k%04d", k)] = own
			}
			got, err := s.CompleteMany(ctx, target, items)
			if err != nil && !errors.Is(err, ErrConflict) {
				return err
			}
			for key, r := range got {
				var e error
				if r.Identifier != own.Identifier {
					e = ErrConflict
				}
				if err := report(key, r, e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup // single completes, group-committed
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < len(keys); i += 4 {
				key := fmt.Sprintf("k%04d", keys[i])
				r, err := s.Complete(ctx, target, key, own)
				if err := report(key, r, err); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func slicesChunk(s []int, n int) func(func([]int) bool) {
	return func(yield func([]int) bool) {
		for i := 0; i < len(s); i += n {
			if !yield(s[i:min(i+n, len(s))]) {
				return
			}
		}
	}
}

// TestProcessesCompletingTheSameKeysKeepTheFirst has 4 processes open one new
// file at once and complete the same keys with different identifiers. Each
// key ends with exactly one result, and every process saw that result:
// either as its own success or with ErrConflict.
func TestProcessesCompletingTheSameKeysKeepTheFirst(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	const procs, keys = 4, 300
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	var children []child
	for p := range procs {
		cmd, stdin, out := helper(t, "race", "DEDUP_DB="+path, fmt.Sprintf("DEDUP_ID=%d", p), fmt.Sprintf("DEDUP_KEYS=%d", keys))
		children = append(children, child{cmd, stdin, out})
	}
	for _, c := range children {
		require.True(t, c.out.Scan(), "child opened the store")
		require.Equal(t, "ready", c.out.Text())
	}
	for _, c := range children {
		_, err := io.WriteString(c.stdin, "go\n")
		require.NoError(t, err)
	}

	type seen struct{ id, identifier, verdict string }
	results := map[string][]seen{}
	for p, c := range children {
		for c.out.Scan() {
			f := strings.Fields(c.out.Text())
			require.Len(t, f, 3, "child printed %q", c.out.Text())
			results[f[0]] = append(results[f[0]], seen{strconv.Itoa(p), f[1], f[2]})
		}
		require.NoError(t, c.cmd.Wait(), "child %d", p)
	}

	s, err := Open(path)
	require.NoError(t, err)
	defer s.Close()
	require.Len(t, results, keys)
	winners := map[string]int{}
	for key, all := range results {
		require.Len(t, all, procs, "key %s was completed by every process", key)
		r, err := s.Lookup(ctx, target, key)
		require.NoError(t, err)
		require.Equal(t, StateDone, r.State)
		first := 0
		for _, sn := range all {
			require.Equal(t, r.Identifier, sn.identifier, "key %s: process %s saw the stored result", key, sn.id)
			require.Equal(t, "id-"+sn.id == r.Identifier, sn.verdict == "ok", "key %s: process %s", key, sn.id)
			if sn.verdict == "ok" {
				first++
				winners[sn.id]++
			}
		}
		require.Equal(t, 1, first, "key %s has exactly one first result", key)
	}
	c, err := s.Count(ctx, "")
	require.NoError(t, err)
	require.Equal(t, Counts{Done: keys}, c)
	t.Logf("keys won per process: %v", winners)
}
