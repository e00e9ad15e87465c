// Package dataverse provides a deposit target for Dataverse's native API:
// a dataset, its files and its publication, each exactly once, on a
// server that arbitrates none of them.
//
// Dataverse chooses every persistent identifier itself and ignores one
// sent by the client (IQSS/dataverse#3632), keeps a file added twice
// (renamed name-1.ext, or with a warning for the same content), and
// finishes a publication in the background under a finalizePublication
// lock; its search is updated asynchronously, and a failed index is only
// logged. So every deposit carries a marker, "deposit:sha256:" and its
// key, as an otherId of the citation block (agency Target.Agency), and is
// guarded step by step (see [Target]).
//
// Give a [Target] to client.New as Config.Target. A line is a dataset in
// the native JSON form ({"datasetVersion":{"metadataBlocks":{"citation":
// {"fields":[...]}}}}), or under datasets ({"metadata":M,"files":[...]})
// with M in that form.
package dataverse

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// Protocol is the protocol name that begins the store targets of this
// target.
const Protocol = "dataverse"

// Defaults.
const (
	// DefaultLockWait is the default Target.LockWait: Dataverse's own
	// guides say a publication may take minutes; locks after a DataCite
	// timeout have lasted half an hour (IQSS/dataverse#10992), and those
	// the run leaves unresolved, to a later run.
	DefaultLockWait = 10 * time.Minute
	// DefaultSettleTime is the default Target.SettleTime: Dataverse's
	// Solr soft commit is one second; an ambiguous create still running on
	// the server has the rest to end.
	DefaultSettleTime = 3 * time.Second
	// DefaultListBound is the default Target.ListBound.
	DefaultListBound = 200
	// MaxListBound is the largest Target.ListBound: the engine ends a
	// check's chain after a thousand looks, and the search, the listing
	// and the page come first.
	MaxListBound = 900
	// DefaultAgency is the default Target.Agency.
	DefaultAgency = "deposit"
)

// markerPrefix begins every marker.
const markerPrefix = "deposit:sha256:"

// Marker returns the otherIdValue a deposit with key carries.
func Marker(key string) string { return markerPrefix + key }

// Target is a Dataverse collection through the native API. A store that
// has never scanned the collection scans it once before its first deposit
// (driver.ChainSeeder): the collection's contents, read from the
// database, search pages of its datasets with their otherId, and a read
// of each dataset search does not show; a deposit whose marker it found
// starts as after a look that found its dataset. Each deposit is these
// steps, each guarded in the store:
//
//  1. look: a search for the marker (GET /api/search), unless the scan
//     found the dataset; its answer's Date header is the time before
//     which no dataset can be this deposit's.
//  2. dataset: POST /api/dataverses/{Collection}/datasets with the
//     payload, the marker merged into the citation block's otherId. After
//     an ambiguous answer it is looked for before it is sent again: the
//     search, then, since a miss proves nothing, the collection's contents
//     (read from the database) and one search page of the newest datasets
//     with their otherId; each dataset created since the look that the
//     page does not show is read, newest first, at most ListBound of them;
//     past the bound the deposit is unresolved, saying so.
//  3. files: the dataset's file list, read only when the scan or the look
//     found the dataset (a lost store), so that no file is added twice.
//  4. one step per file: POST /api/datasets/:persistentId/add, multipart,
//     with tabIngest off unless Ingest; after an ambiguous answer the
//     file list is read and the file matched by checksum (of the type
//     the server reports), folder and name before it is sent again.
//  5. publish: POST .../actions/:publish?type=major, accepted: the
//     version state and locks are polled for LockWait; a lock that lasts
//     longer leaves the deposit unresolved, naming the dataset.
//
// The deposit's identifier is the dataset's persistent identifier. The
// zero value is not usable: Endpoint and Collection are required. A Target
// is a value; its Driver is safe for concurrent use.
type Target struct {
	// Endpoint is the installation's root URL, such as
	// https://demo.dataverse.org (a trailing /api is dropped). Required.
	Endpoint string
	// Collection is the alias of the collection (dataverse) datasets are
	// created in. Required.
	Collection string
	// Token is the API token, sent as X-Dataverse-key; "" sends none (a
	// guest, which Dataverse refuses to create).
	Token string
	// Ingest asks Dataverse to ingest tabular files (tabIngest); by default
	// it is off, so that a file keeps its name and bytes.
	Ingest bool
	// LockWait is how long one run waits for a publication to end (its
	// finalizePublication lock, or any other lock, to go) before leaving
	// the deposit unresolved as stuck; default DefaultLockWait. A later
	// run polls again and never publishes twice.
	LockWait time.Duration
	// SettleTime is how long after an ambiguous create the look for it
	// is repeated before "not found" is trusted, and how long a new
	// store waits before it scans the collection; default
	// DefaultSettleTime.
	SettleTime time.Duration
	// ListBound is the most datasets created since a deposit's look, and
	// not shown by search, that its check reads one by one; default
	// DefaultListBound, at most MaxListBound.
	ListBound int
	// Agency is the otherIdAgency of the marker; default DefaultAgency.
	Agency string
}

// dv is the driver of a Target.
type dv struct {
	endpoint, alias, token string
	ingest                 bool
	lockWait, settle       time.Duration
	bound                  int
	agency                 string
}

// Driver checks the target's fields and returns its driver.
func (t Target) Driver() (driver.Driver, error) {
	ep, err := normalizeEndpoint(t.Endpoint)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(t.Collection) == "" || strings.ContainsAny(t.Collection, "/?#") {
		return nil, errors.New("dataverse: Target.Collection must be a collection's alias (such as \"root\")")
	}
	if t.LockWait < 0 || t.SettleTime < 0 || t.ListBound < 0 {
		return nil, errors.New("dataverse: Target.LockWait, SettleTime and ListBound must not be negative")
	}
	if t.ListBound > MaxListBound {
		return nil, fmt.Errorf("dataverse: Target.ListBound is at most %d (a check's chain of reads is bounded)", MaxListBound)
	}
	d := &dv{endpoint: ep, alias: t.Collection, token: t.Token, ingest: t.Ingest,
		lockWait: t.LockWait, settle: t.SettleTime, bound: t.ListBound, agency: t.Agency}
	if d.lockWait == 0 {
		d.lockWait = DefaultLockWait
	}
	if d.settle == 0 {
		d.settle = DefaultSettleTime
	}
	if d.bound == 0 {
		d.bound = DefaultListBound
	}
	if d.agency == "" {
		d.agency = DefaultAgency
	}
	return d, nil
}

// target is the store target of a step ("" for the deposit's own):
// "dataverse-STEP" and the collection's URL.
func (d *dv) target(step string) string {
	proto := Protocol
	if step != "" {
		proto += "-" + step
	}
	return driver.TargetName(proto, d.endpoint+"/dataverses/"+url.PathEscape(d.alias))
}

func (d *dv) Name() string { return d.target("") }
func (d *dv) StepTargets() []string {
	return []string{d.target("look"), d.target("dataset"), d.target("files"), d.target("file"),
		d.target("draft-look"), d.target("draft-discard"), d.target("draft"), d.target("draft-file"), d.target("draft-publish"), d.target("version")}
}
func (d *dv) SecretFingerprint() string { return "" }
func (d *dv) Guards(name string) bool   { return http.CanonicalHeaderKey(name) == "X-Dataverse-Key" }

// api is the URL of an API path (after /api/), with its query.
func (d *dv) api(path string, q url.Values) string {
	u := d.endpoint + "/api/" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// header is a request's header: the token, and Accept.
func (d *dv) header() http.Header {
	h := http.Header{}
	h.Set("Accept", "application/json")
	if d.token != "" {
		h.Set("X-Dataverse-key", d.token)
	}
	return h
}

func (d *dv) get(u string) driver.Request {
	return driver.Request{Method: http.MethodGet, URL: u, Header: d.header(), Full: true}
}

// Steps are look, dataset, files (with files), one per file, publish.
func (d *dv) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	payload := k.Body
	var files []driver.DatasetFile
	if dir != "" {
		var err error
		if files, payload, err = datasetDocument(k.Body); err != nil {
			return nil, err
		}
	}
	marker := Marker(k.Key)
	// An object's record names the version it holds too (k.Version, its
	// content key; see UpdateSteps).
	body, err := createBody(payload, marker, d.agency, k.Version)
	if err != nil {
		return nil, err
	}
	steps := []driver.Step{d.lookStep(k.Key, marker), d.createStep(k.Key, marker, body)}
	if len(files) > 0 {
		local := localFiles(dir, files)
		steps = append(steps, d.filesStep(k.Key, local))
		for _, f := range local {
			steps = append(steps, d.fileStep(k.Key, f))
		}
	}
	return append(steps, d.publishStep(k.Key)), nil
}

// Identifiers of the look step: "found PID" when the search found the
// deposit's dataset, else "new UNIX" with the server's time of the look.
const (
	foundPrefix = "found "
	newPrefix   = "new "
)

// lookStep searches for the marker before anything is created.
func (d *dv) lookStep(key, marker string) driver.Step {
	return driver.Step{
		Label: "look", Target: d.target("look"), Key: key, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) { return d.get(d.searchURL(marker)), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err != nil || a.Status != http.StatusOK {
				return judge(a, readStep)
			}
			pids, ok := markedHits(a.Body, marker)
			switch {
			case !ok:
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the search answer is not a page of hits"}
			case len(pids) > 1:
				return driver.Verdict{Class: driver.Terminal, Problem: duplicates(marker, pids)}
			case len(pids) == 1:
				return driver.Verdict{Class: driver.Created, ID: foundPrefix + pids[0]}
			}
			at := time.Unix(0, 0)
			if t, err := http.ParseTime(a.Header.Get("Date")); err == nil {
				at = t
			}
			return driver.Verdict{Class: driver.Created, ID: newPrefix + strconv.FormatInt(at.Unix(), 10)}
		},
	}
}

// searchURL searches the collection's datasets, drafts included, for
// marker, with each hit's otherId values.
func (d *dv) searchURL(marker string) string {
	return d.api("search", url.Values{
		"q": {`otherIdValue:"` + marker + `"`}, "type": {"dataset"}, "subtree": {d.alias},
		"metadata_fields": {"citation:otherId"}, "show_entity_ids": {"true"}, "per_page": {"100"},
	})
}

// duplicates is the problem of several datasets with one marker.
func duplicates(marker string, pids []string) string {
	return fmt.Sprintf("%d datasets carry the marker %s: %s; keep one, delete the other drafts, then run again with --retry-failed",
		len(pids), marker, strings.Join(pids, ", "))
}

// createStep creates the dataset; it is settled by a look that found it.
func (d *dv) createStep(key, marker string, body []byte) driver.Step {
	return driver.Step{
		Label: "dataset", Target: d.target("dataset"), Key: key, Durable: true,
		Settled: func(prior []string) (string, bool) {
			pid, found := strings.CutPrefix(prior[0], foundPrefix)
			return pid, found
		},
		Build: func([]string) (driver.Request, error) {
			h := d.header()
			h.Set("Content-Type", "application/json")
			return driver.Request{Method: http.MethodPost, URL: d.api("dataverses/"+url.PathEscape(d.alias)+"/datasets", nil),
				Header: h, Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, createStep)
			if v.Class == driver.Created {
				if v.ID, _ = driver.StringAt(a.Body, []string{"/data/persistentId"}); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the create answer names no persistentId"
				}
			}
			return v
		},
		Check: d.createCheck(marker),
	}
}

// createBody is the payload with the marker (and the version marker of
// versionKey, unless "") merged into the citation block's otherId: appended
// to the values the user set, never replacing them. A payload that holds
// another deposit's marker, or a version marker, is refused.
func createBody(payload []byte, marker, agency, versionKey string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return nil, errors.New("dataverse: the payload must be a JSON object in Dataverse's native form ({\"datasetVersion\":{...}})")
	}
	version, _ := doc["datasetVersion"].(map[string]any)
	blocks, _ := version["metadataBlocks"].(map[string]any)
	cit, _ := blocks["citation"].(map[string]any)
	fields, ok := cit["fields"].([]any)
	if !ok {
		return nil, errors.New("dataverse: the payload has no datasetVersion.metadataBlocks.citation.fields array")
	}
	otherID := func(value string) any {
		return map[string]any{
			"otherIdAgency": map[string]any{"typeName": "otherIdAgency", "multiple": false, "typeClass": "primitive", "value": agency},
			"otherIdValue":  map[string]any{"typeName": "otherIdValue", "multiple": false, "typeClass": "primitive", "value": value},
		}
	}
	ours := []any{otherID(marker)}
	if versionKey != "" {
		ours = append(ours, otherID(VersionMarker(versionKey)))
	}
	merged := false
	for _, item := range fields {
		f, _ := item.(map[string]any)
		if f["typeName"] != "otherId" {
			continue
		}
		values, ok := f["value"].([]any)
		if !ok {
			return nil, errors.New("dataverse: the citation field otherId must have a list of values")
		}
		for _, v := range values {
			other := otherIDValue(v)
			if strings.HasPrefix(other, markerPrefix) && other != marker {
				return nil, fmt.Errorf("dataverse: otherId already holds the deposit marker %s, not this payload's %s", other, marker)
			}
			if strings.HasPrefix(other, versionPrefix) {
				return nil, fmt.Errorf("dataverse: otherId holds a version marker %s (leave it out: deposit sets it)", other)
			}
		}
		f["value"], merged = append(values, ours...), true
	}
	if !merged {
		cit["fields"] = append(fields, map[string]any{"typeName": "otherId", "multiple": true, "typeClass": "compound", "value": ours})
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("dataverse: create body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// otherIDValue is the otherIdValue of one otherId value, or "".
func otherIDValue(v any) string {
	m, _ := v.(map[string]any)
	sub, _ := m["otherIdValue"].(map[string]any)
	s, _ := sub["value"].(string)
	return s
}

// publishStep publishes the draft: accepted, then polled.
func (d *dv) publishStep(key string) driver.Step {
	return driver.Step{
		Label: "publish", Target: d.target(""), Key: key, Primary: true, Durable: true, Accepts: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, Header: d.header(), Full: true,
				URL: d.api("datasets/:persistentId/actions/:publish", url.Values{"persistentId": {prior[1]}, "type": {"major"}})}, nil
		},
		Judge: judgePublish,
		Check: d.publishCheck(),
	}
}

// judgePublish: accepted is the answer of a publish (Dataverse finishes
// it in the background), and so is "locked for finalizePublication" (a
// publish under way: ours, sent before, or another process's);
// "already released" is looked into, by the version state.
func judgePublish(a driver.Answer) driver.Verdict {
	m := message(a.Body)
	switch {
	case a.Err == nil && (a.Status == http.StatusOK || a.Status == http.StatusAccepted):
		return driver.Verdict{Class: driver.Accepted}
	case a.Err == nil && a.Status == http.StatusForbidden && strings.Contains(m, "finalizePublication"):
		return driver.Verdict{Class: driver.Accepted, Problem: m}
	case a.Err == nil && a.Status == http.StatusForbidden && strings.Contains(m, "already released"):
		return driver.Verdict{Class: driver.Conflict, Problem: m}
	}
	return judge(a, publishStep)
}
