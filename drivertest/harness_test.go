package drivertest_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/put"
)

// runSelf runs the tests of this binary that pattern names, with env
// added, and returns their output and exit status.
func runSelf(t *testing.T, pattern string, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// A run killed at each of its writes loses its store each time, and the
// next starts on an empty one: against a server that arbitrates (put),
// the batch still ends with one record per payload and nothing new after
// a loss but what the killed runs had left undone.
func TestKillsAndALostStoreEndInOneRecordEach(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{Faults: "drop=0.1,503=0.1:retry-after=1", Seed: 2})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var payloads [][]byte
	for i := range 30 {
		payloads = append(payloads, fmt.Appendf(nil, `{"title":"record %d"}`, i))
	}
	report := drivertest.Harness{
		Handler:  h,
		Faults:   drivertest.Faults{Spec: "500=0.05", Seed: 4}, // on top of the repository's own
		Payloads: payloads,
		Client: func(c drivertest.Child) (client.Config, error) {
			return client.Config{Target: put.Target{Endpoint: c.Endpoint}}, nil
		},
		KillAt:    []int64{3, 12, 20},
		LoseStore: true,
		Check: func(payloads [][]byte) error {
			if s := h.Stats(); s.Records != int64(len(payloads)) || s.Duplicates != 0 {
				return fmt.Errorf("%d records, %d duplicates, want %d and 0", s.Records, s.Duplicates, len(payloads))
			}
			return nil
		},
	}.Run(t)
	require.Equal(t, 3, report.Kills)
	require.Equal(t, report.Runs-3, len(report.Summaries), "every run that was not killed wrote its summary")
	require.NotZero(t, report.Summaries[len(report.Summaries)-1].Existing+report.Summaries[0].Existing,
		"a run on a lost store meets records a killed run created")
}

// Two workers share one store; a kill strikes the worker whose write it
// is, and both complete the batch, each payload once.
func TestTwoWorkersOnOneStoreCompleteTheBatchThroughKills(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{Protocol: repotest.ProtocolIdempotencyKey, Faults: "drop=0.1", Seed: 5})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var payloads [][]byte
	for i := range 40 {
		payloads = append(payloads, fmt.Appendf(nil, `{"title":"job %d"}`, i))
	}
	report := drivertest.Harness{
		Handler:  h,
		Payloads: payloads,
		Workers:  2,
		Client: func(c drivertest.Child) (client.Config, error) {
			return client.Config{Target: idempotencykey.Target{Endpoint: c.Endpoint}}, nil
		},
		KillAt: []int64{5, 25},
		Check: func(payloads [][]byte) error {
			if s := h.Stats(); s.Records != int64(len(payloads)) || s.Duplicates != 0 {
				return fmt.Errorf("%d records, %d duplicates, want %d and 0", s.Records, s.Duplicates, len(payloads))
			}
			return nil
		},
	}.Run(t)
	require.Equal(t, 2, report.Kills)
}

// A second batch on the first's Store and Addr is a run of the same target
// on the same store: the payloads the first deposited are replayed, not
// sent, and only the new ones are.
func TestABatchAfterAnotherOnOneStoreReplaysTheFirst(t *testing.T) {
	h, err := repotest.NewHandler(repotest.Config{Seed: 6})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	var payloads [][]byte
	for i := range 20 {
		payloads = append(payloads, fmt.Appendf(nil, `{"title":"record %d"}`, i))
	}
	harness := func(payloads [][]byte, store, addr string) drivertest.Harness {
		return drivertest.Harness{
			Handler:  h,
			Payloads: payloads,
			Store:    store,
			Addr:     addr,
			Client: func(c drivertest.Child) (client.Config, error) {
				return client.Config{Target: put.Target{Endpoint: c.Endpoint}}, nil
			},
			KillAt: []int64{4},
		}
	}
	store := filepath.Join(t.TempDir(), "deposit.db") // the subtests' temporary directories go with them
	var first drivertest.Report
	t.Run("first", func(t *testing.T) { first = harness(payloads[:10], store, "").Run(t) })
	t.Run("second", func(t *testing.T) {
		report := harness(payloads, store, strings.TrimPrefix(first.Endpoint, "http://")).Run(t)
		require.Equal(t, 1, report.Kills)
		replayed := 0
		for _, s := range report.Summaries {
			replayed = max(replayed, s.Replayed)
		}
		require.GreaterOrEqual(t, replayed, 10, "the first batch's payloads are replayed from the store")
		require.Equal(t, int64(20), h.Stats().Records)
	}) // nothing after the subtests: a child runs this test up to its own Run
}
