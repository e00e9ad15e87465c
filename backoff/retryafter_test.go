package backoff

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) // a Monday
	tests := []struct {
		name   string
		values []string // nil: no header
		want   time.Duration
		wantOK bool
	}{
		{"delta seconds are read", []string{"120"}, 120 * time.Second, true},
		{"zero seconds mean now", []string{"0"}, 0, true},
		{"leading zeros are read", []string{"007"}, 7 * time.Second, true},
		{"surrounding whitespace is trimmed", []string{" \t5 "}, 5 * time.Second, true},
		{"huge delta saturates", []string{"99999999999999999999999"}, math.MaxInt64, true},
		{"largest whole-second delta is exact", []string{"9223372036"}, 9223372036 * time.Second, true},
		{"one past the largest delta saturates", []string{"9223372037"}, math.MaxInt64, true},
		{"IMF-fixdate in the future is read", []string{"Mon, 30 Nov 2026 08:01:30 GMT"}, 90 * time.Second, true},
		{"RFC 850 date is read", []string{"Monday, 30-Nov-26 08:01:00 GMT"}, time.Minute, true},
		{"asctime date is read", []string{"Mon Nov 30 08:02:00 2026"}, 2 * time.Minute, true},
		{"date in the past means now", []string{"Sun, 06 Nov 1994 08:49:37 GMT"}, 0, true},
		{"date equal to now means now", []string{"Mon, 30 Nov 2026 08:00:00 GMT"}, 0, true},
		{"date far in the future is read uncapped", []string{"Tue, 30 Nov 2027 08:00:00 GMT"}, 365 * 24 * time.Hour, true},
		{"date in another zone is invalid", []string{"Mon, 30 Nov 2026 08:01:00 PST"}, 0, false},
		{"negative seconds are invalid", []string{"-5"}, 0, false},
		{"plus sign is invalid", []string{"+5"}, 0, false},
		{"fraction is invalid", []string{"1.5"}, 0, false},
		{"unit suffix is invalid", []string{"5s"}, 0, false},
		{"garbage is invalid", []string{"soon"}, 0, false},
		{"empty value is invalid", []string{""}, 0, false},
		{"blank value is invalid", []string{"   "}, 0, false},
		{"comma-joined list is invalid", []string{"5, 30"}, 0, false},
		{"missing header is invalid", nil, 0, false},
		{"several values take the longest valid", []string{"5", "30", "10"}, 30 * time.Second, true},
		{"invalid values among several are skipped", []string{"soon", "-1", "4", ""}, 4 * time.Second, true},
		{"mixed forms compare as waits", []string{"Mon, 30 Nov 2026 08:00:45 GMT", "40"}, 45 * time.Second, true},
		{"several invalid values are invalid", []string{"soon", "later"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Retry-After", v)
			}
			got, ok := RetryAfter(h, now)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}
