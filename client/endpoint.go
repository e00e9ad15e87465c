package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/depositkit/deposit/internal/credential"
)

// endpointOf returns a target's Endpoint normalised; field names it in the
// error for a missing one ("Put.Endpoint").
func endpointOf(field, raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", fmt.Errorf("%w: %s is required", ErrConfig, field)
	}
	return normalizeEndpoint(raw)
}

// normalizeEndpoint returns the endpoint URL normalised per RFC 3986
// section 6: scheme and host in lower case, the default port and a trailing
// slash dropped, percent-encoding normalised (unreserved characters decoded,
// hex digits upper case), no user info and no fragment. The query is kept: it
// is part of the resource.
func normalizeEndpoint(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err // without the URL, which may hold a token
	}
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", credential.Shown(raw), err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("endpoint %q: scheme must be http or https", credential.Shown(raw))
	}
	if u.Host == "" {
		return "", fmt.Errorf("endpoint %q: no host", credential.Shown(raw))
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && !(scheme == "http" && port == "80") && !(scheme == "https" && port == "443") {
		host += ":" + port
	}
	path := normalizePercent(u.EscapedPath())
	path = strings.TrimRight(path, "/")
	out := scheme + "://" + host + path
	if u.RawQuery != "" || u.ForceQuery {
		out += "?" + normalizePercent(u.RawQuery)
	}
	return out, nil
}

// normalizePercent upper-cases the hex digits of percent-encodings and
// decodes those that encode unreserved characters (RFC 3986 section 6.2.2.2).
func normalizePercent(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			c := unhex(s[i+1])<<4 | unhex(s[i+2])
			if isUnreserved(c) {
				b.WriteByte(c)
			} else {
				b.WriteString(strings.ToUpper(s[i : i+3]))
			}
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// redactURL drops user info, query and fragment so a URL can be logged or put
// in an error without leaking credentials or tokens.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	u.User = nil
	u.RawQuery = ""
	u.ForceQuery = false
	u.Fragment = ""
	u.RawFragment = ""
	return u.String()
}

// idempotencyKey is the Idempotency-Key header value for a deposit: a quoted
// Structured Field string holding the UUIDv5 (URL namespace) of
// "POST <target> <key>", or of the lowercase hex HMAC-SHA256 of that string
// under the key secret when one is set. The same inputs give the same bytes in
// every process and after every restart.
func idempotencyKey(target, key string, secret []byte) string {
	name := "POST " + target + " " + key
	if len(secret) > 0 {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(name))
		name = hex.EncodeToString(mac.Sum(nil))
	}
	return `"` + uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String() + `"`
}

// secretFingerprint identifies a key secret without revealing it, so the
// store can refuse a run whose secret differs from the one its keys were made
// with. Empty when there is no secret.
func secretFingerprint(secret []byte) string {
	if len(secret) == 0 {
		return ""
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("deposit key secret fingerprint"))
	return hex.EncodeToString(mac.Sum(nil))[:16]
}
