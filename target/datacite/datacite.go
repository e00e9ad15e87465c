// Package datacite provides the datacite target: DOIs minted with
// DataCite's REST API, each named by a rule of its deposit's key ([DOI]),
// so that a retry can only ever name the DOI the first attempt named.
package datacite

import (
	"bytes"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/internal/record"
)

// Target mints DOIs with DataCite's REST API: POST {Endpoint}/dois with a
// JSON:API body whose attributes.doi is derived from the key (see [DOI]),
// so a retry can only ever name the DOI the first attempt named. 201 is
// created; 422 "This DOI has already been taken" and 409 mean the DOI
// exists, and it is read back (GET {Endpoint}/dois/{doi}) to check that it
// carries this deposit's key as a deposit-sha256 alternate identifier, else
// the deposit fails as a foreign collision; a DOI taken but not readable
// (404) is never claimed and stays unresolved. The identifier is always the
// derived DOI, in lower case. 429 is retried; 401, 403 and 404 stop the
// run; other 422s fail the item with DataCite's messages.
//
// The payload is the DOI's attributes object, or a whole JSON:API document
// {"data":{"type":"dois","attributes":{...}}} whose attributes are used;
// the key is computed over the payload as given, so keep to one of the two
// shapes. The client adds attributes.doi and appends
// {"alternateIdentifier": KEY, "alternateIdentifierType": "deposit-sha256"}
// to attributes.alternateIdentifiers; a payload whose doi, prefix or suffix
// disagree with the derived DOI, or which carries another deposit-sha256
// identifier, is invalid.
//
// With an Event, the deposit has a second step: PUT {Endpoint}/dois/{doi}
// with that event once the DOI exists, recorded in the store under a target
// of its own, so a re-run sends it for DOIs created earlier but not yet
// published, and never twice.
//
// With an identity (the client's Config.Identity), a DOI is an object's
// record: the payload's own attributes.doi, or the DOI derived from the
// object key, and a changed payload updates its metadata (see object.go).
type Target struct {
	// Endpoint is DataCite's API root; default TestEndpoint.
	// Production (Endpoint) only when named.
	Endpoint string
	// Prefix is the DOI prefix DOIs are minted under, such as 10.5072.
	// Required. It is part of the store target: another prefix is another
	// namespace of DOIs.
	Prefix string
	// Event is sent once a DOI exists: "publish" (draft to findable),
	// "register" (draft to registered), or "" for none (DOIs stay drafts
	// unless the payload names an event).
	Event string
	// Adopt, with an identity, says that the repository's DOIs under
	// Prefix are this client's to update: a DOI that exists without
	// deposit's markers (registered before deposit was used) is read as
	// an object's record holding a version of its own, and the update
	// adds the markers, instead of the DOI failing as another's.
	Adopt bool
}

// DataCite endpoints and rate.
const (
	// TestEndpoint is DataCite's test system, the default
	// Target.Endpoint. Its DOIs do not resolve.
	TestEndpoint = "https://api.test.datacite.org"
	// Endpoint is DataCite's production system; DOIs minted there
	// are permanent. It is used only when named as Target.Endpoint.
	Endpoint = "https://api.datacite.org"
	// Rate is the default Config.Rate of DataCite, in
	// requests per second: the test system's published limit of 750
	// requests per 5 minutes per IP address (production allows 3000).
	Rate = 2.5
)

// dataciteAltType is the alternateIdentifierType under which the key is
// recorded in the DOI's metadata.
const dataciteAltType = "deposit-sha256"

// dataciteMediaType is the JSON:API media type DataCite speaks.
const dataciteMediaType = "application/vnd.api+json"

// dataciteEncoding is RFC 4648 base32, lower case, without padding.
var dataciteEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// DOI returns the DOI a deposit with key (lowercase hex SHA-256) gets under
// prefix: prefix + "/dk-" + the lowercase base32 (RFC 4648, no padding) of
// the key's first 10 bytes, in four groups of four joined by "-", such as
// "10.5072/dk-abcd-efgh-ijkl-mnop". The rule never changes: a DOI once
// minted is permanent.
func DOI(prefix, key string) (string, error) {
	if err := checkDOIPrefix(prefix); err != nil {
		return "", err
	}
	raw, err := hex.DecodeString(key)
	if err != nil || len(raw) != 32 {
		return "", fmt.Errorf("doi: key %q is not a lowercase hex SHA-256", key)
	}
	s := dataciteEncoding.EncodeToString(raw[:10])
	return strings.ToLower(prefix) + "/dk-" + s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16], nil
}

// checkDOIPrefix accepts "10." followed by dot-separated runs of digits.
func checkDOIPrefix(prefix string) error {
	rest, ok := strings.CutPrefix(prefix, "10.")
	valid := ok && rest != ""
	for _, part := range strings.Split(rest, ".") {
		if part == "" || strings.Trim(part, "0123456789") != "" {
			valid = false
		}
	}
	if !valid {
		return fmt.Errorf("doi prefix %q: want 10. followed by digits, such as 10.5072", prefix)
	}
	return nil
}

type dataciteDriver struct {
	endpoint string
	prefix   string // lower case
	event    string // "", "publish" or "register"
	adopt    bool
}

// Driver checks the options and returns the target's driver.
func (t Target) Driver() (driver.Driver, error) {
	raw := t.Endpoint
	if strings.TrimSpace(raw) == "" {
		raw = TestEndpoint
	}
	ep, err := driver.Endpoint("datacite.Target.Endpoint", raw)
	if err != nil {
		return nil, err
	}
	if err := checkDOIPrefix(t.Prefix); err != nil {
		return nil, fmt.Errorf("datacite.Target.Prefix: %w", err)
	}
	switch t.Event {
	case "", "publish", "register":
	default:
		return nil, fmt.Errorf("datacite.Target.Event %q: want publish, register or empty", t.Event)
	}
	return dataciteDriver{endpoint: ep, prefix: strings.ToLower(t.Prefix), event: t.Event, adopt: t.Adopt}, nil
}

func (d dataciteDriver) Name() string {
	return driver.TargetName(protocol.DataCite, d.endpoint) + " " + d.prefix
}

// eventTarget is the store target of the event step: its own namespace, so
// a DOI created but not yet published is found by the next run.
func (d dataciteDriver) eventTarget() string {
	return driver.TargetName(protocol.DataCite+"-"+d.event, d.endpoint) + " " + d.prefix
}

func (d dataciteDriver) StepTargets() []string {
	if d.event == "" {
		return nil
	}
	return []string{d.eventTarget()}
}

func (d dataciteDriver) SecretFingerprint() string { return "" }
func (d dataciteDriver) Guards(name string) bool   { return driver.Guarded(name) }
func (d dataciteDriver) DefaultRate() float64      { return Rate }

// url is {endpoint}/dois[/doi], the endpoint's query kept.
func (d dataciteDriver) url(doi string) string {
	base, query, found := strings.Cut(d.endpoint, "?")
	u := base + "/dois"
	if doi != "" {
		u += "/" + doi
	}
	if found {
		u += "?" + query
	}
	return u
}

// Steps are the create and, with an event, the event. The create body is
// built here, so a payload DataCite cannot take is invalid before any
// intent is recorded.
func (d dataciteDriver) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	doi, err := DOI(d.prefix, k.Key)
	if err != nil {
		return nil, err
	}
	if k.Object != "" {
		// An object's record: its DOI is the payload's own, else the one
		// its object key (k.Key here) derives, stable across corrections.
		if doi, err = d.objectDOI(k.Body, k.Key); err != nil {
			return nil, err
		}
	}
	body, err := d.createBody(doi, k.Key, k.Version, k.Body)
	if err != nil {
		return nil, err
	}
	doiURL := d.url(doi)
	create := driver.Step{
		Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url(""), Header: header(), Body: body}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			cls := driver.Classify(a)
			if a.Err == nil {
				switch {
				case a.Status == http.StatusConflict:
					// Two creators raced and the other won: exists, to be
					// read back.
					cls = driver.Conflict
				case a.Status == http.StatusUnprocessableEntity && doiTaken(a.Body):
					// Exists, but perhaps not ours: the read-back decides.
					// As a conflict, a DOI taken but not readable (another
					// repository's draft) is never claimed.
					cls = driver.Conflict
				}
			}
			return driver.Verdict{Class: cls, ID: doi}
		},
		// No pointers: a read-back names no identifier, so the DOI (the
		// fallback) is the identifier, whatever the record says.
		Check:    record.ReadBack(doiURL, nil, "", func(b []byte) error { return d.ours(doi, k, b) }),
		Fallback: doi,
	}
	steps := []driver.Step{create}
	if d.event != "" {
		event := []byte(`{"data":{"type":"dois","attributes":{"event":"` + d.event + `"}}}`)
		steps = append(steps, driver.Step{
			Label: d.event, Target: d.eventTarget(), Key: k.Key, Durable: true,
			// Publishing a findable DOI again changes nothing.
			Arbitrated: true,
			Build: func([]string) (driver.Request, error) {
				return driver.Request{Method: http.MethodPut, URL: doiURL, Header: header(), Body: event}, nil
			},
			Judge:    func(a driver.Answer) driver.Verdict { return driver.Verdict{Class: driver.Classify(a), ID: doi} },
			Fallback: doi,
		})
	}
	return steps, nil
}

// createBody is the JSON:API document of the create: the payload's
// attributes with the DOI and the key's alternate identifier, and, for an
// object's record, the version's (version, the content key).
func (d dataciteDriver) createBody(doi, key, version string, payload []byte) ([]byte, error) {
	attrs, err := dataciteAttributes(payload)
	if err != nil {
		return nil, err
	}
	return d.documentOf(doi, key, version, attrs)
}

// documentOf is the JSON:API document of attrs, with the DOI and the
// markers set.
func (d dataciteDriver) documentOf(doi, key, version string, attrs map[string]any) ([]byte, error) {
	prefix, suffix, _ := strings.Cut(doi, "/")
	for name, want := range map[string]string{"doi": doi, "prefix": prefix, "suffix": suffix} {
		v, present := attrs[name]
		if !present {
			continue
		}
		if s, ok := v.(string); !ok || !strings.EqualFold(s, want) {
			return nil, fmt.Errorf("attributes.%s is %v, but this payload's DOI is %s (leave it out: the client sets it)", name, v, doi)
		}
		delete(attrs, name)
	}
	alt, err := withKeyIdentifier(attrs["alternateIdentifiers"], key)
	if err != nil {
		return nil, err
	}
	if alt, err = withVersionIdentifier(alt, version); err != nil {
		return nil, err
	}
	attrs["alternateIdentifiers"] = alt
	attrs["doi"] = doi

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	doc := map[string]any{"data": map[string]any{"type": "dois", "attributes": attrs}}
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("datacite body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// dataciteAttributes returns the attributes a payload gives: the payload
// itself, or the attributes of a JSON:API document.
func dataciteAttributes(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("datacite payload: %w", err)
	}
	attrs, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("datacite payload: want a JSON object of DOI attributes")
	}
	data, isDoc := attrs["data"].(map[string]any)
	if !isDoc {
		return attrs, nil
	}
	if len(attrs) != 1 {
		return nil, errors.New(`datacite payload: a JSON:API document has only "data" at the top level`)
	}
	if t, present := data["type"]; present && t != "dois" {
		return nil, fmt.Errorf(`datacite payload: data.type is %v, want "dois"`, t)
	}
	if _, present := data["id"]; present {
		return nil, errors.New("datacite payload: leave data.id out: the client names the DOI")
	}
	inner, ok := data["attributes"].(map[string]any)
	if !ok {
		return nil, errors.New("datacite payload: data.attributes must be an object")
	}
	return inner, nil
}

// withKeyIdentifier returns the alternate identifiers with this deposit's
// key appended, unless they already carry it.
func withKeyIdentifier(v any, key string) ([]any, error) {
	var list []any
	switch v := v.(type) {
	case nil:
	case []any:
		list = v
	default:
		return nil, errors.New("datacite payload: alternateIdentifiers must be an array")
	}
	for _, item := range list {
		m, _ := item.(map[string]any)
		if t, _ := m["alternateIdentifierType"].(string); strings.EqualFold(t, dataciteAltType) {
			if id, _ := m["alternateIdentifier"].(string); id == key {
				return list, nil
			}
			return nil, fmt.Errorf("datacite payload: alternateIdentifiers already has a %s identifier %v, not this payload's key %s", dataciteAltType, m["alternateIdentifier"], key)
		}
	}
	return append(list, map[string]any{"alternateIdentifier": key, "alternateIdentifierType": dataciteAltType}), nil
}

// doiTaken reports whether a 422 answer says the DOI is already taken.
func doiTaken(body []byte) bool {
	var doc struct {
		Errors []struct {
			Source string `json:"source"`
			Title  string `json:"title"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &doc) != nil {
		return false
	}
	for _, e := range doc.Errors {
		if e.Source == "doi" && strings.Contains(strings.ToLower(e.Title), "has already been taken") {
			return true
		}
	}
	return false
}

// ours accepts a DOI read back only when its metadata carries k's key as
// a deposit-sha256 alternate identifier, or, for an object's first
// version (k.Version set), when it carries no marker and is adopted or
// holds k's metadata already (an existing DOI, left as it is). A read-back
// cut short by the engine's answer limit is searched as text for the
// quoted key next to the identifier type (DataCite lists identifiers
// before the bulky metadata).
func (d dataciteDriver) ours(doi string, k canonical.Keyed, body []byte) error {
	key, version := k.Key, k.Version
	foreign := fmt.Errorf("doi %s already exists and is not this deposit's: its metadata has no %s alternate identifier %s (another record holds the name this payload derives; it was not claimed)", doi, dataciteAltType, key)
	m, err := readMarkers(body)
	if err != nil {
		if bytes.Contains(body, []byte(`"`+key+`"`)) && bytes.Contains(body, []byte(`"`+dataciteAltType+`"`)) {
			return nil
		}
		return foreign
	}
	switch {
	case m.object == key:
		return nil
	case m.object == "" && m.version == "" && d.adopt && version != "":
		return nil // adopted: the update that follows adds the markers
	case m.object == "" && m.version == "" && version != "" && holdsAttributes(k.Body, body):
		return nil // existing: the engine reads it and finds this version
	case m.object == "" && m.version == "":
		return fmt.Errorf("doi %s already exists and is not this deposit's: it carries no deposit markers (no %s alternate identifier): it was registered before deposit was used, or by another tool; it was not claimed (--adopt, with --identity, takes the repository's DOIs under the prefix as ours to update)", doi, dataciteAltType)
	case m.object != "":
		return fmt.Errorf("doi %s already exists and is not this deposit's: its %s marker is %s, not this one's %s (another deposit's DOI: with --identity, another object's DOI); it was not claimed", doi, dataciteAltType, m.object, key)
	}
	return foreign
}

// The driver's optional capabilities, checked when the package compiles:
// the engine finds one by a type assertion, so a method misnamed would
// silently turn it off.
var (
	_ driver.RateSetter       = dataciteDriver{}
	_ driver.Updater          = dataciteDriver{}
	_ driver.ReadBeforeUpdate = dataciteDriver{}
)
