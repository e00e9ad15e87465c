package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/depositkit/deposit/dedup"
)

// manyConfirmer is a store that records many confirmations in one
// transaction and returns the keys that were done already with another
// identifier, each with the identifier that stays; *dedup.SQLite and
// *dedup.Postgres are. With a store that is not, a batch records each
// outcome before it takes up the next item.
type manyConfirmer interface {
	ConfirmMany(ctx context.Context, target string, items map[string]dedup.Confirmation) (map[string]string, error)
}

const (
	// maxOutcomes bounds the outcomes of one ConfirmMany.
	maxOutcomes = 1024
	// A group of fewer than lingerBelow outcomes waits outcomeLinger for
	// more before it is written. A commit writes each page its rows touch,
	// so small groups cost the store's CPU, which the requests in flight
	// and the server share; with no latency at concurrency 8, waiting 1 ms
	// made groups of about 20, waiting 4 ms about 64. No worker waits for
	// it: only the deposits' results, by a few milliseconds.
	lingerBelow   = 256
	outcomeLinger = 4 * time.Millisecond
	// outcomeRoom bounds the outcomes of a batch not yet recorded: a worker
	// that would exceed it waits, holding no request slot.
	outcomeRoom = 4 * maxOutcomes
)

// outcomes records the last outcome of a batch's deposits in groups, off
// the workers' path: a worker hands over the server's confirmation and
// takes up its next item, and the deposit ends (its result delivered, its
// lease and its key's in-process followers released) once the group that
// holds the outcome has committed. A group is whatever arrived while the
// previous one was being written, so a slow store gets larger groups; a
// small group waits a few milliseconds for more (no worker waits for it).
//
// Nothing is sent after an outcome handed over, so the crash rules hold:
// the intent was durable before the request, and a deposit is done, and
// reported, only once its outcome is. A crash before the commit leaves the
// row pending, which the next run settles (and counts as recovered).
type outcomes struct {
	store manyConfirmer
	room  chan struct{}
	wg    sync.WaitGroup // outcomes handed over and not yet ended

	mu      sync.Mutex
	queue   []*ending
	running bool
}

// An ending is a deposit waiting for its last outcome to be recorded.
type ending struct {
	ref  dedup.Ref
	conf dedup.Confirmation
	// primary says the outcome is the deposit's own: a confirmation that
	// lost to an earlier one gives the deposit the earlier identifier.
	primary bool

	// res and err are the deposit's result; recorded fixes them once the
	// store has answered.
	res Result
	err error
	// then runs, in order, once the outcome is recorded or could not be.
	then []func(*ending)
	c    *Client
}

func newOutcomes(store Store) *outcomes {
	m, ok := storeAs[manyConfirmer](store)
	if !ok {
		return nil
	}
	return &outcomes{store: m, room: make(chan struct{}, outcomeRoom)}
}

// after adds f to what runs once e's outcome is recorded.
func (e *ending) after(f func(*ending)) { e.then = append(e.then, f) }

// hand queues e; the caller gives up e, which ends on another goroutine.
func (o *outcomes) hand(e *ending) {
	o.room <- struct{}{}
	o.wg.Add(1)
	o.mu.Lock()
	o.queue = append(o.queue, e)
	if !o.running {
		o.running = true
		go o.run()
	}
	o.mu.Unlock()
}

// wait returns once every outcome handed over has ended.
func (o *outcomes) wait() { o.wg.Wait() }

// run records groups until the queue is empty.
func (o *outcomes) run() {
	for {
		o.mu.Lock()
		if len(o.queue) < lingerBelow {
			o.mu.Unlock()
			time.Sleep(outcomeLinger)
			o.mu.Lock()
		}
		n := min(len(o.queue), maxOutcomes)
		if n == 0 {
			o.running = false
			o.mu.Unlock()
			return
		}
		group := o.queue[:n:n]
		o.queue = o.queue[n:]
		o.mu.Unlock()
		o.record(group)
		for _, e := range group {
			for _, f := range e.then {
				f(e)
			}
			<-o.room
			o.wg.Done()
		}
	}
}

// record writes group, one ConfirmMany per target; a target's row comes
// at most once in a ConfirmMany, a second outcome for it goes in the next.
func (o *outcomes) record(group []*ending) {
	ctx := context.Background()
	for len(group) > 0 {
		byTarget := map[string]map[string]dedup.Confirmation{}
		var later []*ending
		var now []*ending
		for _, e := range group {
			items := byTarget[e.ref.Target]
			if items == nil {
				items = map[string]dedup.Confirmation{}
				byTarget[e.ref.Target] = items
			}
			if _, dup := items[e.ref.Key]; dup {
				later = append(later, e)
				continue
			}
			items[e.ref.Key] = e.conf
			now = append(now, e)
		}
		firsts := map[string]map[string]string{}
		failed := map[dedup.Ref]error{}
		for target, items := range byTarget {
			f, err := o.confirm(ctx, target, items, failed)
			if err != nil {
				for k := range items {
					failed[dedup.Ref{Target: target, Key: k}] = err
				}
				continue
			}
			firsts[target] = f
		}
		for _, e := range now {
			if err := failed[e.ref]; err != nil {
				e.recorded("", err)
				continue
			}
			e.recorded(firsts[e.ref.Target][e.ref.Key], nil)
		}
		group = later
	}
}

// confirm writes items with one ConfirmMany. The store refuses the whole
// group for one confirmation it cannot take (one without an identifier):
// then each is written alone, and only the ones refused are added to
// failed, each with its error.
func (o *outcomes) confirm(ctx context.Context, target string, items map[string]dedup.Confirmation, failed map[dedup.Ref]error) (map[string]string, error) {
	f, err := o.store.ConfirmMany(ctx, target, items)
	switch {
	case err == nil || errors.Is(err, dedup.ErrConflict):
		return f, nil
	case !errors.Is(err, dedup.ErrInvalidArgument) || len(items) == 1:
		return nil, err
	}
	firsts := map[string]string{}
	for k, c := range items {
		f, err := o.store.ConfirmMany(ctx, target, map[string]dedup.Confirmation{k: c})
		if err != nil && !errors.Is(err, dedup.ErrConflict) {
			failed[dedup.Ref{Target: target, Key: k}] = err
			continue
		}
		maps.Copy(firsts, f)
	}
	return firsts, nil
}

// recorded settles e with the store's answer: the identifier that stays
// when the key was done already with another (else ""), or the error that
// kept the outcome from being written.
func (e *ending) recorded(first string, err error) {
	c := e.c
	switch {
	case errors.Is(err, dedup.ErrInvalidArgument):
		// A confirmation the store cannot take (no identifier) settles
		// nothing: the row stays pending, for the next run to look for.
		e.err = fmt.Errorf("%w: %w", ErrUnresolved, err)
		e.res.Outcome = OutcomeUnresolved
	case err != nil:
		e.err = c.storeError(err)
		e.res.Outcome = OutcomeOf(e.err)
	case first != "" && first != e.conf.Identifier:
		c.log.Warn("key already confirmed with another identifier; keeping the first",
			"key", e.ref.Key, "first", first, "now", e.conf.Identifier)
		if e.primary {
			e.res.Identifier = first
		}
	}
}
