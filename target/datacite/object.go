package datacite

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// With an identity (the client's Config.Identity), a payload is one
// version of an object, whose DOI is its record:
//
//   - the DOI is the payload's own attributes.doi when it names one (it
//     must be under the prefix), else the one [DOI] derives from the
//     object key, so that a corrected payload names the same DOI;
//   - the DOI's alternateIdentifiers carry two markers: deposit-sha256,
//     the object key, and deposit-version, the content key of the version
//     the DOI holds;
//   - a later version is a metadata update, PUT {Endpoint}/dois/{doi} with
//     the payload's attributes and the two markers, and never an event,
//     so the DOI's state (draft, registered, findable) stays as it is.
//
// DataCite checks no precondition on an update (PUT /dois/{id}, "Update a
// doi", answers 200: openapi.yaml in datacite/lupo, whose request takes
// no condition), so the driver is a [driver.ReadBeforeUpdate]: the engine
// reads the DOI before every update and sends it only while the DOI's
// deposit-version marker is the version the store applied.

// versionAltType is the alternateIdentifierType of the version marker:
// the content key of the version a DOI holds. The object marker is
// dataciteAltType, which holds the object key under an identity (and the
// content key without one, where the two are the same deposit).
const versionAltType = "deposit-version"

// ReadsBeforeUpdate: DataCite offers no conditional update.
func (dataciteDriver) ReadsBeforeUpdate() bool { return true }

// objectDOI is the DOI of an object's record: the payload's attributes.doi,
// in lower case, when it names one under the prefix, else the DOI the
// object key derives.
func (d dataciteDriver) objectDOI(payload []byte, object string) (string, error) {
	attrs, err := dataciteAttributes(payload)
	if err != nil {
		return "", err
	}
	v, named := attrs["doi"]
	if !named {
		return DOI(d.prefix, object)
	}
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("datacite payload: attributes.doi must be a DOI string, not %v", v)
	}
	doi := strings.ToLower(s)
	prefix, suffix, _ := strings.Cut(doi, "/")
	if prefix != d.prefix || suffix == "" {
		return "", fmt.Errorf("datacite payload: attributes.doi %s is not under the DOI prefix %s (--doi-prefix): DOIs are minted under that prefix only", s, d.prefix)
	}
	return doi, nil
}

// withVersionIdentifier returns the alternate identifiers with the version
// marker appended; none when version is "" (a deposit without identity).
// A payload that carries one of its own is invalid: the client sets it.
func withVersionIdentifier(list []any, version string) ([]any, error) {
	if version == "" {
		return list, nil
	}
	for _, item := range list {
		m, _ := item.(map[string]any)
		if t, _ := m["alternateIdentifierType"].(string); strings.EqualFold(t, versionAltType) {
			return nil, fmt.Errorf("datacite payload: alternateIdentifiers has a %s identifier %v (leave it out: the client sets it)", versionAltType, m["alternateIdentifier"])
		}
	}
	return append(list, map[string]any{"alternateIdentifier": version, "alternateIdentifierType": versionAltType}), nil
}

func header() http.Header {
	h := http.Header{}
	h.Set("Content-Type", dataciteMediaType)
	h.Set("Accept", dataciteMediaType)
	return h
}

// Update is PUT {endpoint}/dois/{doi} with the payload's attributes and
// the markers of object k.Object at version k.Key. An event the payload
// names is left out: an update never moves the DOI's state. The engine
// reads the DOI first (ReadsBeforeUpdate); tag is unused, DataCite names
// no version tag.
func (d dataciteDriver) Update(k canonical.Keyed, _ string) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errors.New("datacite: an update needs the payload's object key")
	}
	doi, err := d.objectDOI(k.Body, k.Object)
	if err != nil {
		return driver.Request{}, err
	}
	attrs, err := dataciteAttributes(k.Body)
	if err != nil {
		return driver.Request{}, err
	}
	delete(attrs, "event")
	body, err := d.documentOf(doi, k.Object, k.Key, attrs)
	if err != nil {
		return driver.Request{}, err
	}
	return driver.Request{Method: http.MethodPut, URL: d.url(doi), Header: header(), Body: body}, nil
}

// JudgeUpdate: 200 replaced the metadata (201 too: a DOI deleted since
// the read, created again by DataCite's upsert, now holds this version);
// 404 is a DOI that is gone; 422 is metadata DataCite refuses, with its
// messages; the rest as in a create.
func (dataciteDriver) JudgeUpdate(a driver.Answer) driver.Verdict {
	if a.Err == nil {
		switch a.Status {
		case http.StatusOK, http.StatusCreated:
			return driver.Verdict{Class: driver.Created}
		case http.StatusNotFound:
			return driver.Verdict{Class: driver.Terminal, Problem: "the DOI is gone: DataCite has no such DOI (deleted since it was made); the update was not applied"}
		case http.StatusUnprocessableEntity:
			return driver.Verdict{Class: driver.Terminal, Problem: "DataCite refused the metadata: " + dcMessages(a.Body)}
		}
	}
	return driver.Verdict{Class: driver.Classify(a)}
}

// ReadObject is GET {endpoint}/dois/{doi}, read whole.
func (d dataciteDriver) ReadObject(k canonical.Keyed) (driver.Request, error) {
	if k.Object == "" {
		return driver.Request{}, errors.New("datacite: a read of an object needs its object key")
	}
	doi, err := d.objectDOI(k.Body, k.Object)
	if err != nil {
		return driver.Request{}, err
	}
	h := http.Header{}
	h.Set("Accept", dataciteMediaType)
	return driver.Request{Method: http.MethodGet, URL: d.url(doi), Header: h, Full: true}, nil
}

// JudgeRead: 200 is the DOI, Present with its attributes as the body and
// its markers as the version and the object (the engine refuses a DOI
// whose object marker is another object's); a DOI without a version
// marker is Foreign, as one registered before deposit was used (no
// markers) or by a deposit without identity; 404 is Absent; anything else
// settles nothing.
func (d dataciteDriver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	if a.Err != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	switch a.Status {
	case http.StatusOK:
	case http.StatusNotFound:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	default:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	var doc struct {
		Data struct {
			ID         string          `json:"id"`
			Attributes json.RawMessage `json:"attributes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(a.Body, &doc); err != nil || len(doc.Data.Attributes) == 0 {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the DOI read is not a JSON:API document with attributes"}
	}
	m, _ := readMarkers(a.Body)
	switch {
	case m.object == "" && m.version == "" && d.adopt:
		// Adopted: its version is named by its attributes as read, which
		// no payload's content key is, so an update follows and adds the
		// markers.
		sum := sha256.Sum256(doc.Data.Attributes)
		return driver.ObjectState{Body: doc.Data.Attributes, Version: "unmarked-" + hex.EncodeToString(sum[:])}, driver.Finding{Kind: driver.Present, ID: doc.Data.ID}
	case m.object == "" && m.version == "":
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("DOI %s carries no deposit markers (no %s alternate identifier): it was registered before deposit was used, or by another tool, and is not updated (--adopt takes the repository's DOIs under the prefix as ours to update)", doc.Data.ID, dataciteAltType)}
	case m.version == "":
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("DOI %s was minted by a deposit without --identity (its %s marker %s names a content, and it has no %s marker): it is not updated", doc.Data.ID, dataciteAltType, m.object, versionAltType)}
	}
	return driver.ObjectState{Body: doc.Data.Attributes, Version: m.version, Object: m.object}, driver.Finding{Kind: driver.Present, ID: doc.Data.ID}
}

// markers are a DOI's deposit markers, "" where it has none.
type markers struct{ object, version string }

// readMarkers reads the markers of a DOI as DataCite answers it, in
// alternateIdentifiers (or the older identifiers list).
func readMarkers(body []byte) (markers, error) {
	var doc struct {
		Data struct {
			Attributes struct {
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
	var m markers
	if err := json.Unmarshal(body, &doc); err != nil {
		return m, err
	}
	note := func(id, typ string) {
		switch {
		case strings.EqualFold(typ, dataciteAltType) && m.object == "":
			m.object = id
		case strings.EqualFold(typ, versionAltType) && m.version == "":
			m.version = id
		}
	}
	for _, a := range doc.Data.Attributes.AlternateIdentifiers {
		note(a.ID, a.Type)
	}
	for _, a := range doc.Data.Attributes.Identifiers {
		note(a.ID, a.Type)
	}
	return m, nil
}

// dcMessages is the errors of a DataCite error document, "source: title"
// joined; the body itself (cut short) when it is none.
func dcMessages(body []byte) string {
	var doc struct {
		Errors []struct {
			Source string `json:"source"`
			Title  string `json:"title"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &doc) != nil || len(doc.Errors) == 0 {
		b := bytes.TrimSpace(body)
		if len(b) > 200 {
			b = b[:200]
		}
		return string(b)
	}
	var parts []string
	for _, e := range doc.Errors {
		if e.Source != "" {
			parts = append(parts, e.Source+": "+e.Title)
		} else {
			parts = append(parts, e.Title)
		}
	}
	return strings.Join(parts, "; ")
}

// Payload folds the DOI a payload names (attributes.doi, in either shape)
// to lower case before the payload is keyed, so that two lines naming
// 10.5072/Reef-1 and 10.5072/REEF-1 are one object: DOI names are
// case-insensitive (the DOI Handbook, 2.4,
// https://www.doi.org/doi_handbook/2_Numbering.html), and DataCite stores
// them upper-cased (set_defaults in datacite/lupo's app/models/doi.rb). A
// payload whose DOI is in lower case already, or that names none, is
// keyed as it is, byte for byte.
func (dataciteDriver) Payload(canonical []byte) (body, keyText []byte, err error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return canonical, canonical, nil // not an object: the steps refuse it in their words
	}
	attrs := doc
	if data, ok := doc["data"].(map[string]any); ok && len(doc) == 1 {
		if attrs, ok = data["attributes"].(map[string]any); !ok {
			return canonical, canonical, nil
		}
	}
	doi, ok := attrs["doi"].(string)
	if !ok || doi == strings.ToLower(doi) {
		return canonical, canonical, nil
	}
	attrs["doi"] = strings.ToLower(doi)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, nil, fmt.Errorf("datacite payload: %w", err)
	}
	out := bytes.TrimRight(buf.Bytes(), "\n")
	return out, out, nil
}

var _ driver.Payloader = dataciteDriver{}
var _ driver.ContentMatcher = dataciteDriver{}

// HoldsContent reports whether a DOI that carries no deposit markers holds
// the payload's metadata already: every attribute the payload gives (but
// its DOI, whose case DataCite changes, and its event) is in the DOI's
// attributes as DataCite answers them, with the same value. Such a DOI is
// the object's first version, existing; DataCite's own attributes beside
// them (state, dates, its XML) are not compared. A value DataCite
// normalises (a name it splits, a language it adds inside) does not
// match: the line fails as another's DOI, as without this look.
func (dataciteDriver) HoldsContent(k canonical.Keyed, a driver.Answer) bool {
	if m, err := readMarkers(a.Body); err != nil || m.object != "" || m.version != "" {
		return false
	}
	return holdsAttributes(k.Body, a.Body)
}

// holdsAttributes reports whether body, a DOI as DataCite answers it,
// holds every attribute payload gives, with the same value (see
// HoldsContent).
func holdsAttributes(payload, body []byte) bool {
	want, err := dataciteAttributes(payload)
	if err != nil {
		return false
	}
	var doc struct {
		Data struct {
			Attributes map[string]json.RawMessage `json:"attributes"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &doc) != nil || doc.Data.Attributes == nil {
		return false
	}
	for name, v := range want {
		if name == "doi" || name == "event" {
			continue
		}
		held, ok := doc.Data.Attributes[name]
		if !ok {
			return false
		}
		given, err := json.Marshal(v)
		if err != nil || !sameJSON(given, held) {
			return false
		}
	}
	return true
}

// sameJSON reports whether two JSON texts are the same value.
func sameJSON(a, b []byte) bool {
	ca, err := canonical.JCS(a)
	if err != nil {
		return false
	}
	cb, err := canonical.JCS(b)
	return err == nil && bytes.Equal(ca, cb)
}
