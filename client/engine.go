package client

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// This file is the one place where a deposit's steps are guarded: look up
// (target, step, key), record the intent, send, classify, reconcile when the
// answer is ambiguous or "exists", and record the outcome only once the
// server confirmed it. Targets (target_*.go) only build requests and judge
// answers; the exchange (exchange.go) sends and waits.

// deposit runs the guarded deposit for one key, sharing the work with
// concurrent deposits of the same key. drain, when closed, stops retries
// (the batch is shutting down) without abandoning a request in flight. dir
// is the base folder of a dataset's files, "" for a record.
//
// With outs (a batch's outcome writer), a deposit whose last outcome is
// left to outs returns its ending: the caller adds what must follow the
// commit and hands it to outs, and the ending's result is the deposit's.
// Without outs, every outcome is recorded before deposit returns.
//
// pre is what the deposit's batch claimed ahead (ahead.go); zero outside a
// batch that does.
func (c *Client) deposit(ctx context.Context, k canonical.Keyed, src source, drain <-chan struct{}, outs *outcomes, pre ahead) (Result, *ending, error) {
	f, leader := c.flights.join(k.Key)
	if !leader {
		select {
		case <-f.done:
		case <-ctx.Done():
			return Result{Key: k.Key}, nil, fmt.Errorf("%w: %w", ErrInterrupted, ctx.Err())
		}
		res := f.res
		res.Requests, res.Retries, res.Recovered = 0, 0, false
		if f.err == nil {
			res.Outcome = OutcomeReplayed
		}
		return res, nil, f.err
	}
	pre.began(k.Key)
	res, end, err := c.runSteps(ctx, k, src, drain, outs, pre)
	if end != nil {
		// Followers learn the outcome once it is durable.
		end.after(func(e *ending) { c.flights.finish(k.Key, f, e.res, e.err) })
		return res, end, err
	}
	c.flights.finish(k.Key, f, res, err)
	return res, nil, err
}

// runDeposit is the state of one deposit while its steps run.
type runDeposit struct {
	c     *Client
	key   string
	drain <-chan struct{}
	res   Result
	// outs, when set, records the last step's outcome (last) after the
	// deposit returns; end is that outcome once handed over.
	outs *outcomes
	last *step
	end  *ending
	// primary is the deposit's own row; primaryDone once it is done.
	primary     *step
	primaryDone bool
	// sent says that a request of the primary step may have taken effect:
	// anything but a connection never made or a refusal that stopped the
	// run.
	sent bool
	// update says that the steps update an object's record
	// (driver.StepUpdater): the record exists, so no scan of the server
	// is needed to find it.
	update bool
}

// runSteps runs a deposit's steps, parking it while another process holds
// the key's lease: it waits (holding no request slot) and looks again, until
// that process settles the key or its lease expires.
func (c *Client) runSteps(ctx context.Context, k canonical.Keyed, src source, drain <-chan struct{}, outs *outcomes, pre ahead) (Result, *ending, error) {
	waiting := false
	defer func() {
		if waiting && c.hooks.OnLeaseWait != nil {
			c.hooks.OnLeaseWait(LeaseWaitEvent{Key: k.Key, Done: true})
		}
	}()
	for n := 0; ; n++ {
		res, end, err := c.runStepsOnce(ctx, k, src, drain, outs, pre)
		var leased errLeasedElsewhere
		if !errors.As(err, &leased) {
			return res, end, err
		}
		if n == 0 {
			c.log.Debug("parked", "key", k.Key, "leased_until", leased.rec.LeaseExpires)
			waiting = true
			if c.hooks.OnLeaseWait != nil {
				c.hooks.OnLeaseWait(LeaseWaitEvent{Key: k.Key, Until: leased.rec.LeaseExpires})
			}
		}
		if perr := c.park(ctx, drain, n, leased.rec.LeaseExpires); perr != nil {
			return res, nil, fmt.Errorf("%w (%w)", perr, err)
		}
	}
}

// runStepsOnce resumes a deposit at its first unfinished step. Steps run in
// order and a step runs only once the earlier ones are confirmed, so a
// durable step found done means every step before it is finished: those are
// answered from the store without a request. The rest run under the key's
// lease, claimed with the deposit's intent; a lease another process holds
// is returned as errLeasedElsewhere, before anything is sent.
func (c *Client) runStepsOnce(ctx context.Context, k canonical.Keyed, src source, drain <-chan struct{}, outs *outcomes, pre ahead) (_ Result, _ *ending, err error) {
	r := &runDeposit{c: c, key: k.Key, drain: drain, res: Result{Key: k.Key}, outs: outs, update: src.update != nil}
	steps, err := c.stepsOf(k, src)
	if errors.Is(err, ErrStopRun) {
		return r.res, r.end, err
	} else if err != nil {
		return r.res, r.end, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(steps) > 0 {
		r.last = &steps[len(steps)-1]
	}
	if err := r.prepare(ctx, k, steps); err != nil {
		return r.res, r.end, err
	}
	// In a batch, a deposit of one step asks the store nothing before its
	// claim: the claim finds its row done, failed, leased elsewhere or
	// pending as a look-up would, and names the row's prior owner. (A
	// deliberate retry of failures looks first, to clear them.)
	claimFirst := c.claimsInGroups(outs) && claimsFirst(steps)
	p, err := r.lookUp(ctx, steps, claimFirst)
	if err != nil {
		return r.res, r.end, err
	}
	if done, err := r.answerFromStore(ctx, steps, p); done || err != nil {
		return r.res, r.end, err
	}

	// What the deposit shares with others (driver.Serializer), taken
	// before its own claim so that a deposit waiting for it holds nothing.
	ctx, unserial, err := r.serialize(ctx, k)
	if err != nil {
		return r.res, r.end, err
	}
	defer unserial()

	// The deposit's intent and its lease, claimed before its first request
	// whichever step sends it, and held until the deposit ends.
	ref := dedup.Ref{Target: r.primary.Target, Key: r.primary.Key}
	got, done, err := r.claimIntent(ctx, k, ref, steps, p, pre)
	if done || err != nil {
		return r.res, r.end, err
	}
	ctx, drop := c.leases.hold(ctx, ref)
	defer func() { err = r.ended(ctx, ref, drop, err) }()

	primaryBody, err := r.resumeClaimed(got, p)
	if err != nil {
		return r.res, r.end, err
	}
	if steps, err = r.keptSteps(k, src, steps, primaryBody); err != nil {
		return r.res, r.end, err
	}
	if len(primaryBody) > 0 && !bytes.Equal(primaryBody, k.Body) {
		r.res.kept = primaryBody
	}
	if err := r.runFrom(ctx, steps, p); err != nil {
		return r.res, r.end, err
	}
	r.noteRecordID(steps, p.prior)
	return r.res, r.end, nil
}

// resume is what the store holds of a deposit's steps, and where the
// deposit resumes.
type resume struct {
	// claimFirst says that the primary step was not looked up: its claim
	// answers for it.
	claimFirst bool
	// recs are the steps' rows found, nil where none was (or none was
	// looked up); prior the identifiers of the steps settled so far.
	recs  []*dedup.Record
	prior []string
	// start is the first unfinished step; pi the primary step's index.
	start, pi int
	// uncertain marks the steps whose row shows an earlier attempt;
	// intents holds when the store recorded each step's intent (its row's
	// CreatedAt), zero where no row was read.
	uncertain []bool
	intents   []time.Time
	// recoverable says that an uncertain step may have been sent by an
	// earlier run or another process.
	recoverable bool
}

// lookUp reads the rows of the durable steps (none when claimFirst) and
// finds the first step not done, and the primary step.
func (r *runDeposit) lookUp(ctx context.Context, steps []step, claimFirst bool) (*resume, error) {
	p := &resume{claimFirst: claimFirst, recs: make([]*dedup.Record, len(steps)), pi: -1}
	for i := range steps {
		s := &steps[i]
		if s.Primary {
			p.pi, r.primary = i, s
		}
		if !s.Durable || claimFirst {
			continue
		}
		rec, err := r.c.lookups.lookup(ctx, s.Target, s.Key)
		switch {
		case isNotFound(err):
		case err != nil:
			return nil, r.c.storeError(err)
		default:
			p.recs[i] = &rec
			if rec.State == dedup.StateDone {
				p.start = i + 1
			}
		}
	}
	if p.pi < 0 {
		return nil, fmt.Errorf("%w: client: the target gave no primary step", ErrStopRun)
	}
	p.prior = make([]string, len(steps))
	for i := range p.start {
		if p.recs[i] != nil {
			p.prior[i] = p.recs[i].Identifier
		}
	}
	return p, nil
}

// answerFromStore answers what the rows looked up settle before anything
// is claimed: the steps done, a recorded failure, a key another process is
// sending. It reports done when the deposit needs nothing more.
func (r *runDeposit) answerFromStore(ctx context.Context, steps []step, p *resume) (bool, error) {
	c, recs := r.c, p.recs
	if p.pi < p.start {
		r.replay(*recs[p.pi])
	}
	// A recorded failure is answered before anything is sent; with
	// RetryFailed it is cleared for a deliberate retry.
	for i := p.start; i < len(steps); i++ {
		rec := recs[i]
		if rec == nil || rec.State != dedup.StateFailed {
			continue
		}
		if !c.retryFailed {
			return false, stepError(steps[i].Label, r.recordedFailure(&steps[i], p.prior[:i], *rec))
		}
		if err := c.store.ResetFailed(ctx, rec.Target, rec.Key); err != nil {
			return false, c.storeError(err)
		}
		recs[i] = nil
	}
	// An uncertain step is recovered when this process did not claim the
	// key last: an earlier run or another process may have sent it.
	for i := p.start; i < len(steps); i++ {
		if rec := recs[i]; rec != nil && rec.State == dedup.StatePending {
			if recs[p.pi] == nil || recs[p.pi].LeaseOwner != c.leases.lease.Owner {
				p.recoverable = true
			}
			r.warnPastRetention(&steps[i], *rec)
		}
	}
	if p.start == len(steps) {
		r.noteRecordID(steps, p.prior)
		return true, nil
	}
	// A key another process is sending is parked without a write. The
	// store decides at the claim, by its own clock; a lease that by this
	// machine's clock is far from its end need not be put to it, unless
	// the store proves its owner dead.
	if q := recs[p.pi]; q != nil && q.LeaseOwner != c.leases.lease.Owner && time.Until(q.LeaseExpires) > c.leases.lease.TTL/2 && !c.ownerGone(q.LeaseOwner) {
		return false, errLeasedElsewhere{rec: *q}
	}
	return false, nil
}

// claimIntent claims the deposit's intent and its lease (ref), or takes the
// claim its batch made ahead. It reports done when the claim answered the
// deposit (settled by another process), and returns errLeasedElsewhere for
// a lease another process holds.
func (r *runDeposit) claimIntent(ctx context.Context, k canonical.Keyed, ref dedup.Ref, steps []step, p *resume, pre ahead) (dedup.Claimed, bool, error) {
	var body []byte
	if r.primary.KeepBody {
		body = k.Body
	}
	// The claim is the intent of the primary step too: a resumed deposit
	// may send that step next. One the server does not arbitrate must not
	// be lost to a power cut, or the next run would send it without
	// looking first.
	got, err := r.c.claim(ctx, ref, body, pre, !r.primary.Arbitrated)
	claimed := got.Record
	switch {
	case errors.Is(err, dedup.ErrLeased) && p.claimFirst && claimed.State == dedup.StateDone:
		// Settled by another process, whose lease the row still carries:
		// answered as a look-up would have, without waiting it out.
		r.replay(claimed)
		r.noteRecordID(steps, []string{claimed.Identifier})
		return got, true, nil
	case errors.Is(err, dedup.ErrLeased) && p.claimFirst && claimed.State == dedup.StateFailed:
		return got, false, r.recordedFailure(r.primary, nil, claimed)
	case errors.Is(err, dedup.ErrLeased):
		return got, false, errLeasedElsewhere{rec: claimed}
	}
	if err != nil {
		return got, false, r.c.storeError(err)
	}
	return got, false, nil
}

// ended ends a deposit whose lease (ref) is held, once its last outcome is
// recorded, and returns err, naming a lease lost.
func (r *runDeposit) ended(ctx context.Context, ref dedup.Ref, drop func(), err error) error {
	err = leaseError(ctx, err)
	// The lease is kept until the last outcome is recorded. It
	// leaves the renewal set before its release: a renewal that
	// found it released would count it lost.
	end := func(err error) {
		drop()
		if err != nil {
			r.release(ctx, ref)
		}
	}
	if e := r.end; e != nil {
		e.res, e.err = r.res, err
		e.after(func(e *ending) { end(e.err) })
		return err
	}
	end(err)
	return err
}

// resumeClaimed takes what the claim found of the primary step: settled or
// failed by another process meanwhile, or pending from an earlier attempt
// (whose kept payload is returned: the steps are built from it again).
func (r *runDeposit) resumeClaimed(got dedup.Claimed, p *resume) ([]byte, error) {
	claimed, pi := got.Record, p.pi
	p.uncertain = make([]bool, len(p.recs))
	p.intents = make([]time.Time, len(p.recs))
	switch {
	case claimed.State == dedup.StateDone && !r.primaryDone: // another process settled it meanwhile
		r.replay(claimed)
		p.prior[pi], p.start = claimed.Identifier, pi+1
	case claimed.State == dedup.StateFailed && !r.primaryDone:
		return nil, r.recordedFailure(r.primary, p.prior[:pi], claimed)
	default:
		var primaryBody []byte
		if claimed.State == dedup.StatePending {
			primaryBody = claimed.Body
			p.uncertain[pi] = claimed.Attempts > 1
			p.intents[pi] = claimed.CreatedAt
		}
		// A row the look-up did not find (or that was not looked up) but
		// the claim found attempted by another owner was begun by another
		// process, or an earlier run.
		begunElsewhere := p.recs[pi] == nil && p.uncertain[pi] && got.PriorOwner != r.c.leases.lease.Owner
		r.res.Recovered = p.recoverable || begunElsewhere
		if p.claimFirst && p.uncertain[pi] {
			r.warnPastRetention(r.primary, claimed)
		}
		return primaryBody, nil
	}
	return nil, nil
}

// keptSteps are the deposit's steps built from kept, the payload an
// earlier attempt's intent kept (Step.KeepBody), so that a resumed
// deposit sends what it first sent, whatever the payload given now holds
// beside its key (a regenerated Crossref file's clock); steps when nothing
// was kept.
func (r *runDeposit) keptSteps(k canonical.Keyed, src source, steps []step, kept []byte) ([]step, error) {
	if len(kept) == 0 || bytes.Equal(kept, k.Body) {
		return steps, nil
	}
	k.Body = kept
	again, err := r.c.stepsOf(k, src)
	if err != nil {
		if !errors.Is(err, ErrStopRun) {
			err = fmt.Errorf("%w: the payload an earlier attempt kept: %w", ErrInvalid, err)
		}
		return nil, err
	}
	if len(again) != len(steps) {
		return nil, fmt.Errorf("%w: client: the target gave %d steps for the kept payload, %d for the payload", ErrStopRun, len(again), len(steps))
	}
	for i := range again {
		if again[i].Primary {
			r.primary = &again[i]
		}
	}
	r.last = &again[len(again)-1]
	return again, nil
}

// runFrom runs the steps from the first unfinished one, in order, each
// once the earlier ones are confirmed.
func (r *runDeposit) runFrom(ctx context.Context, steps []step, p *resume) error {
	prior, uncertain := p.prior, p.uncertain
	for i := p.start; i < len(steps); i++ {
		s := &steps[i]
		// The primary step's intent is the deposit's claim; another
		// durable step records its own here.
		if s.Durable && !s.Primary {
			rec, err := r.begin(ctx, s)
			if err != nil {
				return err
			}
			switch rec.State {
			case dedup.StateDone:
				prior[i] = rec.Identifier
				continue
			case dedup.StateFailed:
				return stepError(s.Label, r.recordedFailure(s, prior[:i], rec))
			}
			uncertain[i], p.intents[i] = rec.Attempts > 1, rec.CreatedAt
		}
		if id, ok := settledBefore(s, prior[:i]); ok {
			// Settled by this deposit's own earlier steps (step.settled).
			var err error
			if prior[i], err = r.confirm(ctx, s, OutcomeCreated, id, 0); err != nil {
				return stepError(s.Label, err)
			}
			continue
		}
		var id string
		var err error
		if s.Parts != nil {
			id, err = r.sendParts(ctx, s, prior[:i])
		} else {
			id, err = r.guard(ctx, s, prior[:i], uncertain[i] || p.recs[i] != nil, p.intents[i])
		}
		if err != nil {
			return stepError(s.Label, err)
		}
		prior[i] = id
	}
	return nil
}

// warnPastRetention warns when the uncertain row rec of step s is older
// than the server remembers requests for.
func (r *runDeposit) warnPastRetention(s *step, rec dedup.Record) {
	if s.Retention > 0 && time.Since(rec.CreatedAt) > s.Retention {
		r.c.log.Warn("resuming an uncertain deposit older than the server's key retention; the server may not recognise its Idempotency-Key and could create a second record",
			"key", r.key, "pending_since", rec.CreatedAt, "retention", s.Retention)
	}
}

// release ends the lease of a deposit that did not finish, so that another
// process need not wait for it to expire. When nothing the deposit sent can
// have created its record, the intent is taken back too: the key does not
// look uncertain to the next run. A lease the store would not release is
// counted, and reported in one line at the end of the batch (at once for a
// deposit outside one): a store that is down would otherwise log a line
// for each deposit that stopped.
func (r *runDeposit) release(ctx context.Context, ref dedup.Ref) {
	unsent := !r.sent && !r.primaryDone
	if err := r.c.store.Release(context.WithoutCancel(ctx), r.c.leases.lease.Owner, ref, unsent); err != nil {
		r.c.leases.notReleased(err)
		if !inBatch(ctx) {
			r.c.leases.reportUnreleased()
		}
	}
}

// replay takes the primary step's stored outcome as the deposit's result.
func (r *runDeposit) replay(rec dedup.Record) {
	if r.c.debug() {
		r.c.log.Debug("replay", "key", rec.Key, "identifier", driver.RedactURL(rec.Identifier), "status", rec.Status)
	}
	r.primaryDone = true
	r.res.Identifier, r.res.Outcome, r.res.Status = rec.Identifier, OutcomeReplayed, rec.Status
}

// begin records the intent of step s, a durable step other than the
// primary one (whose intent is the deposit's claim): its pending row. The
// intent of a step the server does not arbitrate is committed durably
// across power loss: lost, it would let the next run send the step again
// without its check looking first.
func (r *runDeposit) begin(ctx context.Context, s *step) (dedup.Record, error) {
	if !s.Arbitrated {
		ctx = dedup.WithDurableCommit(ctx)
	}
	rec, err := r.c.store.Begin(ctx, s.Target, s.Key, nil)
	if err != nil {
		return rec, r.c.storeError(err)
	}
	return rec, nil
}

// guard sends step s until an answer settles it and records the outcome.
// uncertain says that the store shows an earlier attempt, whose effect a
// step the server does not arbitrate looks for before sending again;
// intent is when the store recorded the step's intent (zero if unknown).
// It returns the step's identifier.
//
// A step found to exist (an "exists" answer, or a check that finds it) is
// created when an attempt of this deposit may have made it: one the store
// shows from an earlier run or another process sharing the store, or one
// of this exchange answered ambiguously. Only when nothing this deposit
// sent could have made it is the step existing (see exists).
func (r *runDeposit) guard(ctx context.Context, s *step, prior []string, uncertain bool, intent time.Time) (string, error) {
	c := r.c
	req, err := s.Build(prior)
	switch {
	case errors.Is(err, driver.ErrNotYet):
		return "", fmt.Errorf("%w: %w", ErrUnresolved, err)
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if req.Open != nil {
		// A streamed body (a dataset file) is reported as it is read.
		req = c.counted(req, r.key, s.Label)
		c.transfer(TransferEvent{Key: r.key, Label: s.Label, Size: req.Size, Begin: true})
		defer c.transfer(TransferEvent{Key: r.key, Label: s.Label, Size: req.Size, Done: true})
	}
	req.Header = c.withUserHeader(req.Header)

	x := c.newExchange(r.key, r.drain)
	defer func() {
		r.res.Requests += x.requests
		r.res.Retries += x.retries
		if s.Primary && x.effect {
			r.sent = true
		}
	}()

	// A step the server does not arbitrate, or may have accepted to
	// settle later, is never sent again before its check has looked for
	// the effect of an earlier attempt.
	g := &stepSend{r: r, x: x, s: s, prior: prior, req: req, intent: intent, fallback: s.FallbackID(prior),
		reconciles: !s.Arbitrated && s.Check != nil, mine: uncertain}
	g.lookingFor(driver.Ambiguous)
	if uncertain && (g.reconciles || (s.Accepts && s.Check != nil)) {
		if id, done, err := g.checkBeforeResend(ctx); done {
			return id, err
		}
	}
	for {
		var v verdict
		a, cls, err := x.do(ctx, req, !g.reconciles, func(a answer) verdict { v = s.Judge(a); return v })
		if err != nil {
			return "", err
		}
		g.mine = g.mine || a.AfterAmbiguous
		if v.Warn != "" {
			c.warnOnce(v.Warn, "status", a.Status, "endpoint", driver.RedactURL(a.URL))
		}
		if cls == driver.Created && s.Durable && cmp.Or(v.ID, g.fallback) == "" {
			// A success that names none of the identifier this step must
			// yield (a body cut short) settles nothing: ambiguous, for
			// this deposit alone.
			cls, v.Problem = driver.Ambiguous, cmp.Or(v.Problem, "the answer names no identifier")
		}
		switch cls {
		case driver.Created:
			return g.created(ctx, a, v)
		case driver.Exists:
			return g.existing(ctx, a, v)
		case driver.Accepted:
			return g.accepted(ctx, a)
		}
		if id, done, err := g.refused(ctx, a, cls, v); done {
			return id, err
		}
	}
}

// stepSend is the state of one guarded step across its attempts.
type stepSend struct {
	r     *runDeposit
	x     *exchange
	s     *step
	prior []string
	req   request
	// intent is when the store recorded the step's intent, from which a
	// check that says so counts its settle time (Check.SettleFromIntent).
	intent time.Time
	// fallback is the step's identifier when no answer names one.
	fallback string
	// reconciles says that the step's check looks for the effect of an
	// attempt before it is sent again: the server does not arbitrate it.
	reconciles bool
	missed     bool // a check found nothing after an ambiguous attempt
	mine       bool // an attempt of this deposit may have taken effect
}

// lookingFor sets when the step was first attempted, for the answers of
// the checks that follow an answer of class cls (driver.Answer.Since):
// the intent's time, unless the answer says what the check looks for may
// be older (an exists, a conflict).
func (g *stepSend) lookingFor(cls class) {
	g.x.since = g.intent
	if cls == driver.Exists || cls == driver.Conflict {
		g.x.since = time.Time{}
	}
}

// checkBeforeResend looks for the effect of an earlier attempt before the
// step is sent again. It reports done when the check settled the step.
func (g *stepSend) checkBeforeResend(ctx context.Context) (string, bool, error) {
	r, s := g.r, g.s
	f, err := g.x.recheck(ctx, s.Check, g.prior, g.intent)
	if err != nil {
		return "", true, r.checkFailed(ctx, s, err)
	}
	g.missed = f.Kind == driver.Absent
	switch f.Kind {
	case driver.Present:
		id, err := r.confirm(ctx, s, exists(g.mine), cmp.Or(f.ID, g.fallback), 0)
		return id, true, err
	case driver.Foreign:
		return "", true, r.fail(ctx, s, f.herr)
	case driver.Pending:
		id, err := g.poll(ctx, 0, f.header)
		return id, true, err
	}
	return "", false, nil
}

// created settles the step the server created, by answer a judged v.
func (g *stepSend) created(ctx context.Context, a answer, v verdict) (string, error) {
	// The note to search again is durable before the confirmation:
	// a crash between the two would otherwise leave a duplicate the
	// index hid unreported for good.
	if g.missed {
		if err := g.r.noteMissed(ctx, g.s); err != nil {
			return "", err
		}
	}
	id, err := g.r.confirm(ctx, g.s, OutcomeCreated, cmp.Or(v.ID, g.fallback), a.Status)
	if err == nil && g.s.Primary {
		// This request made the record, with this payload: an object's
		// version is known without reading it back.
		g.r.res.made, g.r.res.tag = true, v.Tag
	}
	return id, err
}

// existing settles the step the server says exists, by answer a judged v:
// the check finds its identifier when the answer does not name it.
func (g *stepSend) existing(ctx context.Context, a answer, v verdict) (string, error) {
	r, s := g.r, g.s
	if v.ID != "" || s.Check == nil {
		return r.confirm(ctx, s, exists(g.mine), cmp.Or(v.ID, g.fallback), a.Status)
	}
	g.lookingFor(driver.Exists)
	f, err := g.x.runCheck(ctx, s.Check, g.prior, false)
	if err != nil {
		return "", r.checkFailed(ctx, s, err)
	}
	switch f.Kind {
	case driver.Foreign:
		return "", r.fail(ctx, s, f.herr)
	case driver.Pending:
		return g.poll(ctx, a.Status, f.header)
	}
	// A record the server says exists but will not show is still
	// there: its identifier is the fallback.
	return r.confirm(ctx, s, exists(g.mine), cmp.Or(f.ID, g.fallback), a.Status)
}

// refused settles what an answer a of class cls, other than a success,
// can: it reports done unless the step is to be sent again.
func (g *stepSend) refused(ctx context.Context, a answer, cls class, v verdict) (string, bool, error) {
	r, s, x, req := g.r, g.s, g.x, g.req
	// Not a success: the answer, as an error.
	herr := answerError(req.Method, a, v.Problem)
	var last error = herr
	if a.Err != nil {
		last = fmt.Errorf("%s %s: %w", req.Method, driver.RedactURL(req.URL), scrub(a.Err))
	}
	switch cls {
	case driver.Conflict, driver.Ambiguous:
		return g.unsettled(ctx, a, cls, herr, last)

	case driver.Terminal:
		return "", true, r.fail(ctx, s, herr)

	case driver.Stop:
		return "", true, fmt.Errorf("%w: %w", ErrStopRun, herr)

	case driver.Canceled:
		return "", true, fmt.Errorf("%w: %w", ErrInterrupted, herr)

	default: // retryable, but retrying stopped
		return "", true, x.unresolved(last)
	}
}

// unsettled handles a conflict or an ambiguous answer a (herr, last as
// errors): the check may find the step; if not, it reports not done once
// the exchange waited to send it again.
func (g *stepSend) unsettled(ctx context.Context, a answer, cls class, herr *HTTPError, last error) (string, bool, error) {
	r, s, x := g.r, g.s, g.x
	// A conflict is "exists" only once the check finds it; an
	// ambiguous answer to a step the server does not arbitrate is
	// looked for before the request is sent again. (Arbitrated
	// ambiguous answers were retried by the exchange.)
	if cls == driver.Ambiguous && !g.reconciles {
		return "", true, x.unresolved(last)
	}
	f := checked{finding: finding{Kind: driver.Absent}}
	if s.Check != nil {
		var err error
		g.lookingFor(cls)
		if f, err = x.runCheck(ctx, s.Check, g.prior, cls == driver.Ambiguous); err != nil {
			return "", true, r.checkFailed(ctx, s, err)
		}
	}
	switch f.Kind {
	case driver.Present:
		// After an ambiguous answer, our own request took effect.
		id, err := r.confirm(ctx, s, exists(g.mine || cls == driver.Ambiguous), cmp.Or(f.ID, g.fallback), a.Status)
		return id, true, err
	case driver.Foreign:
		return "", true, r.fail(ctx, s, f.herr)
	case driver.Pending:
		g.mine = g.mine || cls == driver.Ambiguous
		id, err := g.poll(ctx, a.Status, f.header)
		return id, true, err
	}
	g.missed = g.missed || (cls == driver.Ambiguous && f.Kind == driver.Absent)
	// Not found yet, but it may still show (an index that lags).
	g.mine = g.mine || cls == driver.Ambiguous
	if cls == driver.Conflict {
		herr.Problem = "409 Conflict but no record found on read-back: " + herr.Problem
	}
	wait, stop := x.mayRetry(ctx, a, 0)
	if stop != nil {
		return "", true, x.unresolved(last)
	}
	if err := x.sleep(ctx, wait); err != nil {
		return "", true, fmt.Errorf("%w: %w", ErrInterrupted, err)
	}
	return "", false, nil
}

// accepted settles a step the server accepted, to settle later (answer a):
// nothing is recorded as done, and the request is never sent again; its
// check is polled instead.
func (g *stepSend) accepted(ctx context.Context, a answer) (string, error) {
	s := g.s
	if !s.Accepts || s.Check == nil {
		// The driver's mistake, and the same for every item: without
		// the flag, a later run would not poll before sending again.
		return "", fmt.Errorf("%w: steps: the target judged %s %s accepted, but its step does not declare that the server may accept it (driver.Step.Accepts) with a check to poll",
			ErrStopRun, g.req.Method, driver.RedactURL(g.req.URL))
	}
	g.mine = true
	return g.poll(ctx, a.Status, a.Header)
}

// poll polls the check of a step accepted and not yet settled until the
// check finds it (confirmed with the finding's identifier and status),
// finds something foreign (failed), or the check's poll budget ends: then
// the deposit is unresolved and its intent stays pending, for a later run
// to poll again. Neither Pending nor Absent sends the request again: an
// accepted step may not show yet. header is the last answer's, whose
// Retry-After paces the first poll.
func (g *stepSend) poll(ctx context.Context, status int, header http.Header) (string, error) {
	r, s, c := g.r, g.s, g.r.c
	p := c.policy.WithDefaults()
	budget := cmp.Or(s.Check.Poll, p.MaxElapsed)
	policy := backoff.Policy{Base: p.Base, Cap: p.Cap, RetryAfterCap: p.RetryAfterCap, MaxAttempts: math.MaxInt, MaxElapsed: budget}
	start, polls, last := time.Now(), 0, ""
	for {
		wait, stop := policy.Next(ctx, polls+1, &http.Response{Header: header}, time.Since(start), nil)
		if stop == nil && isDraining(r.drain) {
			stop = ErrInterrupted
		}
		if stop != nil {
			return "", g.notSettled(ctx, polls, time.Since(start), last, stop)
		}
		if err := g.x.sleep(ctx, wait); err != nil {
			return "", g.notSettled(ctx, polls, time.Since(start), last, err)
		}
		x := c.newExchange(r.key, r.drain)
		x.since = g.x.since
		f, err := x.runCheck(ctx, s.Check, g.prior, false)
		polls++
		r.res.Requests += x.requests
		r.res.Retries += x.retries
		if err != nil {
			if err = r.checkFailed(ctx, s, err); !errors.Is(err, ErrTerminal) {
				err = fmt.Errorf("accepted, not yet settled: %w", err)
			}
			return "", err
		}
		switch f.Kind {
		case driver.Present:
			return r.confirm(ctx, s, exists(g.mine), cmp.Or(f.ID, g.fallback), status)
		case driver.Foreign:
			return "", r.fail(ctx, s, f.herr)
		}
		header, last = f.header, f.Problem
	}
}

// notSettled is the error of a step whose polling stopped (why) before it
// settled, after polls polls over elapsed; last is the last finding's
// problem. The deposit is unresolved (interrupted, when the run is
// stopping).
func (g *stepSend) notSettled(ctx context.Context, polls int, elapsed time.Duration, last string, why error) error {
	sentinel := ErrUnresolved
	if ctx.Err() != nil || errors.Is(why, ErrInterrupted) {
		sentinel = ErrInterrupted
	}
	return fmt.Errorf("%w: %s %s: %w; a later run polls again and never re-sends it: %w",
		sentinel, g.req.Method, driver.RedactURL(g.req.URL), &NotSettledError{Polls: polls, Elapsed: elapsed, Last: last}, why)
}

// isDraining reports whether the batch is shutting down.
func isDraining(drain <-chan struct{}) bool {
	select {
	case <-drain:
		return true
	default:
		return false
	}
}

// exists is the outcome of a step found to exist: created when mine (an
// attempt of this deposit may have made it), else existing (nothing this
// deposit sent could have: another client's, or a store that was lost
// without a scan to recover it).
func exists(mine bool) Outcome {
	if mine {
		return OutcomeCreated
	}
	return OutcomeExisting
}

// checkFailed settles a step whose check failed: a terminal answer (a
// foreign record at our name) is recorded as failed; anything else leaves
// the intent pending.
func (r *runDeposit) checkFailed(ctx context.Context, s *step, err error) error {
	var herr *HTTPError
	if errors.Is(err, ErrTerminal) && errors.As(err, &herr) {
		return r.fail(ctx, s, herr)
	}
	return err
}

// confirm records a confirmed outcome of step s and returns the step's
// identifier: the first one recorded, should another process have confirmed
// the step with another. It runs even when ctx has ended: the server has
// spoken, and forgetting its answer would only cost a request.
func (r *runDeposit) confirm(ctx context.Context, s *step, outcome Outcome, id string, status int) (string, error) {
	ctx = context.WithoutCancel(ctx)
	switch {
	case s.Durable && s == r.last && r.outs != nil:
		// Nothing is sent after the last step: its outcome is recorded
		// with others', and the deposit ends once it is.
		r.end = &ending{c: r.c, ref: dedup.Ref{Target: s.Target, Key: s.Key}, primary: s.Primary,
			conf: dedup.Confirmation{Outcome: outcome.stored(), Identifier: id, Status: status}}
	case s.Durable:
		rec, err := r.c.store.Complete(ctx, s.Target, s.Key, dedup.Confirmation{Outcome: outcome.stored(), Identifier: id, Status: status})
		switch {
		case errors.Is(err, dedup.ErrConflict):
			r.c.log.Warn("key already confirmed with another identifier; keeping the first",
				"key", s.Key, "first", rec.Identifier, "now", id)
			id = rec.Identifier
		case err != nil:
			return "", r.c.storeError(err)
		}
	}
	if r.c.debug() {
		r.c.log.Debug("settled", "key", s.Key, "step", cmp.Or(s.Label, "create"), "outcome", outcome, "identifier", driver.RedactURL(id), "status", status)
	}
	if s.Primary {
		r.primaryDone = true
		r.res.Outcome, r.res.Identifier, r.res.Status = outcome, id, status
	}
	return id, nil
}

// fail records a terminal answer to step s and returns the error for it.
// The failure is the step's, and the deposit's too while its primary step
// is not done.
func (r *runDeposit) fail(ctx context.Context, s *step, herr *HTTPError) error {
	ctx = context.WithoutCancel(ctx)
	r.res.Status = herr.StatusCode
	problem := cmp.Or(herr.Problem, http.StatusText(herr.StatusCode))
	if s.Durable && !s.Primary {
		f := dedup.Failure{Status: herr.StatusCode, Problem: s.Label + ": " + problem}
		if _, err := r.c.store.Fail(ctx, s.Target, s.Key, f); err != nil && !errors.Is(err, dedup.ErrInvalidTransition) {
			return r.c.storeError(err)
		}
	}
	if !r.primaryDone {
		p := r.primary
		if _, err := r.c.store.Fail(ctx, p.Target, p.Key, dedup.Failure{Status: herr.StatusCode, Problem: problem}); err != nil {
			if errors.Is(err, dedup.ErrInvalidTransition) && s.Primary {
				// Another process confirmed the deposit meanwhile: that
				// stands.
				if rec, lerr := r.c.store.Lookup(ctx, p.Target, p.Key); lerr == nil && rec.State == dedup.StateDone {
					r.replay(rec)
					return nil
				}
			}
			if !errors.Is(err, dedup.ErrInvalidTransition) {
				return r.c.storeError(err)
			}
		}
	}
	return fmt.Errorf("%w: %w", ErrTerminal, herr)
}

// stepError names the step labelled label, other than the create, in an
// error it returned.
func stepError(label string, err error) error {
	if err == nil || label == "" {
		return err
	}
	return fmt.Errorf("%s step: %w", label, err)
}

// recordedFailure is the error for step s, which an earlier run recorded as
// failed in rec: the same shape as when the server refused it (ErrTerminal
// wrapping an *HTTPError with the recorded status and problem), the
// deposit's Status the recorded one.
func (r *runDeposit) recordedFailure(s *step, prior []string, rec dedup.Record) error {
	r.res.Status = rec.Status
	herr := &HTTPError{StatusCode: rec.Status, Problem: rec.Problem}
	if s.Label != "" {
		herr.Problem = strings.TrimPrefix(herr.Problem, s.Label+": ") // stepError names the step
	}
	if herr.Problem == http.StatusText(rec.Status) {
		herr.Problem = "" // fail recorded the status text for an answer without one
	}
	if s.Build == nil {
		// A step sent in parts builds its requests from its upload.
	} else if req, err := s.Build(prior); err == nil {
		herr.Method, herr.URL = req.Method, driver.RedactURL(req.URL)
	}
	return fmt.Errorf("%w (recorded by an earlier run; re-sent only when retrying failures deliberately): %w",
		ErrTerminal, herr)
}

// storeError is a store call's error as the deposit's: it stops the run,
// unless the deposit's own context ended the call (its lease was lost, or
// the batch's grace ran out), which leaves the item unresolved alone.
func (c *Client) storeError(err error) error {
	var outage *outageError
	if !errors.As(err, &outage) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("%w: store: %w", ErrUnresolved, err)
	}
	return fmt.Errorf("%w: store: %w", ErrStopRun, err)
}

// withUserHeader returns h with the caller's headers added. New refused any
// that would replace a header the target sets for exactly-once, so the
// target's win only where both name the same harmless header.
func (c *Client) withUserHeader(h http.Header) http.Header {
	if h == nil {
		h = http.Header{}
	}
	for name, values := range c.header {
		if _, set := h[name]; !set {
			h[name] = values
		}
	}
	return h
}

// debug reports whether the log takes Debug records: only then is a
// line's identifier parsed to be redacted (about 5% of a replay's CPU).
func (c *Client) debug() bool { return c.log.Enabled(context.Background(), slog.LevelDebug) }

// warnOnce logs msg the first time this client meets it.
func (c *Client) warnOnce(msg string, args ...any) {
	if _, seen := c.warned.LoadOrStore(msg, true); !seen {
		c.log.Warn(msg, args...)
	}
}
