package dedup

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
)

// An op is one caller's write, waiting for the writer goroutine.
type op struct {
	// run applies the write inside the shared transaction. It returns an
	// error only when the transaction cannot go on (a database error);
	// outcomes such as a conflict are kept by the closure. It may run more
	// than once (see commit) and must set everything it reports on each run.
	run func(tx *sql.Tx) error
	// durable asks for a commit that survives power loss
	// (WithDurableCommit).
	durable bool
	state   atomic.Int32 // opQueued, opTaken or opAbandoned
	done    chan error   // receives the commit result once
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

// write queues run for the writer goroutine and waits until the transaction
// that ran it has committed. If ctx ends before the writer took the op, the
// op never runs and ctx.Err() is returned; once taken, write waits for the
// commit, so an error always means "not written".
func (s *SQLite) write(ctx context.Context, run func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o := &op{run: run, durable: DurableCommit(ctx), done: make(chan error, 1)}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	select {
	case s.queue <- o:
		s.mu.RUnlock()
	case <-ctx.Done():
		s.mu.RUnlock()
		return ctx.Err()
	}
	select {
	case err := <-o.done:
		return s.full(err)
	case <-ctx.Done():
		if o.state.CompareAndSwap(opQueued, opAbandoned) {
			return ctx.Err()
		}
		return s.full(<-o.done)
	}
}

// full names the store in err when err is SQLite's SQLITE_FULL: the disk
// holding the file, its log or a temporary file is full. The transaction
// was rolled back, so nothing of it was written.
func (s *SQLite) full(err error) error {
	var coded interface{ Code() int }
	if errors.As(err, &coded) && coded.Code()&0xff == 13 {
		return &diskFullError{where: s.path, err: err}
	}
	return err
}

// writer commits queued ops until the queue is closed and drained: it takes
// whatever is queued (up to maxBatch) and runs it in one transaction.
func (s *SQLite) writer() {
	defer close(s.writerDone)
	batch := make([]*op, 0, maxBatch)
	for first := range s.queue {
		batch = append(batch[:0], first)
		// Let callers that are about to queue do so, so that they share
		// this transaction instead of waiting for the next one.
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case o, ok := <-s.queue:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

// commit runs the ops of batch that are still wanted in one transaction and
// reports the result to each. An op whose write fails gets that error alone:
// the transaction is rolled back and run again without it.
func (s *SQLite) commit(batch []*op) {
	live := batch[:0]
	for _, o := range batch {
		if o.state.CompareAndSwap(opQueued, opTaken) {
			live = append(live, o)
		}
	}
	for len(live) > 0 {
		bad, err := s.runTx(live)
		if bad < 0 {
			for _, o := range live {
				o.done <- err
			}
			return
		}
		live[bad].done <- err
		live = append(live[:bad], live[bad+1:]...)
	}
}

// runTx runs ops in one write transaction (BEGIN IMMEDIATE) and commits. If
// an op fails, it returns that op's index and error; otherwise -1 and the
// error of BEGIN or COMMIT, which applies to all.
//
// A batch that holds a durable op commits with synchronous=FULL, which in
// WAL mode syncs the log at the commit: this transaction and every earlier
// one then survive power loss. The pragma cannot change inside a
// transaction and belongs to a connection, so the batch pins the writer's
// one connection for the pragma, the transaction and the pragma back.
func (s *SQLite) runTx(ops []*op) (int, error) {
	ctx := context.Background()
	if !slices.ContainsFunc(ops, func(o *op) bool { return o.durable }) {
		tx, err := s.wdb.BeginTx(ctx, nil)
		if err != nil {
			return -1, err
		}
		return s.runOps(tx, ops)
	}
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
		return -1, err
	}
	// Should this fail, the connection stays at FULL: slower, never less
	// safe.
	defer conn.ExecContext(ctx, "PRAGMA synchronous = NORMAL")
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return -1, err
	}
	return s.runOps(tx, ops)
}

// runOps runs ops in tx and commits it; see runTx.
func (s *SQLite) runOps(tx *sql.Tx, ops []*op) (int, error) {
	for i, o := range ops {
		if err := o.run(tx); err != nil {
			tx.Rollback()
			return i, err
		}
	}
	if s.beforeCommit != nil {
		s.beforeCommit(tx)
	}
	return -1, tx.Commit()
}
