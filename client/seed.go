package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// A server that dedups nothing (InvenioRDM) is reconciled with by searching
// for a marker each deposit carries. The engine does that per step, after
// an ambiguous answer (the step's check). This file holds the looks that are
// not per step, and the small engine hooks they need:
//
//   - A store with no record of having scanned the target scans the
//     server once (paged, or a chain of looks: driver.ChainSeeder) for
//     every record that carries a marker, and
//     keeps what it found with a "scanned" mark in one transaction
//     (dedup's scan tables): a scan cut short keeps nothing, and the next
//     run scans again. While one process scans, the others sharing the
//     store wait for the mark. A deposit whose first step the store knows
//     nothing of derives its rows from what the scan found with its
//     marker, so a batch, a shard or another batch run again after its
//     store was lost creates nothing new. Per-key searches happen only
//     after ambiguity.
//   - A step created after its check had found nothing following an
//     ambiguous attempt may be a duplicate (an index that lags more than
//     the settle time misses): it is noted in the store before the
//     step's confirmation, and a later run searches for its marker again.
//     Two records with one marker are reported as a conflict, never
//     resolved by picking one.

// scanStore is a store that keeps a scan of a server; *dedup.SQLite and
// *dedup.Postgres are. A store that is not gets no seeding.
type scanStore interface {
	ClaimScan(ctx context.Context, target string, lease dedup.Lease) (scanned bool, err error)
	FinishScan(ctx context.Context, target string, found []dedup.Found) error
	ReleaseScan(ctx context.Context, target, owner string) error
	ScanFound(ctx context.Context, target, marker string) ([]dedup.Found, error)
}

// errScanWindow is a scan that cannot reach every record: the server's
// search answers fewer hits than it holds.
var errScanWindow = errors.New("a scan cannot reach every record")

// errScanTakenOver is a scan whose lease another process took over (it
// expired): that process's scan is waited for instead.
var errScanTakenOver = errors.New("the scan's lease was taken over")

// seeding is a client's knowledge of the store's scan: the first deposit
// that needs it makes sure the store has it, the others wait.
type seeding struct {
	mu   sync.Mutex
	ch   chan struct{} // closed when the look in progress ends; nil when none runs
	done bool          // the store holds the scan
}

// seederOf is the seeding of target d as a chain of looks: a
// driver.ChainSeeder as it is, a driver.Seeder's pages chained; ok is
// false for a target that seeds nothing.
func seederOf(d driver.Driver) (_ driver.ChainSeeder, ok bool) {
	switch sd := d.(type) {
	case driver.ChainSeeder:
		return sd, true
	case driver.Seeder:
		return pagedSeeder{sd}, true
	}
	return nil, false
}

// pagedSeeder is a Seeder's scan as a chain: page after page until the
// pages hold the search's total; a total above the search's window stops
// the run.
type pagedSeeder struct{ driver.Seeder }

func (p pagedSeeder) ScanStart() *driver.ScanLook        { return p.page(1, 0) }
func (p pagedSeeder) ScanProblem(a driver.Answer) string { return p.Seeder.ScanProblem(a.Body) }

// page is the look of page n, seen hits after the pages before it.
func (p pagedSeeder) page(n, seen int) *driver.ScanLook {
	return &driver.ScanLook{Request: p.ScanPage(n), Read: func(a driver.Answer) ([]driver.Found, *driver.ScanLook, bool, error) {
		found, hits, total, ok := p.ReadScan(a)
		switch {
		case !ok:
			return nil, nil, false, nil
		case total > p.ScanWindow():
			return nil, nil, true, fmt.Errorf("%w: the server holds %d records and drafts of this account, and its search answers only the first %d, so records of earlier deposits could be missed and created again",
				errScanWindow, total, p.ScanWindow())
		}
		if seen += hits; hits == 0 || seen >= total || seen >= p.ScanWindow() {
			return found, nil, true, nil
		}
		return found, p.page(n+1, seen), true, nil
	}}
}

// prepare runs the looks of this file for deposit k before its steps are
// looked up: a recheck the store noted for k, then the seeding of a
// deposit the store knows nothing of. Its requests count as the deposit's.
func (r *runDeposit) prepare(ctx context.Context, k canonical.Keyed, steps []step) error {
	sd, ok := seederOf(r.c.target)
	if !ok || len(steps) == 0 || r.update {
		return nil
	}
	if err := r.recheck(ctx, k, steps); err != nil {
		return err
	}
	c := r.c
	// The first step's row is written before its first request: without
	// it, no process on this store ever sent anything for k.
	first := steps[0]
	switch _, err := c.lookups.lookup(ctx, first.Target, first.Key); {
	case err == nil:
		return nil
	case !isNotFound(err):
		return c.storeError(err)
	}
	ss, ok := storeAs[scanStore](c.store)
	if !ok {
		c.warnOnce("the store cannot keep a scan of the server, so a lost store is not recovered from it; a re-run after losing it may create duplicates")
		return nil
	}
	if err := r.scanOnce(ctx, sd, ss); err != nil {
		return err
	}
	found, err := ss.ScanFound(ctx, sd.ScanTarget(), sd.Marker(k))
	if err != nil {
		return c.storeError(err)
	}
	if len(found) == 0 {
		return nil
	}
	// Written last step first: a durable step found done means the steps
	// before it are done too, so a seeding cut short leaves later steps'
	// rows, never the first's alone; the first step's row, written last,
	// says the seeding is whole, and until then the next run seeds again.
	//
	// A seeded step is created, not existing: the marker is this key's
	// own, the scan sees only the account's own records, and a store with
	// no scan is how a lost store looks, so the record was made by this
	// deposit in a run whose store is gone. (Another store depositing the
	// same payloads under the same account looks the same; such stores
	// should be one, shared.)
	ctx = context.WithoutCancel(ctx)
	rows := sd.SeedRows(k, steps, fromDedup(found))
	for i := len(rows) - 1; i >= 0; i-- {
		row := rows[i]
		s := steps[row.Step]
		if row.Conflict != "" {
			if _, err := c.store.Fail(ctx, s.Target, s.Key, dedup.Failure{Status: http.StatusConflict, Problem: row.Conflict}); err != nil && !errors.Is(err, dedup.ErrInvalidTransition) {
				return c.storeError(err)
			}
			continue
		}
		if !row.Done {
			if _, err := c.store.Begin(ctx, s.Target, s.Key, nil); err != nil {
				return c.storeError(err)
			}
			continue
		}
		_, err := c.store.Complete(ctx, s.Target, s.Key, dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: row.ID})
		if err != nil && !errors.Is(err, dedup.ErrConflict) {
			return c.storeError(err)
		}
	}
	c.log.Debug("seeded", "key", k.Key, "records", len(found))
	return nil
}

// scanOnce makes sure the store holds the scan of the server: once per
// client, the first deposit that needs it looks, and the others wait. A
// look that fails is tried again by the next deposit.
func (r *runDeposit) scanOnce(ctx context.Context, sd driver.ChainSeeder, ss scanStore) error {
	c := r.c
	st := &c.seeds
	for {
		st.mu.Lock()
		if st.done {
			st.mu.Unlock()
			return nil
		}
		if st.ch == nil {
			st.ch = make(chan struct{})
			st.mu.Unlock()
			break
		}
		ch := st.ch
		st.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
		}
	}
	err := r.scanShared(ctx, sd, ss)
	st.mu.Lock()
	st.done = err == nil
	close(st.ch)
	st.ch = nil
	st.mu.Unlock()
	return err
}

// scanShared returns once the store holds the scan: at once when it does,
// after scanning when no other process is scanning, else once that
// process's scan is kept (or its lease ends, and this one scans).
func (r *runDeposit) scanShared(ctx context.Context, sd driver.ChainSeeder, ss scanStore) error {
	c := r.c
	target := sd.ScanTarget()
	for n := 0; ; n++ {
		scanned, err := ss.ClaimScan(ctx, target, c.leases.lease)
		switch {
		case err == nil && scanned:
			return nil
		case err == nil:
			err = r.scan(ctx, sd, ss)
			if !errors.Is(err, errScanTakenOver) {
				return err
			}
		case !errors.Is(err, dedup.ErrLeased):
			return c.storeError(err)
		}
		if n == 0 {
			c.log.Info("waiting for another process's scan of the server")
		}
		if err := c.park(ctx, r.drain, n, time.Time{}); err != nil {
			return err
		}
	}
}

// scan scans the server, look after look, under the scan's lease (renewed
// between looks once a tenth of it has passed), and keeps what it found
// with the mark. Each look is an exchange of its own, retried within the
// attempt and elapsed limits as any request is, so a scan of many looks
// is not cut short by the limits of one. A scan that fails keeps nothing
// and ends the lease.
func (r *runDeposit) scan(ctx context.Context, sd driver.ChainSeeder, ss scanStore) (err error) {
	c := r.c
	target := sd.ScanTarget()
	defer func() {
		if err != nil && !errors.Is(err, errScanTakenOver) {
			if rerr := ss.ReleaseScan(context.WithoutCancel(ctx), target, c.leases.lease.Owner); rerr != nil {
				c.log.Warn("could not release the scan's lease; it expires by itself", "error", rerr)
			}
		}
	}()
	var requests, retries int
	defer func() { r.res.Requests += requests; r.res.Retries += retries }()
	start := time.Now()
	if err := c.newExchange("", r.drain).sleep(ctx, sd.ScanSettle()); err != nil {
		return fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	var all []dedup.Found
	claimed := time.Now()
	for look, n := sd.ScanStart(), 0; look != nil; n++ {
		if n > 0 && time.Since(claimed) >= c.leases.lease.TTL/10 {
			switch scanned, err := ss.ClaimScan(ctx, target, c.leases.lease); {
			case errors.Is(err, dedup.ErrLeased):
				return errScanTakenOver
			case err != nil:
				return c.storeError(err)
			case scanned:
				return nil // taken over and kept meanwhile
			}
			claimed = time.Now()
		}
		req := look.Request
		req.Header = c.withUserHeader(req.Header)
		var (
			found []driver.Found
			next  *driver.ScanLook
			stop  error
		)
		x := c.newExchange("", r.drain)
		a, cls, err := x.do(ctx, req, true, func(a answer) verdict {
			var ok bool
			if found, next, ok, stop = look.Read(a); ok {
				return verdict{Class: driver.Created}
			}
			if cls := driver.Classify(a); cls != driver.Created {
				return verdict{Class: cls}
			}
			return verdict{Class: driver.Ambiguous} // a 200 that is not what was asked for
		})
		requests, retries = requests+x.requests, retries+x.retries
		if err != nil {
			return fmt.Errorf("scanning the server for earlier deposits: %w", err)
		}
		switch cls {
		case driver.Created:
		case driver.Stop:
			return fmt.Errorf("%w: %w", ErrStopRun, answerError(req.Method, a, sd.ScanProblem(a)))
		default:
			return fmt.Errorf("%w: scanning the server for earlier deposits: %w", ErrUnresolved, answerError(req.Method, a, sd.ScanProblem(a)))
		}
		if stop != nil {
			return fmt.Errorf("%w: %w", ErrStopRun, stop)
		}
		all = append(all, toDedup(found)...)
		look = next
	}
	if err := ss.FinishScan(context.WithoutCancel(ctx), target, all); err != nil {
		return c.storeError(err)
	}
	c.log.Debug("scanned", "found", len(all), "requests", requests, "took", time.Since(start))
	return nil
}

// noteMissed notes, for step s, that it was created after its check had
// found nothing following an ambiguous attempt, so that a later run looks
// again.
func (r *runDeposit) noteMissed(ctx context.Context, s *step) error {
	if s.Recheck == "" {
		return nil
	}
	// Durable, as the intents are: lost, the duplicate it may stand for
	// would go unreported.
	if _, err := r.c.store.Begin(dedup.WithDurableCommit(context.WithoutCancel(ctx)), s.Recheck, s.Key, nil); err != nil {
		return r.c.storeError(err)
	}
	r.c.log.Debug("created after a search found nothing", "key", s.Key, "step", s.Label)
	r.c.warnOnce("some records were created after a search for them found nothing; if the search index lagged more than the settle time, one is a duplicate: the next run searches for them again and reports any")
	return nil
}

// recheck looks again, once the index has caught up, for a step the store
// noted as created after a miss: one record with the marker settles the
// note; two or more are a conflict, recorded and reported for this deposit
// on every run until the surplus is deleted and the failure retried.
func (r *runDeposit) recheck(ctx context.Context, k canonical.Keyed, steps []step) error {
	c := r.c
	for i := range steps {
		s := &steps[i]
		if s.Recheck == "" || s.Check == nil {
			continue
		}
		rec, err := c.lookups.lookup(ctx, s.Recheck, s.Key)
		switch {
		case isNotFound(err):
			continue
		case err != nil:
			return c.storeError(err)
		}
		switch rec.State {
		case dedup.StateDone:
			continue
		case dedup.StateFailed:
			if !c.retryFailed {
				r.res.Status = rec.Status
				return stepError(s.Label, fmt.Errorf("%w (recorded by an earlier run; looked at again only when retrying failures deliberately): %w",
					ErrTerminal, &HTTPError{StatusCode: rec.Status, Problem: rec.Problem}))
			}
			if err := c.store.ResetFailed(ctx, s.Recheck, s.Key); err != nil {
				return c.storeError(err)
			}
		}
		prior, err := r.priorOf(ctx, steps[:i])
		if err != nil {
			return err
		}
		x := c.newExchange(k.Key, r.drain)
		f, err := x.runCheck(ctx, s.Check, prior, false)
		r.res.Requests += x.requests
		r.res.Retries += x.retries
		r.res.Rechecks += x.requests
		if err != nil {
			return err
		}
		wctx := context.WithoutCancel(ctx)
		switch f.Kind {
		case driver.Present:
			// The one record is the one this deposit created.
			if _, err := c.store.Complete(wctx, s.Recheck, s.Key, dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: f.ID}); err != nil && !errors.Is(err, dedup.ErrConflict) {
				return c.storeError(err)
			}
		case driver.Foreign:
			if _, err := c.store.Fail(wctx, s.Recheck, s.Key, dedup.Failure{Status: http.StatusConflict, Problem: f.herr.Problem}); err != nil {
				return c.storeError(err)
			}
			f.herr.StatusCode = http.StatusConflict
			r.res.Status = http.StatusConflict
			return stepError(s.Label, fmt.Errorf("%w: %w", ErrTerminal, f.herr))
		}
	}
	return nil
}

// priorOf is the identifiers the store holds for steps.
func (r *runDeposit) priorOf(ctx context.Context, steps []step) ([]string, error) {
	prior := make([]string, len(steps))
	for i, s := range steps {
		if !s.Durable {
			continue
		}
		rec, err := r.c.lookups.lookup(ctx, s.Target, s.Key)
		switch {
		case isNotFound(err):
		case err != nil:
			return nil, r.c.storeError(err)
		default:
			prior[i] = rec.Identifier
		}
	}
	return prior, nil
}

// settledBefore reports whether earlier steps settled step s, and with
// what identifier.
func settledBefore(s *step, prior []string) (string, bool) {
	if s.Settled == nil {
		return "", false
	}
	return s.Settled(prior)
}

// noteRecordID takes the identifier of the step marked recordID as the
// deposit's record id.
func (r *runDeposit) noteRecordID(steps []step, prior []string) {
	for i, s := range steps {
		if s.RecordID && prior[i] != "" {
			r.res.RecordID = prior[i]
		}
	}
}

// toDedup is what a scan found, as the store keeps it.
func toDedup(found []driver.Found) []dedup.Found {
	out := make([]dedup.Found, len(found))
	for i, f := range found {
		out[i] = dedup.Found{Marker: f.Marker, ID: f.ID, PID: f.PID, Published: f.Published}
	}
	return out
}

// fromDedup is what the store kept of a scan, as a driver reads it.
func fromDedup(found []dedup.Found) []driver.Found {
	out := make([]driver.Found, len(found))
	for i, f := range found {
		out[i] = driver.Found{Marker: f.Marker, ID: f.ID, PID: f.PID, Published: f.Published}
	}
	return out
}
