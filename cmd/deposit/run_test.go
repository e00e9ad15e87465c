package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
)

func TestLastAnswerIsTheInnermostTransportCause(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	last := fmt.Errorf("PUT http://127.0.0.1:1/k: %w", cause)
	err := fmt.Errorf("%w after %d attempts: %w: %w", client.ErrUnresolved, 5, errors.New("backoff: attempts exhausted"), last)
	require.Equal(t, "connection refused", lastAnswer(err))
	require.Equal(t, "connection closed without an answer", lastAnswer(fmt.Errorf("%w: PUT x: %w", client.ErrUnresolved, io.EOF)))
}

// An accepted step that never settled within its budget is reported by
// its last poll's problem (a lock that holds), not by the budget that ran
// out.
func TestLastAnswerOfAnAcceptedStepNotSettledIsItsLastPoll(t *testing.T) {
	err := fmt.Errorf("%w: POST http://127.0.0.1:1/publish: %w; a later run polls again: %w", client.ErrUnresolved,
		&client.NotSettledError{Polls: 12, Elapsed: 10 * time.Minute, Last: "dataset doi:10.5072/FK2/ABC is locked (finalizePublication)"},
		errors.New("backoff: elapsed time exhausted"))
	require.Equal(t, "accepted, not yet settled after 12 polls in 10m0s (dataset doi:10.5072/FK2/ABC is locked (finalizePublication))", lastAnswer(err))
}

func TestTheSummaryOffersRetryFailedOnlyWhereItHelps(t *testing.T) {
	tests := []struct {
		name      string
		failed    int
		keyReused int
		want      string
	}{
		{name: "a failure is re-sent with --retry-failed", failed: 2,
			want: "  2 items failed: reasons above and in \"deposit status --db d.db\"; after fixing the cause, run again with --retry-failed\n"},
		{name: "a key held with another body is not", failed: 1, keyReused: 1,
			want: "  1 item failed with 422 under idempotency-key (the server holds the key with another body, see above): --retry-failed cannot help while it keeps the key\n"},
		{name: "both are told apart", failed: 3, keyReused: 1,
			want: "  3 items failed: reasons above and in \"deposit status --db d.db\"; after fixing the cause, run again with --retry-failed (it cannot help the 1 refused with 422 under idempotency-key, see above)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			printSummary(&b, client.Summary{Total: tt.failed, Failed: tt.failed}, tail{keyReused: tt.keyReused}, runOptions{db: "d.db"})
			_, advice, _ := strings.Cut(b.String(), "\n")
			require.Equal(t, tt.want, advice)
		})
	}
}

// --rate 0 is no limit under every target; only a --rate left out gives the
// target its default (2.5 requests/s under datacite, 1.5 under invenio).
// --search-rate is the same flag type: 0 is no limit, left out the default.
func TestAnExplicitRateZeroSetsNoLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want float64
	}{
		{"no --rate leaves the target's default", nil, 0},
		{"--rate 0 sets no limit", []string{"--rate", "0"}, client.NoRateLimit},
		{"--rate=0.0 sets no limit", []string{"--rate=0.0"}, client.NoRateLimit},
		{"--rate 2.5 is 2.5", []string{"--rate", "2.5"}, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r rateFlag
			fs := flag.NewFlagSet("run", flag.ContinueOnError)
			fs.Var(&r, "rate", "")
			require.NoError(t, fs.Parse(tc.args))
			require.Equal(t, tc.want, r.clientRate())
		})
	}
	var r rateFlag
	require.ErrorContains(t, r.Set("fast"), "want a number")
}
