package repotest

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRateLimitThrottlesWritesAboveIt(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := startServer(t, Config{RateLimit: 100, now: clock})
	put := func(i int) answer {
		return mustSend(t, s.Client(), "PUT", fmt.Sprintf("%s/k%d", s.URL, i), `{"n":1}`, inm, "*")
	}

	statuses := map[int]int{}
	for i := range 50 {
		a := put(i)
		statuses[a.status]++
		if a.status == http.StatusTooManyRequests {
			require.Equal(t, "1", a.header.Get("Retry-After"))
		}
	}
	require.Equal(t, map[int]int{http.StatusCreated: 10, http.StatusTooManyRequests: 40}, statuses,
		"a tenth of a second's worth at once, the rest throttled")
	require.Equal(t, http.StatusOK, mustSend(t, s.Client(), "GET", s.URL+"/k0", "").status, "reads are not throttled")

	mu.Lock()
	now = now.Add(50 * time.Millisecond)
	mu.Unlock()
	statuses = map[int]int{}
	for i := 50; i < 60; i++ {
		statuses[put(i).status]++
	}
	require.Equal(t, map[int]int{http.StatusCreated: 5, http.StatusTooManyRequests: 5}, statuses,
		"50 ms refill 5 writes")

	st := s.Stats()
	require.Equal(t, int64(45), st.Throttled)
	require.Equal(t, int64(15), st.Records)
}

func TestRateLimitMustBeAFiniteRate(t *testing.T) {
	for _, bad := range []float64{-1, math.Inf(1), math.NaN()} {
		_, err := NewHandler(Config{RateLimit: bad})
		require.ErrorIs(t, err, ErrConfig, "RateLimit %v", bad)
	}
}
