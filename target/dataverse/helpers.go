package dataverse

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/depositkit/deposit/driver"
)

// normalizeEndpoint returns the installation's root URL, normalised as
// every target's endpoint is (driver.Endpoint), with a trailing "/api"
// dropped. A query or user info is refused: the token goes in
// Target.Token, never in the URL.
func normalizeEndpoint(raw string) (string, error) {
	const field = "dataverse: Target.Endpoint"
	if strings.TrimSpace(raw) == "" {
		return "", errors.New(field + " is required (the installation's root, such as https://demo.dataverse.org)")
	}
	if u, err := url.Parse(strings.TrimSpace(raw)); err == nil && (u.User != nil || u.RawQuery != "") {
		return "", errors.New(field + " must have no user info or query (the API token goes in Target.Token)")
	}
	e, err := driver.Endpoint(field, raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return strings.TrimRight(strings.TrimSuffix(e, "/api"), "/"), nil
}

// datasetDocument splits a dataset's keyed body,
// {"dataset":[...],"metadata":M}, into its files and metadata.
func datasetDocument(body []byte) ([]driver.DatasetFile, json.RawMessage, error) {
	files, err := driver.DatasetFiles(body)
	if err != nil {
		return nil, nil, fmt.Errorf("dataverse: %w", err)
	}
	var doc struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, nil, fmt.Errorf("dataverse: %w", err)
	}
	return files, doc.Metadata, nil
}
