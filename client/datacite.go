package client

import (
	"bytes"
	"context"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/depositkit/deposit/dedup"
)

// ProtocolDataCite mints DOIs with DataCite's REST API: POST {endpoint}/dois
// with a JSON:API body whose attributes.doi is derived from the key (see
// DOI), so a retry can only ever name the DOI the first attempt named. 201
// is created; 422 "This DOI has already been taken" and 409 mean the DOI
// exists, and it is read back (GET {endpoint}/dois/{doi}) to check that it
// carries this deposit's key as a deposit-sha256 alternate identifier, else
// the deposit fails as a foreign collision; a DOI taken but not readable
// (404) is never claimed and stays unresolved. The identifier is always the
// derived DOI, in lower case (Config.IDPointer is not used). 429 is retried;
// 401, 403 and 404 stop the run; other 422s fail the item with DataCite's
// messages.
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
// Config.DOIPrefix is required; Endpoint defaults to DataCiteTestEndpoint
// (production only when named) and Rate to DataCiteRate. Config.DataCiteEvent
// adds a publish or register step after the create (see Config).
const ProtocolDataCite Protocol = "datacite"

// DataCite endpoints and rate.
const (
	// DataCiteTestEndpoint is DataCite's test system, the default endpoint
	// under ProtocolDataCite. Its DOIs do not resolve.
	DataCiteTestEndpoint = "https://api.test.datacite.org"
	// DataCiteEndpoint is DataCite's production system; DOIs minted there
	// are permanent. It is used only when named as Config.Endpoint.
	DataCiteEndpoint = "https://api.datacite.org"
	// DataCiteRate is the default Config.Rate under ProtocolDataCite, in
	// requests per second: the test system's published limit of 750
	// requests per 5 minutes per IP address (production allows 3000).
	DataCiteRate = 2.5
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

// dataciteDefaults fills the DataCite defaults of cfg: the test system when
// no endpoint is named, DataCite's published rate when none is set.
func dataciteDefaults(cfg Config) Config {
	if strings.TrimSpace(cfg.Endpoint) == "" {
		cfg.Endpoint = DataCiteTestEndpoint
	}
	if cfg.Rate == 0 {
		cfg.Rate = DataCiteRate
	}
	return cfg
}

// setupDataCite installs the DataCite profile on a client New is building:
// the prefix is checked and made part of the target (another prefix is
// another namespace of DOIs), and the event step's target gets the same key
// settings as the deposits'.
func (c *Client) setupDataCite(cfg Config, settings dedup.Settings) error {
	if err := checkDOIPrefix(cfg.DOIPrefix); err != nil {
		return fmt.Errorf("client: Config.DOIPrefix: %w", err)
	}
	switch cfg.DataCiteEvent {
	case "", "publish", "register":
	default:
		return fmt.Errorf("client: Config.DataCiteEvent %q: want publish, register or empty", cfg.DataCiteEvent)
	}
	p := dataciteProfile{prefix: strings.ToLower(cfg.DOIPrefix), event: cfg.DataCiteEvent}
	c.profile = p
	c.target += " " + p.prefix
	if p.event == "" {
		return nil
	}
	if err := c.store.CheckSettings(context.Background(), p.eventTarget(c), settings); err != nil {
		if errors.Is(err, dedup.ErrSettingsMismatch) {
			return fmt.Errorf("%w: %w", ErrSettingsMismatch, err)
		}
		return fmt.Errorf("client: store: %w", err)
	}
	return nil
}

// dataciteProfile is ProtocolDataCite.
type dataciteProfile struct {
	baseProfile
	prefix string // lower case
	event  string // "", "publish" or "register"
}

// name is the DOI of key. Keys reaching a profile are always SHA-256 hex.
func (p dataciteProfile) name(c *Client, key string) string {
	doi, err := DOI(p.prefix, key)
	if err != nil {
		return ""
	}
	return doi
}

// dataciteURL is {endpoint}/dois[/doi], the endpoint's query kept.
func dataciteURL(c *Client, doi string) string {
	base, query, found := strings.Cut(c.endpoint, "?")
	u := base + "/dois"
	if doi != "" {
		u += "/" + doi
	}
	if found {
		u += "?" + query
	}
	return u
}

// validate builds the request once, so a payload DataCite cannot take is
// invalid before any intent is recorded.
func (p dataciteProfile) validate(c *Client, key string, body []byte) error {
	_, _, _, _, err := p.request(c, key, body)
	return err
}

func (p dataciteProfile) request(c *Client, key string, body []byte) (string, string, http.Header, []byte, error) {
	doi := p.name(c, key)
	attrs, err := dataciteAttributes(body)
	if err != nil {
		return "", "", nil, nil, err
	}
	prefix, suffix, _ := strings.Cut(doi, "/")
	for name, want := range map[string]string{"doi": doi, "prefix": prefix, "suffix": suffix} {
		v, present := attrs[name]
		if !present {
			continue
		}
		if s, ok := v.(string); !ok || !strings.EqualFold(s, want) {
			return "", "", nil, nil, fmt.Errorf("attributes.%s is %v, but this payload's DOI is %s (leave it out: the client sets it)", name, v, doi)
		}
		delete(attrs, name)
	}
	alt, err := withKeyIdentifier(attrs["alternateIdentifiers"], key)
	if err != nil {
		return "", "", nil, nil, err
	}
	attrs["alternateIdentifiers"] = alt
	attrs["doi"] = doi

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	doc := map[string]any{"data": map[string]any{"type": "dois", "attributes": attrs}}
	if err := enc.Encode(doc); err != nil {
		return "", "", nil, nil, fmt.Errorf("datacite body: %w", err)
	}
	h := http.Header{}
	h.Set("Content-Type", dataciteMediaType)
	h.Set("Accept", dataciteMediaType)
	return http.MethodPost, dataciteURL(c, ""), h, bytes.TrimRight(buf.Bytes(), "\n"), nil
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

func (p dataciteProfile) classify(ctx context.Context, resp *http.Response, err error) class {
	if err == nil {
		switch resp.StatusCode {
		case http.StatusConflict:
			// Two creators raced and the other won: exists, to be read back.
			return classConflict
		case http.StatusUnprocessableEntity:
			// The body decides, and it must still be there for the engine:
			// read it now and put it back.
			b := readAnswer(resp)
			resp.Body = io.NopCloser(bytes.NewReader(b))
			if doiTaken(b) {
				// Exists, but perhaps not ours: the read-back decides. As a
				// conflict, a DOI taken but not readable (another
				// repository's draft) is never claimed.
				return classConflict
			}
			return classTerminal
		}
	}
	return classifyCommon(ctx, resp, err)
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

func (p dataciteProfile) readURL(c *Client, key string) string {
	return dataciteURL(c, p.name(c, key))
}

func (dataciteProfile) idPointers() []string { return []string{"/data/id"} }

// checkExisting accepts a DOI read back only when its metadata carries key
// as a deposit-sha256 alternate identifier. A read-back cut short by the
// engine's answer limit is searched as text for the quoted key next to the
// identifier type (DataCite lists identifiers before the bulky metadata).
func (p dataciteProfile) checkExisting(key string, answer []byte) error {
	var doc struct {
		Data struct {
			Attributes struct {
				DOI                  string `json:"doi"`
				AlternateIdentifiers []struct {
					ID   string `json:"alternateIdentifier"`
					Type string `json:"alternateIdentifierType"`
				} `json:"alternateIdentifiers"`
				Identifiers []struct {
					ID   string `json:"identifier"`
					Type string `json:"identifierType"`
				} `json:"identifiers"`
			} `json:"attributes"`
		} `json:"data"`
	}
	doi, _ := DOI(p.prefix, key)
	foreign := fmt.Errorf("doi %s already exists and is not this deposit's: its metadata has no %s alternate identifier %s (another record holds the name this payload derives; it was not claimed)", doi, dataciteAltType, key)
	if err := json.Unmarshal(answer, &doc); err != nil {
		if bytes.Contains(answer, []byte(`"`+key+`"`)) && bytes.Contains(answer, []byte(`"`+dataciteAltType+`"`)) {
			return nil
		}
		return foreign
	}
	for _, a := range doc.Data.Attributes.AlternateIdentifiers {
		if a.ID == key && strings.EqualFold(a.Type, dataciteAltType) {
			return nil
		}
	}
	for _, a := range doc.Data.Attributes.Identifiers {
		if a.ID == key && strings.EqualFold(a.Type, dataciteAltType) {
			return nil
		}
	}
	return foreign
}

// eventTarget is the store target of the event step: its own namespace, so
// a DOI created but not yet published is found by the next run.
func (p dataciteProfile) eventTarget(c *Client) string {
	return "datacite-" + p.event + " " + c.endpoint + " " + p.prefix
}

// finish runs the event step (publish or register) once per DOI: looked up
// in the store under the event's own target, recorded pending before the
// PUT and done after DataCite confirmed it. It runs for created, existing
// and replayed DOIs alike, all of them checked to be ours, so a re-run
// publishes what an earlier run created but did not publish. The event is
// idempotent on DataCite's side too: publishing a findable DOI changes
// nothing.
func (p dataciteProfile) finish(ctx context.Context, c *Client, res Result, drain <-chan struct{}) (Result, error) {
	if p.event == "" {
		return res, nil
	}
	target := p.eventTarget(c)
	rec, err := c.store.Lookup(ctx, target, res.Key)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
	case err != nil:
		return res, c.storeError(err)
	case rec.State == dedup.StateDone:
		return res, nil
	case rec.State == dedup.StateFailed && !c.retryFailed:
		return res, fmt.Errorf("%s step: %w", p.event, recordedFailure(rec))
	case rec.State == dedup.StateFailed:
		if err := c.store.ResetFailed(ctx, target, res.Key); err != nil {
			return res, c.storeError(err)
		}
	}
	rec, err = c.store.Begin(ctx, target, res.Key, nil)
	if err != nil {
		return res, c.storeError(err)
	}
	switch rec.State {
	case dedup.StateDone: // another process did it meanwhile
		return res, nil
	case dedup.StateFailed:
		return res, fmt.Errorf("%s step: %w", p.event, recordedFailure(rec))
	}

	doi := p.name(c, res.Key)
	url := dataciteURL(c, doi)
	header := c.header.Clone()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Content-Type", dataciteMediaType)
	header.Set("Accept", dataciteMediaType)
	body := []byte(`{"data":{"type":"dois","attributes":{"event":"` + p.event + `"}}}`)

	x := c.newExchange(res.Key, drain)
	resp, cls, err := x.do(ctx, http.MethodPut, url, header, body)
	res.Requests += x.requests
	res.Retries += x.retries
	if err != nil {
		return res, fmt.Errorf("%s step: %w", p.event, err)
	}
	answer := readAnswer(resp)
	herr := c.httpError(http.MethodPut, url, resp, answer)
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
		_, err := c.store.Complete(context.WithoutCancel(ctx), target, res.Key,
			dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: doi, Status: resp.StatusCode})
		if err != nil && !errors.Is(err, dedup.ErrConflict) {
			return res, c.storeError(err)
		}
		return res, nil
	case cls == classTerminal:
		problem := herr.Problem
		if problem == "" {
			problem = http.StatusText(resp.StatusCode)
		}
		_, err := c.store.Fail(context.WithoutCancel(ctx), target, res.Key, dedup.Failure{Status: resp.StatusCode, Problem: p.event + ": " + problem})
		if err != nil && !errors.Is(err, dedup.ErrInvalidTransition) {
			return res, c.storeError(err)
		}
		return res, fmt.Errorf("%s step: %w: %w", p.event, ErrTerminal, herr)
	case cls == classStop:
		return res, fmt.Errorf("%s step: %w: %w", p.event, ErrStopRun, herr)
	case x.stopped != nil:
		return res, fmt.Errorf("%s step: %w after %d attempts: %w: %w", p.event, ErrUnresolved, x.requests, x.stopped, herr)
	default:
		return res, fmt.Errorf("%s step: %w: %w", p.event, ErrUnresolved, herr)
	}
}
