package dedup

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsTransient reports whether err, from a store call, may clear by itself:
// the store was unreachable, restarting, or too busy to answer, rather than
// refusing the call for good. A caller may make the call again once the
// store is back; a write that met such an error may or may not have been
// committed (the connection can break while the commit is under way), so
// it is in doubt until the store is read again, which the same call made
// again does.
//
// For PostgreSQL: a connection that could not be made or broke (SQLSTATE
// class 08, a reset, a closed or refused connection), a server shutting
// down or starting (57P01, 57P02, 57P03), too many connections (53300), and
// a serialization failure or a deadlock (40001, 40P01). For SQLite: a
// database still busy or locked once the busy timeout has passed. Nothing
// else: not a closed Store (ErrClosed), a full disk, a refused login or a
// missing database, nor a context that ended, which the caller owns.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, ErrClosed) || errors.Is(err, ErrDiskFull) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return transientSQLState(pgErr.Code)
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true // no answer from the server, or a refusal above
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}

// transientSQLState reports whether a PostgreSQL error code names a
// condition that may clear by itself.
func transientSQLState(code string) bool {
	switch code {
	case "57P01", // admin_shutdown: the server is stopping or restarting
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now: starting up or shutting down
		"53300", // too_many_connections
		"40001", // serialization_failure
		"40P01": // deadlock_detected
		return true
	}
	return len(code) == 5 && code[:2] == "08" // connection_exception
}
