package client

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every call added to a coalescer runs exactly once, in a group no larger
// than its bound, whichever caller leads; a lone caller leads its own.
func TestACoalescerRunsEveryCallOnceInBoundedGroups(t *testing.T) {
	type call struct {
		ran  atomic.Int64
		done chan struct{}
	}
	var groups, largest atomic.Int64
	q := coalescer[*call]{max: 5}
	q.run = func(group []*call) {
		groups.Add(1)
		if n := int64(len(group)); n > largest.Load() {
			largest.Store(n)
		}
		for _, c := range group {
			c.ran.Add(1)
			close(c.done)
		}
	}
	lone := &call{done: make(chan struct{})}
	require.True(t, q.add(lone), "a lone caller leads")
	require.EqualValues(t, 1, lone.ran.Load())

	const n = 2000
	calls := make([]*call, n)
	var wg sync.WaitGroup
	for i := range calls {
		calls[i] = &call{done: make(chan struct{})}
		wg.Go(func() {
			if !q.add(calls[i]) {
				<-calls[i].done
			}
		})
	}
	wg.Wait()
	for i, c := range calls {
		require.EqualValues(t, 1, c.ran.Load(), "call %d", i)
	}
	require.LessOrEqual(t, largest.Load(), int64(5))
	require.LessOrEqual(t, groups.Load(), int64(n+1))
}
