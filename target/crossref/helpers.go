package crossref

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// These helpers stand in for ones the contract package may come to share
// (endpoint normalisation); they are kept small and in this file so that
// they can be swapped for the shared ones.

// normalizeEndpoint returns raw per RFC 3986 section 6, as far as a store
// name needs it: scheme and host lower case, the default port and a
// trailing slash dropped, no user info, query or fragment (a Crossref
// endpoint carries its credentials in the form, never in its URL). Errors
// name the URL without what may hold a credential.
func normalizeEndpoint(what, raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if uerr, ok := errors.AsType[*url.Error](err); ok {
		err = uerr.Err // without the URL
	}
	if err != nil {
		return "", fmt.Errorf("crossref: %s %q: %w", what, shown(raw), err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return "", fmt.Errorf("crossref: %s %q: want an http or https URL", what, shown(raw))
	case u.Host == "":
		return "", fmt.Errorf("crossref: %s %q: no host", what, shown(raw))
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", fmt.Errorf("crossref: %s %q: give the URL without user info, query or fragment (the login goes in CROSSREF_LOGIN and CROSSREF_PASSWORD)", what, shown(raw))
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && !(scheme == "http" && port == "80") && !(scheme == "https" && port == "443") {
		host += ":" + port
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/"), nil
}

// shown is raw without user info, query and fragment, for an error.
func shown(raw string) string {
	s := strings.TrimSpace(raw)
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		authority, path, _ := strings.Cut(rest, "/")
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			authority = authority[at+1:]
		}
		s = scheme + "://" + authority
		if path != "" || strings.Contains(rest, "/") {
			s += "/" + path
		}
	}
	return s
}

// sibling is endpoint with its last path segment replaced by name: the
// servlet beside the deposit servlet (/servlet/deposit -> /servlet/query).
func sibling(endpoint, name string) string {
	i := strings.LastIndex(endpoint, "/")
	return endpoint[:i+1] + name
}
