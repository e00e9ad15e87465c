package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
)

// The zero fields of Config.Retry come from DefaultRetry; a field set is
// kept, and a Cap of the caller's own bounds Retry-After as well, as
// backoff.Policy documents, unless RetryAfterCap is set too.
func TestARetryPolicyTakesTheDefaultsForItsZeroFields(t *testing.T) {
	require.Equal(t, DefaultRetry, retryPolicy(backoff.Policy{}))

	p := retryPolicy(backoff.Policy{MaxAttempts: 3})
	require.Equal(t, 3, p.MaxAttempts)
	require.Equal(t, DefaultRetry.Cap, p.Cap)
	require.Equal(t, DefaultRetry.RetryAfterCap, p.RetryAfterCap)

	p = retryPolicy(backoff.Policy{Cap: 50 * time.Millisecond})
	require.Equal(t, 50*time.Millisecond, p.Cap)
	require.Equal(t, 50*time.Millisecond, p.RetryAfterCap, "a caller's Cap bounds Retry-After too")

	p = retryPolicy(backoff.Policy{Cap: 50 * time.Millisecond, RetryAfterCap: time.Second})
	require.Equal(t, time.Second, p.RetryAfterCap)
}
