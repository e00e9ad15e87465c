package crossref

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/depositkit/deposit/driver"
)

// endpoint is raw normalised as every target's endpoint is
// (driver.Endpoint), refused when it carries a query or user info: a
// Crossref servlet takes its credentials in the form, never in its URL.
func endpoint(field, raw string) (string, error) {
	field = "crossref.Target." + field
	if u, err := url.Parse(strings.TrimSpace(raw)); err == nil && (u.User != nil || u.RawQuery != "") {
		return "", fmt.Errorf("%s %q: give the URL without user info or query (the login goes in CROSSREF_LOGIN and CROSSREF_PASSWORD)", field, driver.RedactURL(raw))
	}
	e, err := driver.Endpoint(field, raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return e, nil
}

// sibling is endpoint with its last path segment replaced by name: the
// servlet beside the deposit servlet (/servlet/deposit -> /servlet/query).
func sibling(endpoint, name string) string {
	i := strings.LastIndex(endpoint, "/")
	return endpoint[:i+1] + name
}
