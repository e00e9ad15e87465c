package client

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
)

// The object key is the key of the canonical JSON array of the identity
// values: what canonical.JCS makes of the array, for strings that need
// escaping too.
func TestTheObjectKeyIsTheKeyOfTheCanonicalArrayOfValues(t *testing.T) {
	for _, values := range [][]string{
		{"10.5072/reef-2025"},
		{"a", "42"},
		{"quote \" backslash \\ slash /", "tab\tnew\nline\r\b\f", "\x00\x01\x1f\x7f", "é 東京 \U0001F600", "<&>"},
	} {
		raw, err := json.Marshal(values)
		require.NoError(t, err)
		want, err := canonical.JCS(raw)
		require.NoError(t, err)
		require.Equal(t, canonical.Key(want), objectKey(values), "%q", values)
	}
}

func TestVersionOrders(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"9", "10", -1},
		{"123456789012345678901234567890", "123456789012345678901234567889", 1},
		{"2026-11-01T12:00:00+02:00", "2026-11-01T10:00:00Z", 0},
		{"2026-11-01T10:00:00.5Z", "2026-11-01T10:00:00Z", 1},
	} {
		a, err := versionOrder(tc.a)
		require.NoError(t, err)
		b, err := versionOrder(tc.b)
		require.NoError(t, err)
		n, ok := compareOrders(a, b)
		require.True(t, ok)
		require.Equal(t, tc.want, n, "%s against %s", tc.a, tc.b)
	}
	n, _ := versionOrder("7")
	ti, _ := versionOrder("2026-11-01T10:00:00Z")
	_, ok := compareOrders(n, ti)
	require.False(t, ok, "a number and a time do not order")
	_, err := versionOrder("last tuesday")
	require.ErrorContains(t, err, "neither an integer nor an RFC 3339 time")
}

func TestIdentityPointersAreChecked(t *testing.T) {
	_, err := newIdentity([]string{"id"}, "")
	require.ErrorIs(t, err, ErrConfig)
	_, err = newIdentity([]string{""}, "")
	require.ErrorIs(t, err, ErrConfig)
	_, err = newIdentity(nil, "/v")
	require.ErrorContains(t, err, "needs Config.Identity")
	id, err := newIdentity([]string{"/id"}, "/v")
	require.NoError(t, err)
	k := canonical.Keyed{Body: []byte(`{"id":"x","v":"soon"}`)}
	require.ErrorContains(t, id.name(&k), "version pointer /v: names \"soon\"")
}
