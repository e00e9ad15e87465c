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
)

// A server that dedups nothing (InvenioRDM) is reconciled with by searching
// for a marker each deposit carries. The engine does that per step, after
// an ambiguous answer (the step's check). This file holds the looks that are
// not per step, and the small engine hooks they need:
//
//   - A store that holds nothing for the target (a new store, or a lost one)
//     is seeded before its first deposit from one paged scan of what the
//     server holds with markers, so a batch run again after its store was
//     lost creates nothing new. Per-key searches happen only after
//     ambiguity.
//   - A step created after its check had found nothing following an
//     ambiguous attempt may be a duplicate (an index that lags more than
//     the settle time misses): it is noted in the store, and a later run
//     searches for its marker again. Two records with one marker are
//     reported as a conflict, never resolved by picking one.

// seeder is a driver whose server can be scanned for its deposits' markers.
type seeder interface {
	// marker is the marker deposit k carries.
	marker(k canonical.Keyed) string
	// scanPage is the request for page (from 1) of the scan.
	scanPage(page int) request
	// readScan reads one page: what it found, whether another page
	// follows, and ok false for an answer that is not a page.
	readScan(a answer, page int) (found []seedFound, more, ok bool)
	// problem summarises an error body of the server in one line.
	problem(body []byte) string
	// scanSettle is how long to wait before the scan, so that what a run
	// created just before its store was lost is searchable.
	scanSettle() time.Duration
	// seedRows is what the store should hold for the steps of k, given
	// the records found with k's marker (at least one).
	seedRows(k canonical.Keyed, steps []step, found []seedFound) []seedRow
}

// seedFound is one record a scan found.
type seedFound struct {
	marker    string
	id        string // the record id
	pid       string // the identifier it was published with, if any
	published bool
}

// seedRow is one row to seed: done with id, or pending, so that the step's
// check runs before it is ever sent.
type seedRow struct {
	step int
	id   string
	done bool
}

// fileMD5er is a driver that needs each dataset file's MD5 (Keyed.MD5).
type fileMD5er interface {
	wantsFileMD5() bool
}

// targetCounter is a store that counts a target's rows; *dedup.SQLite is
// one. A store that is not gets no seeding.
type targetCounter interface {
	Count(ctx context.Context, target string) (dedup.Counts, error)
}

// seeding is a client's one scan: run by the first deposit that needs it,
// waited for by the others.
type seeding struct {
	mu    sync.Mutex
	ch    chan struct{} // closed when the scan in progress ends; nil when none runs
	done  bool
	index map[string][]seedFound // marker -> records found
}

// prepare runs the looks of this file for deposit k before its steps are
// looked up: a recheck the store noted for k, then the seeding of a store
// that held nothing. Its requests count as the deposit's.
func (r *runDeposit) prepare(ctx context.Context, k canonical.Keyed, steps []step) error {
	sd, ok := r.c.target.(seeder)
	if !ok {
		return nil
	}
	if err := r.recheck(ctx, k, steps); err != nil {
		return err
	}
	index, err := r.scanOnce(ctx, sd)
	if err != nil {
		return err
	}
	found := index[sd.marker(k)]
	if len(found) == 0 {
		return nil
	}
	c := r.c
	// Seed only a deposit the store knows nothing of.
	for _, s := range steps {
		if !s.durable {
			continue
		}
		_, err := c.lookups.lookup(ctx, s.target, s.key)
		switch {
		case err == nil:
			return nil
		case !isNotFound(err):
			return c.storeError(err)
		}
	}
	ctx = context.WithoutCancel(ctx)
	for _, row := range sd.seedRows(k, steps, found) {
		s := steps[row.step]
		if _, err := c.store.Begin(ctx, s.target, s.key, nil); err != nil {
			return c.storeError(err)
		}
		if !row.done {
			continue
		}
		_, err := c.store.Complete(ctx, s.target, s.key, dedup.Confirmation{Outcome: dedup.OutcomeExisting, Identifier: row.id})
		if err != nil && !errors.Is(err, dedup.ErrConflict) {
			return c.storeError(err)
		}
	}
	c.log.Debug("seeded", "key", k.Key, "records", len(found))
	return nil
}

// scanOnce returns what the client's scan found: it scans once, before the
// first deposit, when the store holds nothing for any of the target's
// names, and finds nothing otherwise. A scan that fails is tried again by
// the next deposit.
func (r *runDeposit) scanOnce(ctx context.Context, sd seeder) (map[string][]seedFound, error) {
	c := r.c
	for {
		c.seeds.mu.Lock()
		st := &c.seeds
		if st.done {
			c.seeds.mu.Unlock()
			return st.index, nil
		}
		if st.ch == nil {
			st.ch = make(chan struct{})
			c.seeds.mu.Unlock()
			break
		}
		ch := st.ch
		c.seeds.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
		}
	}
	index, err := r.scan(ctx, sd)
	c.seeds.mu.Lock()
	st := &c.seeds
	if err == nil {
		st.done, st.index = true, index
	}
	close(st.ch)
	st.ch = nil
	c.seeds.mu.Unlock()
	return index, err
}

// scan runs the scan if the store holds nothing for the target.
func (r *runDeposit) scan(ctx context.Context, sd seeder) (map[string][]seedFound, error) {
	c := r.c
	counter, ok := c.store.(targetCounter)
	if !ok {
		c.log.Warn("the store cannot count its rows, so a lost store is not seeded from the server; a re-run after losing it may create duplicates")
		return nil, nil
	}
	for _, target := range append([]string{c.target.name()}, c.target.stepTargets()...) {
		n, err := counter.Count(ctx, target)
		if err != nil {
			return nil, c.storeError(err)
		}
		if n.Done+n.Pending+n.Failed > 0 {
			return nil, nil
		}
	}
	x := c.newExchange("", r.drain)
	defer func() { r.res.Requests += x.requests; r.res.Retries += x.retries }()
	if err := x.sleep(ctx, sd.scanSettle()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	index := map[string][]seedFound{}
	for page := 1; ; page++ {
		req := sd.scanPage(page)
		req.header = c.withUserHeader(req.header)
		var (
			found []seedFound
			more  bool
		)
		a, cls, err := x.do(ctx, req, true, func(a answer) verdict {
			var ok bool
			if found, more, ok = sd.readScan(a, page); ok {
				return verdict{class: classCreated}
			}
			if cls := classifyCommon(a); cls != classCreated {
				return verdict{class: cls}
			}
			return verdict{class: classAmbiguous} // a 200 that is not a page
		})
		if err != nil {
			return nil, fmt.Errorf("scanning the server for earlier deposits: %w", err)
		}
		switch cls {
		case classCreated:
		case classStop:
			return nil, fmt.Errorf("%w: %w", ErrStopRun, answerError(req.method, a, sd.problem(a.body)))
		default:
			return nil, fmt.Errorf("%w: scanning the server for earlier deposits: %w", ErrUnresolved, answerError(req.method, a, sd.problem(a.body)))
		}
		for _, f := range found {
			index[f.marker] = append(index[f.marker], f)
		}
		if !more {
			break
		}
	}
	c.log.Debug("scanned", "markers", len(index), "requests", x.requests)
	return index, nil
}

// noteMissed notes, for step s, that it was created after its check had
// found nothing following an ambiguous attempt, so that a later run looks
// again.
func (r *runDeposit) noteMissed(ctx context.Context, s *step) error {
	if s.recheck == "" {
		return nil
	}
	if _, err := r.c.store.Begin(context.WithoutCancel(ctx), s.recheck, s.key, nil); err != nil {
		return r.c.storeError(err)
	}
	r.c.log.Debug("created after a search found nothing", "key", s.key, "step", s.label)
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
		if s.recheck == "" || s.check == nil {
			continue
		}
		rec, err := c.lookups.lookup(ctx, s.recheck, s.key)
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
				return s.wrap(fmt.Errorf("%w (recorded by an earlier run; looked at again only when retrying failures deliberately): %w",
					ErrTerminal, &HTTPError{StatusCode: rec.Status, Problem: rec.Problem}))
			}
			if err := c.store.ResetFailed(ctx, s.recheck, s.key); err != nil {
				return c.storeError(err)
			}
		}
		prior, err := r.priorOf(ctx, steps[:i])
		if err != nil {
			return err
		}
		x := c.newExchange(k.Key, r.drain)
		f, err := x.runCheck(ctx, s.check, prior, false)
		r.res.Requests += x.requests
		r.res.Retries += x.retries
		r.res.Rechecks += x.requests
		if err != nil {
			return err
		}
		wctx := context.WithoutCancel(ctx)
		switch f.kind {
		case findingPresent:
			if _, err := c.store.Complete(wctx, s.recheck, s.key, dedup.Confirmation{Outcome: dedup.OutcomeExisting, Identifier: f.id}); err != nil && !errors.Is(err, dedup.ErrConflict) {
				return c.storeError(err)
			}
		case findingForeign:
			if _, err := c.store.Fail(wctx, s.recheck, s.key, dedup.Failure{Status: http.StatusConflict, Problem: f.herr.Problem}); err != nil {
				return c.storeError(err)
			}
			f.herr.StatusCode = http.StatusConflict
			r.res.Status = http.StatusConflict
			return s.wrap(fmt.Errorf("%w: %w", ErrTerminal, f.herr))
		}
	}
	return nil
}

// priorOf is the identifiers the store holds for steps.
func (r *runDeposit) priorOf(ctx context.Context, steps []step) ([]string, error) {
	prior := make([]string, len(steps))
	for i, s := range steps {
		if !s.durable {
			continue
		}
		rec, err := r.c.lookups.lookup(ctx, s.target, s.key)
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
	if s.settled == nil {
		return "", false
	}
	return s.settled(prior)
}

// noteRecordID takes the identifier of the step marked recordID as the
// deposit's record id.
func (r *runDeposit) noteRecordID(steps []step, prior []string) {
	for i, s := range steps {
		if s.recordID && prior[i] != "" {
			r.res.RecordID = prior[i]
		}
	}
}
