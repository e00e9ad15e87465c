// Package credential provides the rule that tells a credential in a URL's
// query string (?access_token=..., ?api_key=...) from the rest of the query,
// and the two ways of keeping it out of what is stored or printed: [Digest],
// which puts a digest in place of its value, and [Strip], which drops it.
//
// The client sends an endpoint's query as given; the store's target names
// carry its Digest form and record URLs its Strip form. The command line
// applies the same rule to what an older store still holds.
package credential

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"strings"
)

// digestPrefix begins the value Digest puts in place of a credential: it
// says what it is to a reader of the store, and lets Digest recognise its
// own output.
const digestPrefix = "redacted-sha256-"

// IsName reports whether a query parameter of this name carries a
// credential: after lower-casing and reading '-' as '_', one of token, key,
// apikey, secret, password, passwd, auth, authorization, sig, signature,
// credential, jwt and session, or a name ending in '_' and one of these
// (access_token, api_key, client_secret, x_amz_signature, ...). A false
// positive costs only the readability of a target name: the parameter is
// still sent, and its digest still tells one value from another.
func IsName(name string) bool {
	n := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for _, w := range [...]string{"token", "key", "apikey", "secret", "password", "passwd", "auth",
		"authorization", "sig", "signature", "credential", "jwt", "session"} {
		if n == w || strings.HasSuffix(n, "_"+w) {
			return true
		}
	}
	return false
}

// Digest returns rawURL with the value of each credential parameter of its
// query replaced by redacted-sha256- and the first 16 hex digits of the
// value's SHA-256: two tokens still give two names, and neither can be read
// back. A URL without a credential parameter, or whose credentials are
// digests already, is returned unchanged, byte for byte. A digest does not
// hide a value short enough to guess; tokens are not.
func Digest(rawURL string) string {
	return rewrite(rawURL, func(name, value string) (string, bool) {
		if strings.HasPrefix(value, digestPrefix) {
			return name + "=" + value, true
		}
		sum := sha256.Sum256([]byte(value))
		return name + "=" + digestPrefix + hex.EncodeToString(sum[:8]), true
	})
}

// Strip returns rawURL without its credential parameters (and without the
// '?' when none is left). A URL without one is returned unchanged.
func Strip(rawURL string) string {
	return rewrite(rawURL, func(string, string) (string, bool) { return "", false })
}

// rewrite replaces each credential parameter of rawURL's query (name=value,
// as written) by what replace returns, or drops it when replace says so.
// The other parameters keep their text and order. The URL ends at the first
// space, so that a store target name ("datacite URL PREFIX") keeps what
// follows it.
func rewrite(rawURL string, replace func(name, value string) (string, bool)) string {
	base, rest, found := strings.Cut(rawURL, "?")
	if !found {
		return rawURL
	}
	rest, after, hasAfter := strings.Cut(rest, " ")
	query, fragment, hasFragment := strings.Cut(rest, "#")
	params := strings.Split(query, "&")
	kept := params[:0:0]
	changed := false
	for _, p := range params {
		name, value, _ := strings.Cut(p, "=")
		unescaped, err := url.QueryUnescape(name)
		if err != nil {
			unescaped = name
		}
		if !IsName(unescaped) {
			kept = append(kept, p)
			continue
		}
		changed = true
		if r, keep := replace(name, value); keep {
			kept = append(kept, r)
		}
	}
	if !changed {
		return rawURL
	}
	out := base
	if len(kept) > 0 {
		out += "?" + strings.Join(kept, "&")
	}
	if hasFragment {
		out += "#" + fragment
	}
	if hasAfter {
		out += " " + after
	}
	return out
}

// Shown is rawURL as written, for a message about it, without what may
// hold a credential: user info, query and fragment. It needs no parse, so
// it serves for a URL that does not parse too.
func Shown(rawURL string) string {
	s := strings.TrimSpace(rawURL)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if _, rest, ok := strings.Cut(s, "://"); ok {
		authority, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			s = s[:len(s)-len(rest)] + rest[at+1:]
		}
	}
	return s
}
