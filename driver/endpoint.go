package driver

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/depositkit/deposit/internal/credential"
)

// Endpoint returns a target's endpoint URL normalised per RFC 3986
// section 6, so that two spellings of one repository give one store target
// ([TargetName]): scheme and host in lower case, the default port and a
// trailing slash dropped, percent-encoding normalised (unreserved
// characters decoded, hex digits upper case), no user info and no
// fragment. The query is kept: it is part of the resource (a token in it
// is digested by TargetName). field names the option in the error for a
// missing endpoint ("put.Target.Endpoint"); no error shows a credential.
func Endpoint(field, raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", fmt.Errorf("%s is required", field)
	}
	return normalizeEndpoint(raw)
}

// normalizeEndpoint is Endpoint of a URL given.
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

// RedactURL drops user info, query and fragment so that a URL can be
// logged or put in an error without leaking credentials or tokens.
func RedactURL(raw string) string {
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
