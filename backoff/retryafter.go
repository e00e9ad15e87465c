package backoff

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// RetryAfter reads the Retry-After field of h (RFC 9110, section 10.2.3)
// and reports the wait it asks for and whether it held a valid value.
//
// Both forms are accepted: delta-seconds (digits only, so negative or
// fractional values are invalid; values too large for a Duration saturate)
// and an HTTP-date in any of the three formats of [http.ParseTime], taken
// relative to now (a date in the past gives 0). Malformed and empty values
// are ignored. Retry-After is a singleton field, so several values are
// invalid; when a server or proxy sends several anyway, the longest valid
// wait wins, the most conservative reading.
//
// The result is not capped; [Policy.Delay] caps it.
func RetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	var (
		longest time.Duration
		found   bool
	)
	for _, v := range h["Retry-After"] { // the canonical key, as Header.Get uses
		d, ok := parseRetryAfter(v, now)
		if ok && (!found || d > longest) {
			longest, found = d, true
		}
	}
	return longest, found
}

// parseRetryAfter parses one Retry-After field value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		return deltaSeconds(v), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// deltaSeconds converts a string of digits to a Duration, saturating at the
// largest Duration.
func deltaSeconds(s string) time.Duration {
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	var n int64
	for i := range len(s) {
		n = n*10 + int64(s[i]-'0')
		if n > maxSeconds {
			return time.Duration(math.MaxInt64)
		}
	}
	return time.Duration(n) * time.Second
}
