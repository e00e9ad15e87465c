package client

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// This file deposits objects: payloads named by an identity, which keep
// one record while their content changes. The object's first version
// creates its record through the steps of the object key (engine.go);
// every later one is an update, sent on the condition that the server
// still holds the version the store recorded (driver.Updater). Each
// object runs under a lease of its own, so that two processes never update
// it at once, and within a batch its lines run one at a time, in input
// order (objectQueue).

// objectStore is what objects need of a store, beside Store: per (target,
// object key) the version held, its tag, the update in flight and the
// history of versions. *dedup.SQLite and *dedup.Postgres implement it.
type objectStore interface {
	LookupObject(ctx context.Context, target, key string) (dedup.Object, error)
	LookupVersion(ctx context.Context, target, key, version string) (dedup.Version, error)
	BeginUpdate(ctx context.Context, target, key, version, order string) (dedup.Object, error)
	ApplyVersion(ctx context.Context, target, key string, a dedup.Applied) (dedup.Object, error)
	FailVersion(ctx context.Context, target, key, version string, f dedup.Failure) (dedup.Object, error)
	ResetVersion(ctx context.Context, target, key, version string) error
	NoteStale(ctx context.Context, target, key string) error
}

// maxUpdateRounds bounds the updates of one deposit that the server
// refuses because the record moved to another version this object is
// known to have had: each round reads the record and sends again.
const maxUpdateRounds = 4

// objectRun is the state of one deposit of an object.
type objectRun struct {
	c      *Client
	rd     driver.ObjectReader
	store  objectStore
	k      canonical.Keyed
	drain  <-chan struct{}
	target string // the store target of the object's rows
	dir    string // the base folder of a dataset's files, "" for a record
	res    Result
	// record is the identifier of the object's record, once the store or
	// the create's steps name it: what a driver.RecordReader reads.
	record string
	// held is the record as last read (reconcile): what an update by
	// steps is built from; readID the identifier that read named.
	held   driver.ObjectState
	readID string
	// kept is the payload the create's steps were resumed with, when an
	// earlier attempt's intent kept another (driver.Step.KeepBody).
	kept []byte
	// first says that the read is the create's, which found the record
	// there: a record without a marker that holds this very content
	// (driver.ContentMatcher) is then this version's.
	first bool
	// settle, when set, runs before a read that finds this version
	// applied is recorded: the steps of an update left in flight are
	// settled first (updateBySteps).
	settle func(ctx context.Context) error
}

// depositObject deposits k, a payload that names an object (a dataset's,
// with its files under dir), parking while another process holds the
// object's lease.
func (c *Client) depositObject(ctx context.Context, k canonical.Keyed, dir string, drain <-chan struct{}) (Result, error) {
	for n := 0; ; n++ {
		o := &objectRun{c: c, rd: c.updater, store: c.objects, k: k, dir: dir, drain: drain, target: c.target.Name(),
			res: Result{Key: k.Key, Object: k.Object}}
		err := o.run(ctx)
		var leased errLeasedElsewhere
		if !errors.As(err, &leased) {
			return o.res, err
		}
		if perr := c.park(ctx, drain, n, leased.rec.LeaseExpires); perr != nil {
			return o.res, fmt.Errorf("%w (%w)", perr, err)
		}
	}
}

// run answers from the store what it can without the object's lease (the
// version held, an old one), then takes the lease and creates or updates.
func (o *objectRun) run(ctx context.Context) error {
	obj, found, err := o.lookup(ctx)
	if err != nil {
		return err
	}
	if found {
		if done, err := o.answer(ctx, obj, false); done || err != nil {
			return err
		}
	}
	ctx, release, err := o.c.holdShared(ctx, o.drain, dedup.Ref{Target: objectLeaseTarget(o.target), Key: o.k.Object})
	if err != nil {
		return err
	}
	defer release()
	// Under the lease, again: another process may have moved it meanwhile.
	if obj, found, err = o.lookup(ctx); err != nil {
		return err
	}
	if !found {
		var done bool
		if obj, done, err = o.readFirst(ctx); done || err != nil {
			return err
		}
	}
	if done, err := o.answer(ctx, obj, true); done || err != nil {
		return err
	}
	return o.update(ctx, obj)
}

// objectLeaseTarget is the store target of the rows that lease objects.
func objectLeaseTarget(target string) string { return driver.StepTarget(target, "object") }

// rowLister is a store that lists its rows (*dedup.SQLite, *dedup.Postgres).
type rowLister interface {
	List(ctx context.Context, target string, state dedup.State) iter.Seq2[dedup.Record, error]
}

// sweepLeases lets go of the leases that dead processes left on rows that
// hold no outcome (an object's, a serial name's). A process killed after
// it recorded the outcome and before it let go leaves such a row pending,
// and no later run takes the lease again while the store answers the
// object or the deposit without it: deposit status would count the row
// pending for ever. A lease still held (not expired, its owner not proven
// dead) is left alone; a batch's own are all let go by its end.
func (c *Client) sweepLeases(ctx context.Context) {
	if c.updater != nil {
		c.sweepLeaseRows(ctx, objectLeaseTarget(c.target.Name()))
	}
	if sz, ok := c.target.(driver.Serializer); ok {
		c.sweepLeaseRows(ctx, sz.SerialTarget())
	}
}

// sweepLeaseRows lets go of the dead processes' leases on the rows of
// target, which hold no outcome.
func (c *Client) sweepLeaseRows(ctx context.Context, target string) {
	rows, err := c.pendingRows(ctx, target, "list the leases dead processes left", func(string) bool { return true })
	if err != nil {
		c.log.Warn("the leases left by dead processes were not listed; a later batch lets go of them", "target", target, "err", err)
		return
	}
	for _, rec := range rows {
		if rec.LeaseOwner == c.leases.lease.Owner || time.Now().Before(rec.LeaseExpires) && !c.ownerGone(rec.LeaseOwner) {
			continue
		}
		// Taken over and let go as a deposit would; one taken meanwhile
		// by another process is that process's.
		if _, release, err := c.holdShared(ctx, nil, dedup.Ref{Target: target, Key: rec.Key}); err == nil {
			release()
		}
	}
}

// pendingRows lists the pending rows of target whose key keep accepts,
// through the store's guard (what names the call in its errors); none
// from a store that lists no rows.
func (c *Client) pendingRows(ctx context.Context, target, what string, keep func(key string) bool) ([]dedup.Record, error) {
	var s Store = c.store
	if g, ok := s.(*guarded); ok {
		s = g.s
	}
	l, ok := s.(rowLister)
	if !ok {
		return nil, nil
	}
	return guardCall(c.guard, ctx, what, false, func(ctx context.Context) ([]dedup.Record, error) {
		var out []dedup.Record
		for rec, err := range l.List(ctx, target, dedup.StatePending) {
			if err != nil {
				return nil, err
			}
			if keep(rec.Key) {
				out = append(out, rec)
			}
		}
		return out, nil
	})
}

func (o *objectRun) lookup(ctx context.Context) (dedup.Object, bool, error) {
	obj, err := o.store.LookupObject(ctx, o.target, o.k.Object)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return obj, false, nil
	case err != nil:
		return obj, false, o.c.storeError(err)
	}
	return obj, true, nil
}

// answer settles what the store alone can: the version the object holds
// (replayed), a version it had or that orders before it (stale), a version
// refused for good. leased says the object's lease is held: a recorded
// failure is cleared then for a deliberate retry.
func (o *objectRun) answer(ctx context.Context, obj dedup.Object, leased bool) (bool, error) {
	o.res.Identifier = obj.Identifier
	if obj.Version == o.k.Key {
		o.res.Outcome = OutcomeReplayed
		return true, nil
	}
	v, err := o.store.LookupVersion(ctx, o.target, o.k.Object, o.k.Key)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
	case err != nil:
		return true, o.c.storeError(err)
	case v.State == dedup.StateFailed && !o.c.retryFailed:
		o.res.Status = v.Status
		return true, fmt.Errorf("%w (recorded by an earlier run; re-sent only when retrying failures deliberately): %w",
			ErrTerminal, &HTTPError{StatusCode: v.Status, Problem: v.Problem})
	case v.State == dedup.StateFailed && leased:
		if err := o.store.ResetVersion(ctx, o.target, o.k.Object, o.k.Key); err != nil {
			return true, o.c.storeError(err)
		}
	case v.State == dedup.StateDone && !o.c.allowRevert:
		return true, o.stale(ctx, obj)
	}
	if o.c.allowRevert || obj.Order == "" || o.k.Order == "" {
		return false, nil
	}
	n, ok := compareOrders(o.k.Order, obj.Order)
	switch {
	case !ok:
		return true, fmt.Errorf("%w: the version pointer names %s here, but %s in the version the object holds: they cannot be ordered",
			ErrInvalid, orderText(o.k.Order), orderText(obj.Order))
	case n <= 0:
		return true, o.stale(ctx, obj)
	}
	return false, nil
}

// stale reports the payload stale: the object holds obj.Version instead.
func (o *objectRun) stale(ctx context.Context, obj dedup.Object) error {
	o.res.Outcome, o.res.Current, o.res.CurrentSince = OutcomeStale, obj.Version, obj.AppliedAt
	if err := o.store.NoteStale(ctx, o.target, o.k.Object); err != nil {
		return o.c.storeError(err)
	}
	return nil
}

// readFirst creates the object's record, reading it first for a server
// whose create of a name it holds is that record's next version
// (driver.ReadBeforeCreate), unless the store holds the create's row (an
// earlier attempt, resumed as it is): none there is created; this
// payload's version there is existing; one that orders before this
// payload is followed by the create, reported updated; any other is
// recorded as the version held, for the payload to be answered against.
func (o *objectRun) readFirst(ctx context.Context) (dedup.Object, bool, error) {
	rb, ok := o.rd.(driver.ReadBeforeCreate)
	if !ok || !rb.ReadsBeforeCreate() {
		return o.create(ctx)
	}
	switch _, err := o.c.store.Lookup(ctx, o.target, o.k.Object); {
	case err == nil:
		return o.create(ctx)
	case !errors.Is(err, dedup.ErrNotFound):
		return dedup.Object{}, true, o.c.storeError(err)
	}
	state, found, err := o.read(ctx)
	if err != nil {
		return dedup.Object{}, true, err
	}
	if !found {
		return o.create(ctx)
	}
	held, err := o.heldVersion(state, dedup.Object{})
	if err != nil {
		return dedup.Object{}, true, err
	}
	if held.Key == o.k.Key {
		obj, err := o.apply(ctx, o.k, state.Tag, o.readID)
		o.res.Outcome = OutcomeExisting
		return obj, true, err
	}
	if n, ok := compareOrders(o.k.Order, held.Order); ok && n > 0 {
		obj, done, err := o.create(ctx)
		if o.res.Outcome == OutcomeCreated {
			o.res.Outcome = OutcomeUpdated
		}
		return obj, done, err
	}
	obj, err := o.apply(ctx, held, state.Tag, o.readID)
	return obj, err != nil, err
}

// create deposits the object's first version through the steps of the
// object key: exactly once, as any deposit. It reports done when this
// payload is the version the record holds; otherwise it returns the object
// as the server holds it (an earlier run's version, whose store is gone),
// for the payload to update.
func (o *objectRun) create(ctx context.Context) (dedup.Object, bool, error) {
	ck := o.k
	ck.Key, ck.Version = o.k.Object, o.k.Key
	res, _, err := o.c.deposit(ctx, ck, source{dir: o.dir}, o.drain, nil, ahead{})
	o.res.Requests += res.Requests
	o.res.Retries += res.Retries
	o.res.Recovered = res.Recovered
	o.res.Identifier, o.res.Status, o.res.RecordID = res.Identifier, res.Status, res.RecordID
	o.kept = res.kept
	if err != nil {
		return dedup.Object{}, true, o.refusedAsOlder(ctx, dedup.Object{}, err)
	}
	if res.made {
		obj, err := o.apply(ctx, o.k, res.tag, res.Identifier)
		o.res.Outcome = res.Outcome
		return obj, true, err
	}
	// The record was there: made by an earlier run, or another process,
	// perhaps with another version. It says which.
	o.record = res.Identifier
	o.first = true
	state, found, err := o.read(ctx)
	o.first = false
	if err != nil {
		return dedup.Object{}, true, err
	}
	if !found {
		return dedup.Object{}, true, o.gone(ctx)
	}
	held, err := o.heldVersion(state, dedup.Object{})
	if err != nil {
		return dedup.Object{}, true, err
	}
	obj, err := o.apply(ctx, held, state.Tag, res.Identifier)
	if err != nil || held.Key != o.k.Key {
		return obj, false, err
	}
	o.res.Outcome = cmp.Or(res.Outcome, OutcomeExisting)
	if o.res.Outcome == OutcomeReplayed {
		// The record's row was done, its version not yet kept: a run
		// stopped between the two.
		o.res.Outcome = OutcomeCreated
	}
	return obj, true, nil
}

// update applies the payload to the object's record, on the condition
// that the server holds the version the store recorded; its intent is
// recorded first.
func (o *objectRun) update(ctx context.Context, obj dedup.Object) error {
	c := o.c
	if obj.Pending != "" && obj.Pending != o.k.Key {
		// An earlier update's outcome is unknown (a run killed while it
		// was sent): the record says whether it took effect before
		// another intent replaces it, so that its version stays known.
		var done bool
		var err error
		earlier := obj
		obj, done, err = o.reconcile(ctx, obj)
		if _, steps := o.rd.(driver.StepUpdater); steps && err == nil {
			// The read told: its steps' rows are closed, done if the
			// record shows it applied, else failed as superseded, for
			// their key never runs again.
			err = o.closeEarlier(ctx, earlier, obj)
		}
		if done || err != nil {
			return err
		}
	}
	obj, err := o.store.BeginUpdate(ctx, o.target, o.k.Object, o.k.Key, o.k.Order)
	if err != nil {
		return c.storeError(err)
	}
	if su, ok := o.rd.(driver.StepUpdater); ok {
		return o.updateBySteps(ctx, su, obj)
	}
	up := o.rd.(driver.Updater)
	tag := obj.Tag
	rb, readFirst := up.(driver.ReadBeforeUpdate)
	readFirst = readFirst && rb.ReadsBeforeUpdate()
	for round := range maxUpdateRounds {
		if tag == "" || readFirst {
			var done bool
			if obj, done, err = o.reconcile(ctx, obj); done || err != nil {
				return err
			}
			tag = obj.Tag
			if tag == "" && !readFirst {
				return o.fail(ctx, &HTTPError{Problem: "the server names no tag (ETag, revision) for the record's version, so it cannot be updated on a condition; not sent"})
			}
		}
		req, err := up.Update(o.k, tag)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		req.Header = c.withUserHeader(req.Header)
		x := c.newExchange(o.k.Key, o.drain)
		var v verdict
		// Sent on no condition, an update whose answer was lost is not
		// sent again as it is: the read of the next round settles it
		// (this content there: updated), and only then is it resent.
		a, cls, err := x.do(ctx, req, !readFirst, func(a answer) verdict { v = up.JudgeUpdate(a); return v })
		o.res.Requests += x.requests
		o.res.Retries += x.retries
		if err != nil {
			return err
		}
		if v.Warn != "" {
			c.warnOnce(v.Warn, "status", a.Status, "endpoint", driver.RedactURL(a.URL))
		}
		switch cls {
		case driver.Created:
			if _, err := o.apply(ctx, o.k, v.Tag, ""); err != nil {
				return err
			}
			o.res.Outcome, o.res.Status = OutcomeUpdated, a.Status
			return nil
		case driver.Conflict, driver.Exists:
			tag = "" // another version is there: read it
			continue
		case driver.Ambiguous:
			if readFirst && round < maxUpdateRounds-1 {
				continue
			}
		}
		herr := answerError(req.Method, a, v.Problem)
		switch cls {
		case driver.Terminal:
			return o.fail(ctx, herr)
		case driver.Stop:
			return fmt.Errorf("%w: %w", ErrStopRun, herr)
		case driver.Canceled:
			return fmt.Errorf("%w: %w", ErrInterrupted, herr)
		}
		return x.unresolved(herr)
	}
	return fmt.Errorf("%w: the record of object %s moved to another version %d times while it was updated; run again", ErrUnresolved, o.k.Object, maxUpdateRounds)
}

// updateBySteps applies the payload to the object's record by the steps
// of a driver.StepUpdater, run as a deposit's are, once a read shows the
// record holding the version the store recorded; the update's intent is
// obj.Pending.
func (o *objectRun) updateBySteps(ctx context.Context, su driver.StepUpdater, obj dedup.Object) error {
	u := driver.ObjectUpdate{Key: updateKey(o.k.Object, obj.Updates+1, o.k.Key), Record: obj.Identifier, Dir: o.dir}
	// A record that holds this version already: the update's steps, if a
	// killed run left them in flight (the server finished a publication
	// it had accepted), are settled before the version is recorded, or
	// their rows would stay pending.
	o.settle = func(ctx context.Context) error { return o.settleSteps(ctx, u) }
	obj, done, err := o.reconcile(ctx, obj)
	o.settle = nil
	if done || err != nil {
		return err
	}
	u.Key, u.Held = updateKey(o.k.Object, obj.Updates+1, o.k.Key), o.held
	res, err := o.runUpdate(ctx, su, u)
	o.res.Requests += res.Requests
	o.res.Retries += res.Retries
	o.res.Status, o.res.RecordID = res.Status, res.RecordID
	if err != nil {
		if err = o.refusedAsOlder(ctx, obj, err); err == nil {
			return nil
		}
		var herr *HTTPError
		if errors.Is(err, ErrTerminal) && errors.As(err, &herr) {
			// Recorded against the version too, so that a re-run answers
			// it from the store as any refused version.
			if _, ferr := o.store.FailVersion(context.WithoutCancel(ctx), o.target, o.k.Object, o.k.Key,
				dedup.Failure{Status: herr.StatusCode, Problem: cmp.Or(herr.Problem, err.Error())}); ferr != nil {
				return o.c.storeError(ferr)
			}
		}
		return err
	}
	if _, err := o.apply(ctx, o.k, "", res.Identifier); err != nil {
		return err
	}
	o.res.Outcome = OutcomeUpdated
	return nil
}

// runUpdate runs the steps of update u as a deposit's.
func (o *objectRun) runUpdate(ctx context.Context, su driver.StepUpdater, u driver.ObjectUpdate) (Result, error) {
	src := source{update: func(k canonical.Keyed) ([]step, error) {
		// The payload's own Keyed, with the body the steps' intent kept.
		uk := o.k
		uk.Body = k.Body
		return su.UpdateSteps(uk, u)
	}}
	dk := o.k
	dk.Key = u.Key
	res, _, err := o.c.deposit(ctx, dk, src, o.drain, nil, ahead{})
	return res, err
}

// settleSteps closes the rows an earlier attempt of update u left
// pending, once a read shows the record holding this version: the update
// took effect, so those rows are done, with the identifier the read names
// (or the record's). Nothing is sent: steps built again now would be
// built from the record as it is after the update (o.held), which is not
// what they were built from (a driver choosing an edit or a new version
// by the files the record holds would choose otherwise).
func (o *objectRun) settleSteps(ctx context.Context, u driver.ObjectUpdate) error {
	o.res.RecordID = cmp.Or(o.held.RecordID, o.res.RecordID)
	return o.closeSteps(ctx, u.Key, cmp.Or(o.readID, u.Record), nil)
}

// closeEarlier closes the rows of the update of earlier.Pending, another
// version than this payload's whose outcome a killed run left unknown, now
// that the read (reconcile) has told: done when obj, the object since,
// holds that version, else failed, superseded before it was applied.
func (o *objectRun) closeEarlier(ctx context.Context, earlier, obj dedup.Object) error {
	key := updateKey(o.k.Object, earlier.Updates+1, earlier.Pending)
	if obj.Version == earlier.Pending {
		return o.closeSteps(ctx, key, cmp.Or(o.readID, obj.Identifier), nil)
	}
	return o.closeSteps(ctx, key, "", &dedup.Failure{Problem: fmt.Sprintf(
		"superseded: the object's version %s was deposited before this update was settled, which the record shows not applied", o.k.Key)})
}

// closeSteps closes the rows of update key left pending, found as the
// contract keys them (key, or key, a space and a name of the step's own,
// under the driver's step targets): as done with identifier, or failed
// with f.
func (o *objectRun) closeSteps(ctx context.Context, key, identifier string, f *dedup.Failure) error {
	c := o.c
	ofUpdate := func(k string) bool { return k == key || strings.HasPrefix(k, key+" ") }
	for _, target := range c.target.StepTargets() {
		rows, err := c.pendingRows(ctx, target, "list an update's steps in flight", ofUpdate)
		if err != nil {
			return c.storeError(err)
		}
		for _, rec := range rows {
			ctx := context.WithoutCancel(ctx)
			if f != nil {
				_, err = c.store.Fail(ctx, target, rec.Key, *f)
			} else {
				_, err = c.store.Complete(ctx, target, rec.Key, dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: identifier})
			}
			if err != nil {
				return c.storeError(err)
			}
		}
	}
	return nil
}

// reconcile reads the record before an update is sent on its tag: holding
// this payload, an earlier attempt of the update took effect (done);
// holding a version this object is known to have had, that version and
// its tag are the object's now; anything else is another writer's change,
// which is never overwritten.
func (o *objectRun) reconcile(ctx context.Context, obj dedup.Object) (dedup.Object, bool, error) {
	o.record = cmp.Or(obj.Identifier, o.record)
	state, found, err := o.read(ctx)
	if err != nil {
		return obj, true, err
	}
	if !found {
		return obj, true, o.gone(ctx)
	}
	o.held = state
	held, err := o.heldVersion(state, obj)
	if err != nil {
		return obj, true, err
	}
	if held.Key == o.k.Key {
		identifier := ""
		if o.settle != nil {
			if err := o.settle(ctx); err != nil {
				return obj, true, err
			}
			// The record the update's steps made: a new version's.
			identifier = o.readID
		}
		if _, err := o.apply(ctx, o.k, state.Tag, identifier); err != nil {
			return obj, true, err
		}
		o.res.Outcome = OutcomeUpdated
		return obj, true, nil
	}
	known := held.Key == obj.Version || held.Key == obj.Pending
	if !known {
		v, err := o.store.LookupVersion(ctx, o.target, o.k.Object, held.Key)
		switch {
		case err == nil:
			known = v.State == dedup.StateDone
		case !errors.Is(err, dedup.ErrNotFound):
			return obj, true, o.c.storeError(err)
		}
	}
	if !known {
		return obj, true, o.fail(ctx, &HTTPError{StatusCode: http.StatusPreconditionFailed,
			Problem: fmt.Sprintf("the record was changed elsewhere: the server holds a version this store never applied (content key %s), not %s; it is not overwritten", held.Key, cmp.Or(obj.Version, "the one recorded"))})
	}
	if obj, err = o.apply(ctx, held, state.Tag, ""); err != nil {
		return obj, true, err
	}
	// The version held may order after this payload (another process
	// applied a later one): then this payload is stale.
	if done, err := o.answer(ctx, obj, true); done || err != nil {
		return obj, true, err
	}
	return obj, false, nil
}

// read reads the object's record as the server holds it now; found false
// when there is none.
func (o *objectRun) read(ctx context.Context) (driver.ObjectState, bool, error) {
	c := o.c
	var req driver.Request
	var err error
	if rr, ok := o.rd.(driver.RecordReader); ok {
		req, err = rr.ReadRecord(o.k, o.record)
	} else {
		req, err = o.rd.ReadObject(o.k)
	}
	if err != nil {
		return driver.ObjectState{}, false, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	req.Header = c.withUserHeader(req.Header)
	x := c.newExchange(o.k.Key, o.drain)
	var (
		state driver.ObjectState
		f     finding
	)
	a, cls, err := x.do(ctx, req, true, func(a answer) verdict {
		state, f = o.rd.JudgeRead(a)
		if f.Kind == driver.Unknown {
			return verdict{Class: unusableLook(f.Class), Problem: f.Problem}
		}
		return verdict{Class: driver.Created}
	})
	o.res.Requests += x.requests
	o.res.Retries += x.retries
	if err != nil {
		return state, false, err
	}
	if f.Warn != "" {
		c.warnOnce(f.Warn, "status", a.Status, "endpoint", driver.RedactURL(a.URL))
	}
	if cls != driver.Created {
		herr := answerError(req.Method, a, f.Problem)
		switch cls {
		case driver.Stop:
			return state, false, fmt.Errorf("%w: %w", ErrStopRun, herr)
		case driver.Canceled:
			return state, false, fmt.Errorf("%w: %w", ErrInterrupted, herr)
		}
		return state, false, x.unresolved(herr)
	}
	switch f.Kind {
	case driver.Present:
		o.readID = f.ID
		return state, true, nil
	case driver.Foreign:
		if m, ok := o.rd.(driver.ContentMatcher); ok && o.first && m.HoldsContent(o.k, a) {
			o.readID = f.ID
			return driver.ObjectState{Version: o.k.Key, Object: o.k.Object}, true, nil
		}
		return state, false, o.fail(ctx, &HTTPError{StatusCode: a.Status, Problem: cmp.Or(f.Problem, "the object's record holds what no deposit made")})
	}
	return state, false, nil
}

// heldVersion keys the payload the server holds, as a line is keyed: its
// version, and the check that the record is this object's. A record known
// by its order alone (driver.ReadBeforeCreate) holds this payload's
// version at this payload's order, obj's (the version the store applied,
// or its pending update) at theirs, and otherwise a version this store
// never saw, named by orderVersion.
func (o *objectRun) heldVersion(state driver.ObjectState, obj dedup.Object) (canonical.Keyed, error) {
	if state.Version == "" && state.Order != "" {
		order, err := versionOrder(state.Order)
		if err != nil {
			return canonical.Keyed{}, fmt.Errorf("%w: the record's version order: %w", ErrUnresolved, err)
		}
		held := canonical.Keyed{Key: orderVersion(order), Object: o.k.Object, Order: order}
		same := func(a string) bool { n, ok := compareOrders(order, a); return ok && n == 0 }
		kept, err := o.keptVersion()
		switch {
		case err == nil && same(kept.Order):
			// What the create's steps sent: the kept payload's version.
			held.Key = kept.Key
		case same(o.k.Order):
			held.Key = o.k.Key
		case obj.Version != "" && same(obj.Order):
			held.Key = obj.Version
		case obj.Pending != "" && same(obj.PendingOrder):
			held.Key = obj.Pending
		}
		return held, nil
	}
	if state.Version != "" {
		// The record's markers say it: its payload is the server's
		// rendering, which keys as nothing this object deposited.
		if state.Object != "" && state.Object != o.k.Object {
			return canonical.Keyed{}, o.fail(context.Background(), &HTTPError{Problem: "the object's record is marked as another object's (" + state.Object + "); it is not overwritten"})
		}
		return canonical.Keyed{Key: state.Version, Object: o.k.Object, Order: o.orderOf(state.Body)}, nil
	}
	k, err := o.c.keyPayload(state.Body)
	if err == nil && k.Object != o.k.Object {
		err = errors.New("its identity names another object")
	}
	if err != nil {
		return k, o.fail(context.Background(), &HTTPError{Problem: "the object's record holds what this object's deposits did not make (" + err.Error() + "); it is not overwritten"})
	}
	return k, nil
}

// orderOf is the version order the server's rendering of a record gives
// at the version pointer, "" when it gives none.
func (o *objectRun) orderOf(body []byte) string {
	id := o.c.identity
	if o.dir != "" {
		id = id.dataset()
	}
	if id.version == "" {
		return ""
	}
	k, err := o.c.keyer.Key(body)
	if err != nil {
		return ""
	}
	v, err := valueAt(k.Body, id.version)
	if err != nil {
		return ""
	}
	order, _ := versionOrder(v)
	return order
}

// keptVersion keys the payload the create's steps were resumed with, as
// a line is keyed; an error when there is none.
func (o *objectRun) keptVersion() (canonical.Keyed, error) {
	if len(o.kept) == 0 {
		return canonical.Keyed{}, errors.New("no payload kept")
	}
	k, err := o.c.keyPayload(o.kept)
	if err == nil && k.Object != o.k.Object {
		err = errors.New("the kept payload names another object")
	}
	return k, err
}

// orderVersion names the version a record holds at order when the store
// never saw its content (a store lost, another tool's deposit): a key of
// its own, so that it is known as the version held, and ordered.
func orderVersion(order string) string {
	sum := sha256.Sum256([]byte("order\x00" + order))
	return hex.EncodeToString(sum[:])
}

// refusedAsOlder settles err, a create's or an update's terminal answer,
// for a server that refuses a version not newer than the one it holds
// (driver.ReadBeforeCreate): the record read again at an order not less
// than this payload's is that rule's refusal, reported stale (nil). Any
// other err, or record, is err.
func (o *objectRun) refusedAsOlder(ctx context.Context, obj dedup.Object, err error) error {
	rb, ok := o.rd.(driver.ReadBeforeCreate)
	if !ok || !rb.ReadsBeforeCreate() || !errors.Is(err, ErrTerminal) || o.k.Order == "" {
		return err
	}
	state, found, rerr := o.read(ctx)
	if rerr != nil || !found || state.Order == "" {
		return err
	}
	held, herr := o.heldVersion(state, obj)
	if herr != nil {
		return err
	}
	if n, ok := compareOrders(o.k.Order, held.Order); !ok || n > 0 || held.Key == o.k.Key {
		return err
	}
	if obj, rerr = o.apply(ctx, held, state.Tag, o.readID); rerr != nil {
		return rerr
	}
	return o.stale(ctx, obj)
}

// apply records version v of the object as the one the server holds now.
func (o *objectRun) apply(ctx context.Context, v canonical.Keyed, tag, identifier string) (dedup.Object, error) {
	obj, err := o.store.ApplyVersion(context.WithoutCancel(ctx), o.target, o.k.Object,
		dedup.Applied{Version: v.Key, Tag: tag, Order: v.Order, Identifier: identifier})
	if err != nil {
		return obj, o.c.storeError(err)
	}
	o.res.Identifier = obj.Identifier
	return obj, nil
}

// gone fails a payload whose object's record is no longer on the server.
func (o *objectRun) gone(ctx context.Context) error {
	return o.fail(ctx, &HTTPError{StatusCode: http.StatusNotFound,
		Problem: "the object's record is no longer on the server (deleted since it was made); nothing is created in its place"})
}

// fail records herr as the answer to this version of the object, refused
// for good.
func (o *objectRun) fail(ctx context.Context, herr *HTTPError) error {
	o.res.Status = herr.StatusCode
	problem := cmp.Or(herr.Problem, http.StatusText(herr.StatusCode))
	if _, err := o.store.FailVersion(context.WithoutCancel(ctx), o.target, o.k.Object, o.k.Key,
		dedup.Failure{Status: herr.StatusCode, Problem: problem}); err != nil {
		return o.c.storeError(err)
	}
	return fmt.Errorf("%w: %w", ErrTerminal, herr)
}

// errIdentityDataset refuses a dataset deposit with an identity on a
// target whose update is one request: it would leave the files as they were.
var errIdentityDataset = fmt.Errorf("%w: an identity (Config.Identity) applies to datasets only on a target whose updates change the files too (invenio, dataverse): this one's would not", ErrInvalid)

// datasetObject keys a dataset whose metadata names an object: its
// content key, and, by the identity's pointers read in the metadata (as
// ignore pointers are), its object; errIdentityDataset on a target that
// cannot update a dataset's files.
func (c *Client) datasetObject(dir string, metadata []byte, files []string) (canonical.Keyed, error) {
	if _, ok := c.updater.(driver.StepUpdater); !ok {
		return canonical.Keyed{}, errIdentityDataset
	}
	k, err := c.keyer.DatasetKey(dir, metadata, files)
	if err != nil {
		return k, err
	}
	if err := c.identity.dataset().name(&k); err != nil {
		return canonical.Keyed{}, err
	}
	return k, nil
}

// updaterOf is the target's and the store's parts for objects (a
// driver.Updater or a driver.StepUpdater), or a configuration error naming
// what cannot take an identity.
func updaterOf(drv driver.Driver, store Store) (driver.ObjectReader, error) {
	var up driver.ObjectReader
	switch d := drv.(type) {
	case driver.StepUpdater:
		up = d
	case driver.Updater:
		up = d
	}
	if up == nil {
		return nil, fmt.Errorf("%w: the target %s cannot update a record in place on a condition, so it takes no identity (Config.Identity)", ErrConfig, drv.Name())
	}
	if _, ok := store.(objectStore); !ok {
		return nil, fmt.Errorf("%w: the store %T keeps no objects, so the client takes no identity (Config.Identity)", ErrConfig, store)
	}
	return up, nil
}

// guardedObjects makes the object calls of a guarded store through its
// guard, as every other store call is made.
type guardedObjects struct{ s *guarded }

func (g guardedObjects) os() objectStore { return g.s.s.(objectStore) }

func (g guardedObjects) LookupObject(ctx context.Context, target, key string) (dedup.Object, error) {
	return guardCall(g.s.g, ctx, "look up an object", false, func(ctx context.Context) (dedup.Object, error) {
		return g.os().LookupObject(ctx, target, key)
	})
}

func (g guardedObjects) LookupVersion(ctx context.Context, target, key, version string) (dedup.Version, error) {
	return guardCall(g.s.g, ctx, "look up a version", false, func(ctx context.Context) (dedup.Version, error) {
		return g.os().LookupVersion(ctx, target, key, version)
	})
}

func (g guardedObjects) BeginUpdate(ctx context.Context, target, key, version, order string) (dedup.Object, error) {
	return guardCall(g.s.g, ctx, "record an update's intent", true, func(ctx context.Context) (dedup.Object, error) {
		return g.os().BeginUpdate(ctx, target, key, version, order)
	})
}

func (g guardedObjects) ApplyVersion(ctx context.Context, target, key string, a dedup.Applied) (dedup.Object, error) {
	return guardCall(g.s.g, ctx, "record a version", true, func(ctx context.Context) (dedup.Object, error) {
		return g.os().ApplyVersion(ctx, target, key, a)
	})
}

func (g guardedObjects) FailVersion(ctx context.Context, target, key, version string, f dedup.Failure) (dedup.Object, error) {
	return guardCall(g.s.g, ctx, "record a failed version", true, func(ctx context.Context) (dedup.Object, error) {
		return g.os().FailVersion(ctx, target, key, version, f)
	})
}

func (g guardedObjects) ResetVersion(ctx context.Context, target, key, version string) error {
	_, err := guardCall(g.s.g, ctx, "reset a failed version", true, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.os().ResetVersion(ctx, target, key, version)
	})
	return err
}

func (g guardedObjects) NoteStale(ctx context.Context, target, key string) error {
	_, err := guardCall(g.s.g, ctx, "count a stale line", true, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, g.os().NoteStale(ctx, target, key)
	})
	return err
}

// objectQueue keeps a batch's lines of one object in input order, one at
// a time: the look-ahead (one goroutine, in input order) enters each line;
// the first of an object goes to a worker, and the later ones wait here
// until that worker, done with the one before, takes them. No worker ever
// blocks on another's object.
type objectQueue struct {
	mu      sync.Mutex
	waiting map[string][]job // by object key: present while a line runs
}

// enter reports whether j, a line of obj, is to run now; otherwise it
// waits behind the line of obj that runs.
func (q *objectQueue) enter(obj string, j job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.waiting == nil {
		q.waiting = map[string][]job{}
	}
	if held, running := q.waiting[obj]; running {
		q.waiting[obj] = append(held, j)
		return false
	}
	q.waiting[obj] = nil
	return true
}

// next is the line of obj to run after the one that ended, if any;
// otherwise obj runs no longer.
func (q *objectQueue) next(obj string) (job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	held := q.waiting[obj]
	if len(held) == 0 {
		delete(q.waiting, obj)
		return job{}, false
	}
	j := held[0]
	held[0] = job{}
	q.waiting[obj] = held[1:]
	return j, true
}

// object is the object key of j's payload, "" when it names none (or its
// key is not computed yet).
func (j job) object() string {
	if j.k == nil {
		return ""
	}
	return j.k.Object
}
