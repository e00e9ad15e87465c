package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
)

// sqliteCoded is an error with a SQLite result code, as the driver's are.
type sqliteCoded int

func (e sqliteCoded) Error() string { return fmt.Sprintf("sqlite code %d", int(e)) }
func (e sqliteCoded) Code() int     { return int(e) }

func TestIsTransientTellsAnOutageFromARefusal(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("dedup: claim 3 keys: %w", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown (a restart)", pg("57P01"), true},
		{"crash shutdown", pg("57P02"), true},
		{"cannot connect now", pg("57P03"), true},
		{"connection failure", pg("08006"), true},
		{"connection does not exist", pg("08003"), true},
		{"too many connections", pg("53300"), true},
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"unique violation", pg("23505"), false},
		{"wrong password", pg("28P01"), false},
		{"disk full", pg("53100"), false},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"connection closed mid-answer", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"sqlite busy past the busy timeout", sqliteCoded(5), true},
		{"sqlite busy snapshot (an extended code)", sqliteCoded(5 | 2<<8), true},
		{"sqlite locked", sqliteCoded(6), true},
		{"sqlite corrupt", sqliteCoded(11), false},
		{"store closed", dedup.ErrClosed, false},
		{"not found", dedup.ErrNotFound, false},
		{"the caller's deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), false},
		{"the caller's cancellation", context.Canceled, false},
		{"nil", nil, false},
		{"anything else", errors.New("syntax error"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, dedup.IsTransient(tc.err), "%v", tc.err)
		})
	}
}
