package client

import "sync"

// A coalescer turns concurrent calls into groups, so that one store query
// or transaction serves many callers: the first caller to arrive while no
// group runs becomes the leader and runs the group of every call queued,
// again and again until the queue is empty; the others wait for their own
// call to be done. A lone caller pays one mutex round more than a direct
// call.
type coalescer[C any] struct {
	// run carries out a group of calls and marks each one done.
	run func(group []C)
	// max bounds a group; 0 means no bound.
	max int

	mu      sync.Mutex
	queue   []C
	running bool
}

// add queues c and, unless a leader is running, leads until the queue is
// empty. It reports whether the caller led, in which case c is done; a
// follower waits for c by its own means.
func (q *coalescer[C]) add(c C) (led bool) {
	q.mu.Lock()
	q.queue = append(q.queue, c)
	if q.running {
		q.mu.Unlock()
		return false
	}
	q.running = true
	for len(q.queue) > 0 {
		n := len(q.queue)
		if q.max > 0 {
			n = min(n, q.max)
		}
		group := q.queue[:n:n]
		q.queue = q.queue[n:]
		q.mu.Unlock()
		q.run(group)
		q.mu.Lock()
	}
	q.running = false
	q.mu.Unlock()
	return true
}
