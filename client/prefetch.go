package client

import (
	"context"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
)

// A batch's items pass through a look-ahead before its workers: it computes
// their keys and, while the store keeps answering them, looks a group of
// them up in one LookupMany per step target. An item whose deposit the
// store shows finished is reported replayed there, without a deposit
// goroutine, a lease or a request: exactly what the engine would answer it
// (runStepsOnce, whose look-ups find every step done). Every other item goes
// to the engine: what the look-ahead saw decides nothing for it, though
// once the endpoint takes deposits the look-ahead claims the intents of
// one-step deposits on their way, 64 in one commit (ahead.go).
//
// Groups grow while every item of a group is answered (replaying a finished
// batch), and shrink to one at the first item that is not, after which the
// look-ahead stands aside for a growing number of items before it looks
// again: a first run pays about one look-up per doubling, not one per
// item.

const (
	// maxGroup bounds the items looked up in one query.
	maxGroup = 256
	// groupWait bounds how long a group waits for more input once it has
	// its first item, so that slow input (a pipe) is not held back.
	groupWait = 2 * time.Millisecond
)

// doneLooker is a store that looks up only the done rows among keys, and
// reads only what answering them needs, appending one record per key to
// dst (the zero Record for a key not done); *dedup.SQLite is one. With a
// store that is not, the look-ahead uses LookupMany.
type doneLooker interface {
	LookupDone(ctx context.Context, target string, keys []string, dst []dedup.Record) ([]dedup.Record, error)
}

// job is an item on its way to a worker, with its key when the look-ahead
// computed it.
type job struct {
	it Item
	k  *canonical.Keyed
	// ahead is the claim of its intent the look-ahead made, if any.
	ahead *claimAhead
}

// lookAhead is one goroutine of a batch's look-ahead.
type lookAhead struct {
	c      *Client
	ctx    context.Context // for the store's look-ups
	shard  Shard
	drain  <-chan struct{}
	report func(ItemResult)
	work   chan<- job
	// off disables look-ups, for a batch that must run its items strictly
	// in input order.
	off bool
	// ahead claims intents ahead (nil: never).
	ahead *claimsAhead
	// objects, with an identity, holds back a line of an object another
	// line of which is running: it runs next, in the same worker.
	objects *objectQueue

	group, skip, backoff int
	items                []Item
	keyed                []job

	// What answer looks up, kept from group to group so that a group
	// allocates nothing per item: the steps of each job, one query per
	// store target, the rows the jobs ask for (in job order), and the
	// records the queries returned.
	steps   [][]step
	queries []query
	asks    []ask
	recs    []dedup.Record
	missed  []job // the jobs passed on
}

// query is the look-up of one store target for a group: its keys, and
// whether rows count in any state (a recheck's) or only when done.
type query struct {
	target string
	full   bool
	keys   []string
	first  int // index in lookAhead.recs of the record of keys[0]
}

// ask is one row a job's steps need: its target and key, where the answer
// will be (query q, key at), and then the record (nil when there is none,
// or, for a query that is not full, it is not done).
type ask struct {
	job         int
	target, key string
	q, at       int
	rec         *dedup.Record
}

// found are the asks of one job; get returns the record of a row, nil
// when there is none. A deposit has a handful of steps, so a scan beats a
// map.
type found []ask

func (f found) get(target, key string) *dedup.Record {
	for i := range f {
		if f[i].target == target && f[i].key == key {
			return f[i].rec
		}
	}
	return nil
}

// run takes items from queue until it is closed.
func (a *lookAhead) run(queue <-chan Item) {
	a.group, a.backoff = 1, 1
	for it := range queue {
		a.items = append(a.items[:0], it)
		want := a.group
		if a.ahead.active() {
			want = max(want, a.ahead.groupSize())
		}
		if want > 1 {
			a.gather(queue, want)
		}
		a.keyed = a.keyed[:0]
		// The group's keys share one allocation, new for each group (the
		// jobs passed on keep theirs), and never moved: its capacity is
		// the group's.
		keys := make([]canonical.Keyed, 0, len(a.items))
		for _, it := range a.items {
			if it.Dataset != nil { // its key reads files: a worker's job
				a.pass(job{it: it})
				continue
			}
			k, r := a.c.keyItem(it, a.shard)
			if r != nil {
				a.report(*r)
				continue
			}
			keys = append(keys, k)
			a.keyed = append(a.keyed, job{it: it, k: &keys[len(keys)-1]})
		}
		if len(a.keyed) == 0 {
			continue
		}
		if a.off || a.skip > 0 {
			a.skip = max(0, a.skip-len(a.keyed))
			a.passAll(a.keyed)
			continue
		}
		if missed := a.answer(a.keyed); missed == 0 {
			a.group = min(2*a.group, maxGroup)
			a.backoff = 1
		} else {
			a.group, a.skip = 1, a.backoff
			a.backoff = min(2*a.backoff, maxGroup)
		}
	}
}

// gather adds to a.items what queue yields within groupWait, up to n.
func (a *lookAhead) gather(queue <-chan Item, n int) {
	t := time.NewTimer(groupWait)
	defer t.Stop()
	for len(a.items) < n {
		// An item already offered is taken without the three-way select,
		// which locks all three channels: gathering a group of a batch
		// read from a file is mostly that.
		select {
		case it, ok := <-queue:
			if !ok {
				return
			}
			a.items = append(a.items, it)
			continue
		default:
		}
		select {
		case it, ok := <-queue:
			if !ok {
				return
			}
			a.items = append(a.items, it)
		case <-t.C:
			return
		case <-a.drain:
			return
		}
	}
}

// passAll hands jobs to the workers in order, once the intents of those
// it can are claimed ahead.
func (a *lookAhead) passAll(jobs []job) {
	if a.ahead.active() {
		a.ahead.claim(a.ctx, jobs)
	}
	for _, j := range jobs {
		a.pass(j)
	}
}

// pass hands j to the workers, or reports it unresolved if the batch is
// stopping.
func (a *lookAhead) pass(j job) {
	if obj := j.object(); obj != "" && !a.objects.enter(obj, j) {
		return
	}
	select {
	case a.work <- j:
	case <-a.drain:
		a.ahead.forget(a.ctx, j.ahead)
		var key string
		if j.k != nil {
			key = j.k.Key
		}
		a.report(ItemResult{Line: j.it.Line, Result: Result{Key: key, Outcome: OutcomeUnresolved}, Err: ErrInterrupted})
	}
}

// answer looks jobs up, reports those the store shows finished and passes
// the others on, in input order. It returns how many it passed on.
func (a *lookAhead) answer(jobs []job) (missed int) {
	c := a.c
	_, seeds := seederOf(c.target)
	a.steps, a.queries, a.asks, a.recs, a.missed = a.steps[:0], a.queries[:0], a.asks[:0], a.recs[:0], a.missed[:0]
	for i, j := range jobs {
		ss, err := c.stepsOf(*j.k, source{})
		if err != nil {
			ss = nil // the engine reports it
		}
		a.steps = append(a.steps, ss)
		for _, s := range ss {
			if s.Durable {
				a.ask(i, s.Target, s.Key, false)
			}
			if seeds && s.Recheck != "" && s.Check != nil {
				a.ask(i, s.Recheck, s.Key, true)
			}
		}
	}
	// A step's row counts only when done; a recheck's row in any state.
	if a.look() {
		for i := range a.asks {
			q := &a.queries[a.asks[i].q]
			if rec := &a.recs[q.first+a.asks[i].at]; rec.State != "" {
				a.asks[i].rec = rec
			}
		}
	} else {
		// The engine meets the error again and stops the batch.
		clear(a.steps)
	}
	next := 0
	for i, j := range jobs {
		from := next
		for next < len(a.asks) && a.asks[next].job == i {
			next++
		}
		if res, ok := c.finished(j.k.Key, a.steps[i], found(a.asks[from:next])); ok {
			a.report(ItemResult{Line: j.it.Line, Result: res})
			continue
		}
		a.missed = append(a.missed, j)
	}
	a.passAll(a.missed)
	return len(a.missed)
}

// ask adds the row (target, key) to the look-ups of job; full says that
// the row counts in any state.
func (a *lookAhead) ask(job int, target, key string, full bool) {
	q := 0
	for q < len(a.queries) && a.queries[q].target != target {
		q++
	}
	if q == len(a.queries) {
		a.queries = append(a.queries, query{target: target})
	}
	a.queries[q].full = a.queries[q].full || full
	a.queries[q].keys = append(a.queries[q].keys, key)
	a.asks = append(a.asks, ask{job: job, target: target, key: key, q: q, at: len(a.queries[q].keys) - 1})
}

// look runs the queries, appending one record per key to a.recs; false if
// one failed.
func (a *lookAhead) look() bool {
	c := a.c
	done, _ := storeAs[doneLooker](c.store)
	for i := range a.queries {
		q := &a.queries[i]
		q.first = len(a.recs)
		if done != nil && !q.full {
			var err error
			if a.recs, err = done.LookupDone(a.ctx, q.target, q.keys, a.recs); err != nil {
				return false
			}
			continue
		}
		got, err := c.store.LookupMany(a.ctx, q.target, q.keys)
		if err != nil {
			return false
		}
		for _, key := range q.keys {
			a.recs = append(a.recs, got[key]) // the zero Record when absent
		}
	}
	return true
}

// finished is the result of the deposit of key with steps when the rows
// f holds show it finished: its last step durable and done, which means
// every step before it is (steps run in order), its primary step done, and
// no recheck noted for it still open. It is the result runStepsOnce gives
// when its look-ups find the same rows. ok is false otherwise.
func (c *Client) finished(key string, steps []step, f found) (_ Result, ok bool) {
	if len(steps) == 0 {
		return Result{}, false
	}
	if s := steps[len(steps)-1]; !s.Durable || !isDone(f.get(s.Target, s.Key)) {
		return Result{}, false
	}
	_, seeds := seederOf(c.target)
	var primary *dedup.Record
	prior := make([]string, len(steps))
	for i, s := range steps {
		if seeds && s.Recheck != "" && s.Check != nil {
			if rec := f.get(s.Recheck, s.Key); rec != nil && rec.State != dedup.StateDone {
				return Result{}, false // prepare looks again
			}
		}
		if !s.Durable {
			continue
		}
		rec := f.get(s.Target, s.Key)
		if rec != nil {
			prior[i] = rec.Identifier
		}
		if s.Primary {
			primary = rec
		}
	}
	if !isDone(primary) {
		return Result{}, false
	}
	r := runDeposit{c: c, key: key, res: Result{Key: key}}
	r.replay(*primary) // and logs it, as the engine does
	r.noteRecordID(steps, prior)
	return r.res, true
}

func isDone(rec *dedup.Record) bool { return rec != nil && rec.State == dedup.StateDone }
