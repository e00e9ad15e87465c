package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/depositkit/deposit/canonical"
)

// Item is one entry of a batch: a payload, or a dataset, or an input error.
type Item struct {
	// Line identifies the item in the caller's input (a 1-based line
	// number, say); it is passed back in the ItemResult untouched.
	Line int64
	// Payload is the JSON payload to deposit.
	Payload []byte
	// Dataset, when set, deposits a dataset instead of Payload.
	Dataset *Dataset
	// Err reports an input error found by the caller (a line too long, say):
	// the item is reported invalid with this error and nothing is sent.
	Err error
}

// Dataset is a dataset deposit: metadata plus files relative to Dir.
type Dataset struct {
	Dir      string
	Metadata []byte
	Files    []string
}

// ItemResult is what became of one Item.
type ItemResult struct {
	Line int64
	Result
	// Err is nil for created, existing and replayed items.
	Err error
	// FollowUp reports that this result replaces the one delivered earlier
	// for the same item: that one was unresolved, and a later result of the
	// batch with the same key (a later line's, say) has since settled it.
	// A follow-up is replayed, with the identifier of the result that
	// settled the key, or failed with its error; Requests and Retries are
	// those the item itself sent, as in its first result. See
	// BatchOptions.OnResult for which result of an item is its final one.
	FollowUp bool
}

// BatchOptions tunes Run.
type BatchOptions struct {
	// Concurrency is the number of requests in flight at once; default 4.
	// An item waiting to retry holds no such slot: others are sent
	// meanwhile.
	Concurrency int
	// Waiting bounds the items that may wait for a retry at once, beyond
	// those in flight; reading items pauses while that many wait, so memory
	// stays flat. Until the endpoint has accepted a deposit, items beyond
	// Concurrency are taken up only as others start to wait, so a batch
	// stopped by its first answers has begun few; after that, 3 more per
	// slot record their intents while others are sent. 0 means 128 ×
	// Concurrency (an item waiting out a 1 s Retry-After is one of many:
	// fewer, and the batch is bound by how many may wait); a negative
	// Waiting means none: with Concurrency 1 the items then run strictly
	// one after another, in input order, each recorded before the next.
	Waiting int
	// OnResult receives every item's result as soon as it is known, in
	// completion order. Calls are serialised: the callback needs no locking
	// of its own.
	//
	// An item gets one result, or two: one delivered unresolved may be
	// followed up, later in the batch, when a later result with the same
	// key settles it (a later line of that key, whose deposit the engine
	// sends again): the follow-up, with FollowUp set, comes right after the
	// result that settled the key. An item's final result is the last one
	// delivered for it: its follow-up if it has one, else its only result.
	// A follow-up is never unresolved and is never followed up itself. The
	// Summary counts each item's final result once. A batch remembers at
	// most 16,384 unresolved items at a time for follow-ups (memory stays
	// flat); one reported unresolved while that many wait gets no
	// follow-up, and its unresolved result is its final one.
	OnResult func(ItemResult)
	// Grace is how long requests already in flight may take to finish after
	// ctx is cancelled, so their outcomes are recorded; default 10 s. No new
	// request or retry starts once ctx is cancelled.
	Grace time.Duration
	// OnStop, when set, is called once when the batch stops sending (ctx
	// cancelled, or an answer that stops the run), as soon as it does:
	// a program can say at once what it waits for. It may be called
	// concurrently with OnResult.
	OnStop func(StopEvent)
	// Shard, when its Count is over 1, deposits only the items whose key
	// falls in shard Index (0 ≤ Index < Count); the others are reported
	// OutcomeSkipped. N processes given the same input and shards 0..N-1
	// split it by key. Without sharding, processes sharing a store split
	// the work anyway, through the keys' leases.
	Shard Shard
}

// pipelineWorkers is how many workers per slot a batch adds once its
// endpoint takes deposits: a worker records its item's intent (a store
// commit) before it can send, so with only one worker per slot the slots
// would idle while intents are written.
const pipelineWorkers = 3

// Shard names one of Count parts of the key space.
type Shard struct{ Index, Count int }

// holds reports whether key falls in the shard: the first 64 bits of the
// (hex SHA-256) key, modulo Count.
func (s Shard) holds(key string) bool {
	if s.Count <= 1 {
		return true
	}
	n, err := strconv.ParseUint(key[:min(16, len(key))], 16, 64)
	if err != nil {
		return true
	}
	return n%uint64(s.Count) == uint64(s.Index)
}

// Summary counts what a batch did. Total is the sum of the outcomes:
// created, existing, replayed, updated, stale, failed, invalid and
// unresolved (updated and stale only with an identity).
type Summary struct {
	Total, Created, Existing, Replayed, Failed, Invalid, Unresolved int
	// Updated counts the objects' new versions applied, Stale the lines
	// of versions older than the one their object holds (nothing sent).
	Updated, Stale int
	// NotSent counts the Unresolved items that sent no request in this
	// batch (Requests 0): read, but stopped, interrupted or waiting for
	// another process's lease before their first request. What the server
	// holds for them is what earlier runs or other processes left.
	NotSent int
	// Skipped counts items left to other shards (BatchOptions.Shard), apart
	// from Total.
	Skipped int
	// LeasesLost counts the leases the client gave up while the batch ran
	// (Client.LeasesLost): their deposits stopped, unresolved.
	LeasesLost int
	// Recovered counts items an earlier run had left pending and this
	// batch settled.
	Recovered int
	// Requests counts HTTP requests sent, Retries those that repeated one.
	Requests, Retries int
	Elapsed           time.Duration
	// Rechecks counts the Requests that looked again for records created
	// after a search had found nothing (Result.Rechecks), replays' included.
	Rechecks int
}

// retract takes back what the unresolved result of l added, before its
// follow-up is added in its place: each item is counted by its final result.
func (s *Summary) retract(l unsettledLine) {
	s.Total--
	s.Unresolved--
	if l.requests == 0 {
		s.NotSent--
	}
	s.Requests -= l.requests
	s.Retries -= l.retries
	s.Rechecks -= l.rechecks
}

func (s *Summary) add(r ItemResult) {
	if r.Outcome == OutcomeSkipped {
		s.Skipped++
		return
	}
	s.Total++
	switch r.Outcome {
	case OutcomeCreated:
		s.Created++
	case OutcomeExisting:
		s.Existing++
	case OutcomeReplayed:
		s.Replayed++
	case OutcomeUpdated:
		s.Updated++
	case OutcomeStale:
		s.Stale++
	case OutcomeFailed:
		s.Failed++
	case OutcomeInvalid:
		s.Invalid++
	default:
		s.Unresolved++
		if r.Requests == 0 {
			s.NotSent++
		}
	}
	if r.Recovered && r.Err == nil {
		s.Recovered++
	}
	s.Requests += r.Requests
	s.Retries += r.Retries
	s.Rechecks += r.Rechecks
}

// StopEvent is a batch that stops sending (BatchOptions.OnStop). From then
// on none of its requests starts: no new item's, no retry, no check or
// read-back, no further step; a request that was waiting for its slot or
// its rate is not sent.
type StopEvent struct {
	// Reason is why: ctx's cause (context.Cause; ctx's error unless the
	// canceller gave one) when ctx was cancelled, else the error that stops
	// the run (ErrStopRun, ErrUnreachable, ...).
	Reason error
	// InFlight counts the requests already sent whose answers the batch
	// awaits: each is read and recorded if it comes by Deadline.
	InFlight int
	// Deadline ends the grace period (BatchOptions.Grace): the requests
	// still unanswered then are abandoned, and their items left unresolved
	// (uncertain: a later run settles them).
	Deadline time.Time
}

// Run deposits every item of items with bounded concurrency and returns the
// summary. Memory does not grow with the number of items: items are pulled
// as workers free up.
//
// Run stops early when an answer concerns every item (ErrStopRun: bad
// credentials, wrong endpoint, an unreachable endpoint, a store failure) and
// returns that error with the summary so far.
//
// Cancelling ctx stops the batch gracefully, as the deposit command does on
// SIGINT: from that moment no request starts (BatchOptions.OnStop says
// so, and how many answers it awaits); the requests already sent get Grace
// for their answers to come and be recorded, and the items not settled are
// reported unresolved. Run returns ctx's error in that case. To abandon the
// requests in flight at once instead, give a short Grace: their outcomes
// stay uncertain in the store, and a later run settles them.
func (c *Client) Run(ctx context.Context, items iter.Seq[Item], opts BatchOptions) (Summary, error) {
	start, lostBefore := time.Now(), c.LeasesLost()
	b, err := c.newBatch(opts)
	if err != nil {
		return Summary{}, err
	}

	// Deposits run on a context that outlives ctx by the grace period, so an
	// interrupted batch records what is in flight; drain stops retries.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	// Store calls waiting out an outage give up once ctx ends.
	defer c.guard.watch(ctx)()
	halted, halt := context.WithCancel(context.Background())
	defer halt()
	// Requests in flight are bounded in the transport, so that waiting for a
	// retry takes no slot; the transport is also where a stopped batch's
	// requests are held back, right before they would be written.
	slots := newRequestSlots(b.slots, halted)
	b.st = &batchStop{drain: halted.Done(), halt: halt, slots: slots, grace: b.grace, cancel: cancelWork, onStop: opts.OnStop}
	slotted := context.WithValue(work, slotsKey{}, slots)
	// The watch of ctx ends before Run returns, so that OnStop is never
	// called after it.
	finished, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-ctx.Done():
			b.st.stop(ctx.Err(), context.Cause(ctx))
		case <-finished:
		}
	}()

	b.startWorkers(slotted)
	queue := make(chan Item)
	awg := b.startLookAhead(work, queue)
	b.feed(items, queue)
	close(queue)
	// The input is all read: the rest of the batch gains little from a
	// higher limit, and a throttle now would keep its last items waiting
	// out a Retry-After after the others are done.
	releasePace := c.pace.Hold()
	defer releasePace()
	awg.Wait()
	close(b.jobs)
	b.wg.Wait()
	if b.outs != nil {
		b.outs.wait()
	}
	close(finished)
	<-watched
	if ctx.Err() == nil && b.st.err() == nil {
		c.sweepLeases(ctx)
	}
	b.sum.Elapsed = time.Since(start)
	b.sum.LeasesLost = int(c.LeasesLost() - lostBefore)
	c.leases.reportUnreleased()
	return b.sum, b.st.err()
}

// batch is the state of one Run: its workers, and the results they
// deliver.
type batch struct {
	c     *Client
	opts  BatchOptions
	slots int
	// waiting is how many workers the batch may add for items waiting to
	// retry; grace how long deposits in flight may run once it stops.
	waiting int
	grace   time.Duration
	st      *batchStop
	// strict: items run one after another, in input order.
	strict bool
	// outs records outcomes in groups (nil when strict, or when the store
	// cannot); pre claims intents ahead (nil unless the store groups
	// claims too).
	outs *outcomes
	pre  *claimsAhead
	// objects queues the lines of an object behind the one running (nil
	// without an identity).
	objects *objectQueue

	jobs      chan job
	wg        sync.WaitGroup
	itemCtx   context.Context // set before the first worker starts
	spare     atomic.Int64    // workers the batch may still add for items waiting to retry
	pipelined atomic.Bool     // the workers that overlap store writes with requests started

	mu        sync.Mutex
	sum       Summary
	unsettled *unsettledLines
}

// newBatch checks opts and sets the batch's defaults: its slots, the items
// that may wait, the grace period, and how its outcomes are recorded.
func (c *Client) newBatch(opts BatchOptions) (*batch, error) {
	if sh := opts.Shard; sh.Count > 1 && (sh.Index < 0 || sh.Index >= sh.Count) {
		return nil, fmt.Errorf("%w: shard %d of %d", ErrConfig, sh.Index, sh.Count)
	}
	slots := opts.Concurrency
	if slots <= 0 {
		slots = 4
	}
	waiting := opts.Waiting
	switch {
	case waiting == 0:
		waiting = 128 * slots
	case waiting < 0:
		waiting = 0
	}
	if c.ownBudget {
		// Every item that may wait holds a retry's tokens while it waits.
		c.budget.Cover(slots + waiting)
	}
	grace := opts.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	// With one slot and no waiting, items run strictly one after another,
	// in input order, each recorded before the next starts.
	b := &batch{c: c, opts: opts, slots: slots, waiting: waiting, grace: grace, jobs: make(chan job),
		strict: slots == 1 && waiting == 0}
	// Otherwise outcomes are recorded in groups, off the workers' path,
	// where the store can (outcomes.go).
	// With an identity, an object's lines run one at a time, in input
	// order: the look-ahead hands them over in that order, and looks up
	// and claims nothing (a line's answer depends on the object's
	// version, not on its key's row).
	if c.identity.on() {
		b.objects = &objectQueue{}
	}
	if !b.strict && b.objects == nil {
		b.outs = newOutcomes(c.store)
	}
	// And where the store groups claims too, the look-ahead claims the
	// intents of one-step deposits ahead, in groups (ahead.go).
	if c.claimsInGroups(b.outs) && b.objects == nil {
		b.pre = newClaimsAhead(c, &b.pipelined)
	}
	// An unresolved item is delivered at once; if its key settles later in
	// the batch, it is delivered again, settled, as a follow-up.
	b.unsettled = newUnsettledLines(maxUnsettledLines)
	return b, nil
}

// emit adds r to the summary and hands it to the caller.
func (b *batch) emit(r ItemResult) {
	b.sum.add(r)
	if b.opts.OnResult != nil {
		b.opts.OnResult(r)
	}
}

// report delivers the result of an item, and the follow-ups of earlier
// unresolved items of its key that it settles.
func (b *batch) report(r ItemResult) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.emit(r)
	switch {
	case r.Key == "" || r.Outcome == OutcomeInvalid || r.Outcome == OutcomeSkipped:
	case r.Outcome == OutcomeUnresolved:
		b.unsettled.add(r)
	default:
		for _, l := range b.unsettled.settle(r.Key) {
			b.sum.retract(l)
			b.emit(l.followUp(r))
		}
	}
}

// settle reports the result of a deposit, stopping the batch first when
// the result says going on is pointless.
func (b *batch) settle(r ItemResult) {
	switch {
	case errors.Is(r.Err, ErrStopRun):
		b.st.stop(r.Err, r.Err)
	case errors.Is(r.Err, ErrUnresolved) && !errors.Is(r.Err, ErrInterrupted) && !b.c.answered.Load():
		// No answer at all from the endpoint, even after every
		// retry: going on would only repeat that for each item.
		err := fmt.Errorf("%w: %w", ErrUnreachable, r.Err)
		b.st.stop(err, err)
	}
	b.report(r)
}

// startWorkers starts one worker per slot, running deposits on slotted.
//
// The batch starts with one worker per slot, and adds one each time an
// item starts to wait for a retry, up to waiting more: a batch that never
// waits reads no further ahead than its slots (a run stopped by its first
// answer has little in flight), one that waits keeps its slots busy.
func (b *batch) startWorkers(slotted context.Context) {
	b.spare.Store(int64(b.waiting))
	b.itemCtx = context.WithValue(slotted, waitKey{}, func() {
		if b.spare.Add(-1) >= 0 {
			b.addWorker()
		}
	})
	for range b.slots {
		b.addWorker()
	}
}

func (b *batch) addWorker() {
	b.wg.Add(1)
	go b.worker()
}

// worker runs the batch's jobs until there are none, delivering each
// result, once its outcome is recorded.
func (b *batch) worker() {
	defer b.wg.Done()
	for j := range b.jobs {
		if obj := j.object(); obj != "" {
			// This worker runs the object's lines queued meanwhile, in
			// order, until none is left.
			for ok := true; ok; j, ok = b.objects.next(obj) {
				r, _ := b.c.runItem(b.itemCtx, j, b.opts.Shard, b.st.drain, nil, nil)
				b.settle(r)
			}
			continue
		}
		r, end := b.c.runItem(b.itemCtx, j, b.opts.Shard, b.st.drain, b.outs, b.pre)
		b.pre.forget(b.itemCtx, j.ahead)
		if !b.strict && !b.pipelined.Load() && (end != nil || r.Err == nil && r.Requests > 0) && !b.pipelined.Swap(true) {
			// The endpoint takes deposits: from now on more workers
			// than slots record intents while others' requests are in
			// flight.
			for range pipelineWorkers * b.slots {
				b.addWorker()
			}
		}
		if end == nil {
			b.settle(r)
			continue
		}
		line := r.Line
		end.after(func(e *ending) { b.settle(itemResult(line, e.res, e.err)) })
		b.outs.hand(end)
	}
}

// startLookAhead starts the look-ahead, which takes items from queue and
// hands them to the workers as jobs.
//
// The look-ahead (prefetch.go) computes keys on every core; a strict
// batch's only computes keys, in one goroutine.
func (b *batch) startLookAhead(work context.Context, queue <-chan Item) *sync.WaitGroup {
	ahead := runtime.GOMAXPROCS(0)
	if b.strict || b.objects != nil {
		ahead = 1
	}
	awg := &sync.WaitGroup{}
	for range ahead {
		a := &lookAhead{c: b.c, ctx: work, shard: b.opts.Shard, drain: b.st.drain, report: b.report, work: b.jobs,
			off: b.strict || b.objects != nil, ahead: b.pre, objects: b.objects}
		awg.Go(func() { a.run(queue) })
	}
	return awg
}

// feed reads items into queue until they end or the batch stops; an item
// that could not be read is reported invalid.
func (b *batch) feed(items iter.Seq[Item], queue chan<- Item) {
	for it := range items {
		if it.Err != nil {
			b.report(ItemResult{Line: it.Line, Result: Result{Outcome: OutcomeInvalid}, Err: fmt.Errorf("%w: %w", ErrInvalid, it.Err)})
			continue
		}
		select {
		case queue <- it:
		case <-b.st.drain:
			// Stopping: this item was read but is not sent.
			b.report(ItemResult{Line: it.Line, Result: Result{Outcome: OutcomeUnresolved}, Err: ErrInterrupted})
			return
		}
	}
}

// batchStop ends a batch once: it halts the batch (drain closes: no new
// request or retry; the transport's gate shuts) and cancels the work
// context after the grace period.
type batchStop struct {
	drain  <-chan struct{}
	halt   context.CancelFunc
	slots  *requestSlots
	grace  time.Duration
	cancel context.CancelFunc
	onStop func(StopEvent)

	mu     sync.Mutex
	reason error
}

// stop ends the batch for reason, the error Run returns; cause is what
// OnStop is told.
func (s *batchStop) stop(reason, cause error) {
	s.mu.Lock()
	if s.reason != nil {
		s.mu.Unlock()
		return
	}
	s.reason = reason
	s.halt()
	// The deadline is taken first: the work ends no sooner.
	deadline := time.Now().Add(s.grace)
	time.AfterFunc(s.grace, s.cancel)
	s.mu.Unlock()
	if s.onStop != nil {
		s.onStop(StopEvent{Reason: cause, InFlight: s.slots.awaited(), Deadline: deadline})
	}
}

func (s *batchStop) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// keyItem computes the key of it; an item that is invalid or left to
// another shard gets its result instead.
func (c *Client) keyItem(it Item, shard Shard) (canonical.Keyed, *ItemResult) {
	var (
		k   canonical.Keyed
		err error
	)
	switch {
	case it.Dataset != nil && c.identity.on():
		k, err = c.datasetObject(it.Dataset.Dir, it.Dataset.Metadata, it.Dataset.Files)
	case it.Dataset != nil:
		k, err = c.keyer.DatasetKey(it.Dataset.Dir, it.Dataset.Metadata, it.Dataset.Files)
	default:
		k, err = c.keyPayload(it.Payload)
	}
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			err = fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return k, &ItemResult{Line: it.Line, Result: Result{Outcome: OutcomeInvalid}, Err: err}
	}
	// An object's lines are one shard's, whatever their content.
	if !shard.holds(cmp.Or(k.Object, k.Key)) {
		return k, &ItemResult{Line: it.Line, Result: Result{Key: k.Key, Outcome: OutcomeSkipped}}
	}
	return k, nil
}

// runItem deposits the item of j, computing its key unless j has it, and
// classifies the result. An item whose last outcome is left to outs is
// returned with its ending, which gives its result once recorded.
func (c *Client) runItem(ctx context.Context, j job, shard Shard, drain <-chan struct{}, outs *outcomes, b *claimsAhead) (ItemResult, *ending) {
	it := j.it
	var k canonical.Keyed
	if j.k != nil {
		k = *j.k
	} else {
		var r *ItemResult
		if k, r = c.keyItem(it, shard); r != nil {
			return *r, nil
		}
	}
	select {
	case <-drain:
		return ItemResult{Line: it.Line, Result: Result{Key: k.Key, Outcome: OutcomeUnresolved}, Err: ErrInterrupted}, nil
	default:
	}
	var dir string
	if it.Dataset != nil {
		dir = it.Dataset.Dir
	}
	if k.Object != "" {
		res, err := c.depositObject(ctx, k, dir, drain)
		return itemResult(it.Line, res, err), nil
	}
	res, end, err := c.deposit(ctx, k, source{dir: dir}, drain, outs, ahead{b: b, e: j.ahead})
	return itemResult(it.Line, res, err), end
}

// itemResult is the result of the item of line: res, classified by err.
func itemResult(line int64, res Result, err error) ItemResult {
	if err != nil {
		res.Outcome = OutcomeOf(err)
	}
	return ItemResult{Line: line, Result: res, Err: err}
}

// waitKey is the context key of a batch's hook for an item that starts to
// wait for a retry.
type waitKey struct{}

// startsWaiting tells the batch, if there is one, that an item starts to
// wait for a retry, so that another item may be taken up meanwhile.
func startsWaiting(ctx context.Context) {
	if f, ok := ctx.Value(waitKey{}).(func()); ok {
		f()
	}
}
