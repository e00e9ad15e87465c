package client

import (
	"context"
	"errors"
	"sync"

	"github.com/depositkit/deposit/dedup"
)

// lookups coalesces concurrent store look-ups of one target into one
// LookupMany query. A batch of eight keys costs little more than one key,
// so replaying a finished batch at concurrency 8 is bound by the store's
// per-row work, not its per-query overhead.
type lookups struct {
	store Store

	mu      sync.Mutex
	targets map[string]*coalescer[*lookupCall]
}

type lookupCall struct {
	key  string
	rec  dedup.Record
	err  error
	done chan struct{}
}

// lookup returns the record of key, or an error wrapping dedup.ErrNotFound.
func (l *lookups) lookup(ctx context.Context, target, key string) (dedup.Record, error) {
	call := &lookupCall{key: key, done: make(chan struct{})}
	l.mu.Lock()
	q := l.targets[target]
	if q == nil {
		if l.targets == nil {
			l.targets = make(map[string]*coalescer[*lookupCall])
		}
		q = &coalescer[*lookupCall]{run: func(batch []*lookupCall) { l.run(target, batch) }}
		l.targets[target] = q
	}
	l.mu.Unlock()
	if !q.add(call) {
		select {
		case <-call.done:
		case <-ctx.Done():
			return dedup.Record{}, ctx.Err()
		}
	}
	return call.rec, call.err
}

// run answers one batch. The query runs on a context of its own: it answers
// other callers too, and a read is bounded by the store's busy timeout.
func (l *lookups) run(target string, batch []*lookupCall) {
	keys := make([]string, len(batch))
	for i, c := range batch {
		keys[i] = c.key
	}
	var (
		recs map[string]dedup.Record
		err  error
	)
	if len(keys) == 1 {
		var rec dedup.Record
		rec, err = l.store.Lookup(context.Background(), target, keys[0])
		if err == nil {
			recs = map[string]dedup.Record{keys[0]: rec}
		}
	} else {
		recs, err = l.store.LookupMany(context.Background(), target, keys)
	}
	for _, c := range batch {
		switch rec, ok := recs[c.key]; {
		case err != nil && !(len(keys) == 1 && isNotFound(err)):
			c.err = err
		case ok:
			c.rec = rec
		default:
			c.err = dedup.ErrNotFound
		}
		close(c.done)
	}
}

func isNotFound(err error) bool { return errors.Is(err, dedup.ErrNotFound) }
