package backoff

import (
	"fmt"
	"sync"
)

// Budget costs, as in the AWS SDK standard retry mode.
const (
	defaultBudget = 500 // tokens in a new budget
	retryCost     = 5   // tokens a retry spends
	timeoutCost   = 10  // tokens a retry after a timeout spends
	successRefill = 1   // tokens a first-try success adds
)

// Budget is a retry budget shared by every request of a batch: a token
// bucket in the manner of the AWS SDK standard retry mode. It starts full;
// each retry spends 5 tokens, or 10 when the failure that caused it was a
// timeout; a retry that succeeds gives its tokens back, and a request that
// succeeds at the first try adds 1, never beyond the capacity. Against a
// failing server the budget drains and retries stop, so the server sees a
// trickle of requests rather than a storm; once it recovers, successes refill
// the budget.
//
// A nil *Budget is an unlimited budget: Spend always succeeds and the other
// methods do nothing. Budget is safe for concurrent use by multiple
// goroutines.
type Budget struct {
	mu       sync.Mutex
	tokens   int
	capacity int
}

// NewBudget returns a full budget of capacity tokens; a capacity of zero or
// less means the default, 500 (100 plain retries). A capacity below 5 allows
// no retries at all.
func NewBudget(capacity int) *Budget {
	if capacity <= 0 {
		capacity = defaultBudget
	}
	return &Budget{tokens: capacity, capacity: capacity}
}

// cost returns the tokens a retry spends.
func cost(timeout bool) int {
	if timeout {
		return timeoutCost
	}
	return retryCost
}

// Spend takes the tokens for one retry: 10 when the failure being retried
// was a timeout, else 5. When fewer are left it takes nothing and returns an
// error wrapping [ErrBudgetExhausted]; the caller should give up on the
// request and keep its last answer.
func (b *Budget) Spend(timeout bool) error {
	if b == nil {
		return nil
	}
	c := cost(timeout)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < c {
		return fmt.Errorf("%w: %d of %d tokens left, a retry needs %d", ErrBudgetExhausted, b.tokens, b.capacity, c)
	}
	b.tokens -= c
	return nil
}

// Refund gives back the tokens that Spend(timeout) took, with the same
// timeout flag: call it when the retry that Spend paid for succeeds.
func (b *Budget) Refund(timeout bool) {
	b.add(cost(timeout))
}

// Success adds 1 token: call it when a request succeeds at its first
// attempt.
func (b *Budget) Success() {
	b.add(successRefill)
}

// Cover raises the capacity, if it is smaller, to what n plain retries
// spend, and adds the tokens it raised it by. A batch that lets n items
// wait for a retry at once has that many retries' tokens out at a time
// (they come back only when the retries succeed): a smaller budget would
// end a batch against a merely flaky server, not only a failing one.
func (b *Budget) Cover(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if more := n*retryCost - b.capacity; more > 0 {
		b.capacity += more
		b.tokens += more
	}
}

// add puts n tokens back, up to the capacity.
func (b *Budget) add(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+n, b.capacity)
	b.mu.Unlock()
}

// Available returns the tokens left; for a nil budget it returns -1.
func (b *Budget) Available() int {
	if b == nil {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
