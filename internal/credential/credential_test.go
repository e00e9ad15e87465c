package credential

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIsName(t *testing.T) {
	for _, name := range []string{"token", "access_token", "ACCESS-TOKEN", "api_key", "apikey", "X-Amz-Signature",
		"X-Amz-Security-Token", "client_secret", "password", "sig", "auth"} {
		require.True(t, IsName(name), name)
	}
	for _, name := range []string{"community", "page", "tokens", "keyword", "oauth", "signed", "format"} {
		require.False(t, IsName(name), name)
	}
}

func TestDigest(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a URL without a query is unchanged", "http://h/recs", "http://h/recs"},
		{"a query without credentials is unchanged byte for byte", "http://h/recs?b=2&a=1&&c", "http://h/recs?b=2&a=1&&c"},
		{"an empty query is unchanged", "http://h/recs?", "http://h/recs?"},
		{"a token's value becomes its digest, the rest kept in order", "http://h/recs?community=x&access_token=QSECRET&page=2",
			"http://h/recs?community=x&access_token=redacted-sha256-" + hex16("QSECRET") + "&page=2"},
		{"a percent-encoded name is recognised", "http://h/r?api%5Fkey=QSECRET", "http://h/r?api%5Fkey=redacted-sha256-" + hex16("QSECRET")},
		{"what follows the URL in a target name is kept", "datacite https://h?token=QSECRET 10.5072",
			"datacite https://h?token=redacted-sha256-" + hex16("QSECRET") + " 10.5072"},
		{"the fragment is kept", "http://h/r?token=QSECRET#top", "http://h/r?token=redacted-sha256-" + hex16("QSECRET") + "#top"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Digest(tc.in)
			require.Equal(t, tc.want, got)
			require.Equal(t, got, Digest(got), "a digest is left as it is")
		})
	}
	require.NotEqual(t, Digest("http://h?token=a"), Digest("http://h?token=b"), "two tokens, two names")
}

func TestStrip(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a URL without credentials is unchanged", "http://h/recs/k?community=x", "http://h/recs/k?community=x"},
		{"a token is dropped, the rest kept", "http://h/recs/k?token=QSECRET&community=x", "http://h/recs/k?community=x"},
		{"the question mark goes with the last parameter", "http://h/recs/k?access_token=QSECRET", "http://h/recs/k"},
		{"a DOI is no URL and is unchanged", "10.5072/dk.2aus68bjl7emm", "10.5072/dk.2aus68bjl7emm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, Strip(tc.in))
		})
	}
}

// hex16 is the first 16 hex digits of value's SHA-256.
func hex16(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:])[:16]
}

func TestShown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"not a url", "not a url"},
		{" https://repo.example/recs?access_token=QSECRET#top ", "https://repo.example/recs"},
		{"https://user:QSECRET@repo.example/recs", "https://repo.example/recs"},
		{"http://exa mple.org/x y?token=QSECRET", "http://exa mple.org/x y"},
		{"repo.example/a@b", "repo.example/a@b"},
	} {
		require.Equal(t, tc.want, Shown(tc.in), tc.in)
	}
}
