package dataverse

// Small helpers the built-in targets have too (in package client); kept
// here, in one file, until package driver exports them.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"
)

// normalizeEndpoint returns the installation's root URL: scheme and host
// in lower case, the default port, a trailing slash and a trailing "/api"
// dropped. A query, user info or fragment is refused: the token goes in
// Target.Token, never in the URL.
func normalizeEndpoint(raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", errors.New("dataverse: Target.Endpoint is required (the installation's root, such as https://demo.dataverse.org)")
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", errors.New("dataverse: Target.Endpoint is not a URL")
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return "", fmt.Errorf("dataverse: Target.Endpoint %q: scheme must be http or https", u.Redacted())
	case u.Host == "":
		return "", fmt.Errorf("dataverse: Target.Endpoint %q: no host", u.Redacted())
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return "", errors.New("dataverse: Target.Endpoint must have no user info, query or fragment (the API token goes in Target.Token)")
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port := u.Port(); port != "" && !(scheme == "http" && port == "80") && !(scheme == "https" && port == "443") {
		host += ":" + port
	}
	path := strings.TrimRight(u.EscapedPath(), "/")
	path = strings.TrimRight(strings.TrimSuffix(path, "/api"), "/")
	return scheme + "://" + host + path, nil
}

// oneLine is s on one line, at most 300 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		cut := 300
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// datasetFile is one entry of a dataset document's file list, as package
// canonical writes it.
type datasetFile struct {
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// datasetDocument splits a dataset's keyed body,
// {"dataset":[...],"metadata":M}, into its files and metadata.
func datasetDocument(body []byte) ([]datasetFile, json.RawMessage, error) {
	var doc struct {
		Dataset  []datasetFile   `json:"dataset"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Dataset) == 0 {
		return nil, nil, errors.New("dataverse: not a dataset document")
	}
	return doc.Dataset, doc.Metadata, nil
}
