package dedup

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A PostgreSQL commit is durable when synchronous_commit is anything but
// off: the commit waits until its WAL record is flushed. A server, a
// database or a role may set it off (ALTER ... SET synchronous_commit =
// off), and so may a user, in the store's URL (synchronous_commit=off), to
// trade durability for speed where the server arbitrates every request. A
// write under WithDurableCommit turns it back on for its own transaction:
// pgRaiseSync runs first in that transaction, and the setting, local to
// it, holds at its commit, which flushes the WAL up to that commit and so
// every earlier commit too. A stronger setting (remote_write, remote_apply)
// is left as it is.
const pgRaiseSync = "SELECT set_config('synchronous_commit', 'on', true) WHERE current_setting('synchronous_commit') = 'off'"

// pgShowSync reads the setting in force, for a test's view (pgdb.probe).
const pgShowSync = "SELECT current_setting('synchronous_commit')"

// pgWriter is what a write runs its statements on: *pgxpool.Pool, or
// pgDurable for a durable one.
type pgWriter interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// w returns what a write under ctx runs on: the pool, or for a durable
// write (WithDurableCommit) the pool seen through pgDurable.
func (d *pgdb) w(ctx context.Context) pgWriter {
	durable := DurableCommit(ctx)
	if !durable && d.probe == nil {
		return d.pool
	}
	return pgDurable{d: d, durable: durable}
}

// pgDurable runs each statement as a batch, one round trip and one
// implicit transaction: pgRaiseSync, the statement, and pgShowSync when a
// test probes the setting (then for plain writes too, without
// pgRaiseSync). A transaction it begins runs pgRaiseSync first.
type pgDurable struct {
	d       *pgdb
	durable bool
}

// send queues sql between what the write runs first and last, sends the
// batch and reads the results before sql's.
func (p pgDurable) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if p.durable {
		b.Queue(pgRaiseSync)
	}
	b.Queue(sql, args...)
	if p.d.probe != nil {
		b.Queue(pgShowSync)
	}
	br := p.d.pool.SendBatch(ctx, b)
	if p.durable {
		if _, err := br.Exec(); err != nil {
			return nil, errors.Join(err, br.Close())
		}
	}
	return br, nil
}

// finish reads what the batch ran after the statement and closes it,
// which reads the end of its transaction: a commit that failed is an
// error here.
func (p pgDurable) finish(br pgx.BatchResults) error {
	var err error
	if p.d.probe != nil {
		var setting string
		if err = br.QueryRow().Scan(&setting); err == nil {
			p.d.probe(setting)
		}
	}
	return errors.Join(err, br.Close())
}

func (p pgDurable) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if err != nil {
		return tag, errors.Join(err, br.Close())
	}
	return tag, p.finish(br)
}

func (p pgDurable) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, err := p.send(ctx, sql, args)
	return pgDurableRow{p: p, br: br, err: err}
}

func (p pgDurable) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, err := p.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, errors.Join(err, br.Close())
	}
	return &pgDurableRows{Rows: rows, p: p, br: br}, nil
}

func (p pgDurable) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if p.durable {
		if _, err := tx.Exec(ctx, pgRaiseSync); err != nil {
			return nil, errors.Join(err, tx.Rollback(ctx))
		}
	}
	return pgDurableTx{Tx: tx, p: p}, nil
}

// pgDurableRow is the row of a QueryRow sent by pgDurable.
type pgDurableRow struct {
	p   pgDurable
	br  pgx.BatchResults
	err error
}

func (r pgDurableRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if err := r.br.QueryRow().Scan(dest...); err != nil {
		// pgx.ErrNoRows stays itself: callers branch on it.
		if cerr := r.p.finish(r.br); cerr != nil {
			return errors.Join(err, cerr)
		}
		return err
	}
	return r.p.finish(r.br)
}

// pgDurableRows are the rows of a Query sent by pgDurable: once read to
// their end, or closed, the batch is finished, and its error is theirs.
type pgDurableRows struct {
	pgx.Rows
	p    pgDurable
	br   pgx.BatchResults
	done bool
	err  error
}

func (r *pgDurableRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.end()
	return false
}

func (r *pgDurableRows) Err() error {
	return errors.Join(r.Rows.Err(), r.err)
}

func (r *pgDurableRows) Close() { r.end() }

func (r *pgDurableRows) end() {
	if r.done {
		return
	}
	r.done = true
	r.Rows.Close()
	if r.Rows.Err() != nil {
		r.br.Close()
		return
	}
	r.err = r.p.finish(r.br)
}

// pgDurableTx is a transaction begun by pgDurable: it reads the setting
// before its commit when a test probes it.
type pgDurableTx struct {
	pgx.Tx
	p pgDurable
}

func (tx pgDurableTx) Commit(ctx context.Context) error {
	if probe := tx.p.d.probe; probe != nil {
		var setting string
		if err := tx.QueryRow(ctx, pgShowSync).Scan(&setting); err != nil {
			return errors.Join(err, tx.Rollback(ctx))
		}
		probe(setting)
	}
	return tx.Tx.Commit(ctx)
}
