package backoff

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewBudgetStartsFull(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		want     int
	}{
		{"zero capacity means 500", 0, 500},
		{"negative capacity means 500", -1, 500},
		{"given capacity is kept", 20, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, NewBudget(tt.capacity).Available())
		})
	}
}

func TestBudgetRunsOut(t *testing.T) {
	tests := []struct {
		name    string
		timeout bool
		retries int
	}{
		{"default budget allows 100 plain retries", false, 100},
		{"default budget allows 50 retries after timeouts", true, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(0)
			for i := range tt.retries {
				require.NoError(t, b.Spend(tt.timeout), "retry %d", i+1)
			}
			require.ErrorIs(t, b.Spend(tt.timeout), ErrBudgetExhausted)
			require.Equal(t, 0, b.Available())
		})
	}
}

func TestBudgetRefusalTakesNothingAndSaysWhy(t *testing.T) {
	b := NewBudget(12)
	require.NoError(t, b.Spend(true))
	err := b.Spend(false)
	require.ErrorIs(t, err, ErrBudgetExhausted)
	require.EqualError(t, err, "backoff: retry budget exhausted: 2 of 12 tokens left, a retry needs 5")
	require.Equal(t, 2, b.Available())
}

func TestBudgetTooSmallForAnyRetry(t *testing.T) {
	b := NewBudget(4)
	require.ErrorIs(t, b.Spend(false), ErrBudgetExhausted)
	require.Equal(t, 4, b.Available())
}

func TestBudgetRefills(t *testing.T) {
	t.Run("refund after a successful retry gives its cost back", func(t *testing.T) {
		b := NewBudget(100)
		require.NoError(t, b.Spend(false))
		require.NoError(t, b.Spend(true))
		require.Equal(t, 85, b.Available())
		b.Refund(true)
		require.Equal(t, 95, b.Available())
		b.Refund(false)
		require.Equal(t, 100, b.Available())
	})
	t.Run("first-try successes add one token each", func(t *testing.T) {
		b := NewBudget(10)
		require.NoError(t, b.Spend(true))
		require.ErrorIs(t, b.Spend(false), ErrBudgetExhausted)
		for range 5 {
			b.Success()
		}
		require.Equal(t, 5, b.Available())
		require.NoError(t, b.Spend(false))
	})
	t.Run("refills stop at the capacity", func(t *testing.T) {
		b := NewBudget(10)
		b.Success()
		b.Refund(true)
		require.Equal(t, 10, b.Available())
	})
}

func TestNilBudgetIsUnlimited(t *testing.T) {
	var b *Budget
	for range 1000 {
		require.NoError(t, b.Spend(true))
	}
	b.Refund(false)
	b.Success()
	require.Equal(t, -1, b.Available())
}

func TestBudgetSharedByConcurrentRequests(t *testing.T) {
	// A batch of requests against a server that always fails: each retries
	// until the budget says no. However the goroutines interleave, the batch
	// makes exactly capacity/5 retries in all.
	b := NewBudget(500)
	var retries atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for b.Spend(false) == nil {
				retries.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(100), retries.Load())
	require.Equal(t, 0, b.Available())
}

func BenchmarkBudget(b *testing.B) {
	b.Run("spend and refund", func(b *testing.B) {
		budget := NewBudget(0)
		b.ReportAllocs()
		for b.Loop() {
			if budget.Spend(false) == nil {
				budget.Refund(false)
			}
		}
	})
	b.Run("parallel spend and refund", func(b *testing.B) {
		budget := NewBudget(0)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if budget.Spend(false) == nil {
					budget.Refund(false)
				}
			}
		})
	})
}

// Cover raises a budget to n retries' tokens, adding what it raised, and
// never lowers one.
func TestCoverRaisesTheBudgetToNRetries(t *testing.T) {
	b := NewBudget(0)
	require.NoError(t, b.Spend(false))
	b.Cover(300)
	require.Equal(t, 1500-5, b.Available(), "raised by 1000 tokens, the 5 spent still out")
	for range 299 {
		require.NoError(t, b.Spend(false))
	}
	require.ErrorIs(t, b.Spend(false), ErrBudgetExhausted, "300 retries at once, no more")
	b.Cover(10)
	require.Equal(t, 0, b.Available(), "a smaller cover changes nothing")
	var none *Budget
	none.Cover(10) // a nil budget is unlimited
}
