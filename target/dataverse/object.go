package dataverse

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// With an identity (the client's Config.Identity), a line is one version
// of an object, whose dataset is its record:
//
//   - the dataset carries two markers as otherId values: Marker of the
//     object key (the one a create without identity carries of its
//     content key), and VersionMarker of the content key of the version
//     it holds;
//   - a later version is a new version of the dataset: its draft's
//     metadata (PUT .../versions/:draft, which makes the draft or
//     overwrites it: IQSS/dataverse api/Datasets.java, updateDraftVersion),
//     the files that differ by checksum from the published version's
//     (added, replaced, deleted), then the publication, minor when only
//     the metadata changed and major when a file did, as Dataverse
//     requires (engine/command/impl/PublishDatasetCommand.java refuses a
//     minor release of a version whose files changed; DatasetVersion.java,
//     isMinorUpdate);
//   - the update's result names the version Dataverse numbered (Result.RecordID,
//     "2.0"); its identifier stays the dataset's persistent identifier.
//
// Dataverse checks no precondition on any of these writes (the
// sourceLastUpdateTime of editMetadata is not taken by the draft's PUT),
// so the engine reads the published version before every update and goes
// on only while it holds the version the store applied (driver.StepUpdater).

var (
	_ driver.StepUpdater  = (*dv)(nil)
	_ driver.RecordReader = (*dv)(nil)
)

// versionPrefix begins every version marker.
const versionPrefix = "deposit-version:sha256:"

// VersionMarker returns the otherIdValue that names the version (content
// key) a dataset of an object holds.
func VersionMarker(key string) string { return versionPrefix + key }

// markersOf are the object key and the version a version's citation
// fields name by their markers, "" where there is none.
func markersOf(fields []citationField) (object, version string) {
	for _, f := range fields {
		if f.TypeName != "otherId" {
			continue
		}
		var values []any
		if json.Unmarshal(f.Value, &values) != nil {
			continue
		}
		for _, v := range values {
			s := otherIDValue(v)
			if k, ok := strings.CutPrefix(s, markerPrefix); ok && object == "" {
				object = k
			}
			if k, ok := strings.CutPrefix(s, versionPrefix); ok && version == "" {
				version = k
			}
		}
	}
	return object, version
}

// versionAnswer is the part of a dataset version's JSON (JsonPrinter) the
// driver reads.
type versionAnswer struct {
	VersionState   string `json:"versionState"`
	VersionNumber  *int64 `json:"versionNumber"`
	VersionMinor   *int64 `json:"versionMinorNumber"`
	DatasetPID     string `json:"datasetPersistentId"`
	MetadataBlocks struct {
		Citation struct {
			Fields []citationField `json:"fields"`
		} `json:"citation"`
	} `json:"metadataBlocks"`
	Files []fileEntry `json:"files"`
}

// number is the version's number, "2.1"; "" for a draft, which has none.
func (v versionAnswer) number() string {
	if v.VersionNumber == nil || v.VersionMinor == nil {
		return ""
	}
	return strconv.FormatInt(*v.VersionNumber, 10) + "." + strconv.FormatInt(*v.VersionMinor, 10)
}

// readVersion reads an answer {"status":"OK","data":VERSION}.
func readVersion(body []byte) (versionAnswer, bool) {
	var env struct {
		Data *versionAnswer `json:"data"`
	}
	if json.Unmarshal(body, &env) != nil || env.Data == nil {
		return versionAnswer{}, false
	}
	return *env.Data, true
}

// versionURL is a version of the dataset pid (":draft",
// ":latest-published", ":latest").
func (d *dv) versionURL(pid, version string, files bool) string {
	q := url.Values{"persistentId": {pid}}
	if !files {
		q.Set("excludeFiles", "true")
	}
	return d.api("datasets/:persistentId/versions/"+version, q)
}

// ReadObject cannot find a dataset: Dataverse names it. See ReadRecord.
func (d *dv) ReadObject(canonical.Keyed) (driver.Request, error) {
	return driver.Request{}, errors.New("dataverse: a dataset is read by its persistent identifier (driver.RecordReader)")
}

// ReadRecord reads the dataset's latest published version, with its files
// (GET .../versions/:latest-published): an update is built from what is
// published, and a draft is no version the object holds.
func (d *dv) ReadRecord(_ canonical.Keyed, pid string) (driver.Request, error) {
	if pid == "" {
		return driver.Request{}, errors.New("dataverse: the object's dataset is not known (no persistent identifier)")
	}
	return d.get(d.versionURL(pid, ":latest-published", true)), nil
}

// JudgeRead: 200 is the published version, Present with the version JSON
// as the body and its markers as the version and the object; a version
// without a version marker is Foreign (a dataset made without --identity,
// or by another tool); a 404 is Absent (no such dataset, or none
// published); the rest settles nothing.
func (d *dv) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	if a.Err != nil || a.Status != http.StatusOK {
		if a.Err == nil && a.Status == http.StatusNotFound {
			return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
		}
		return driver.ObjectState{}, unknown(a)
	}
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	v, ok := readVersion(a.Body)
	if !ok || json.Unmarshal(a.Body, &env) != nil {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the version answer cannot be read"}
	}
	pid := pidOf(a.URL)
	object, version := markersOf(v.MetadataBlocks.Citation.Fields)
	switch {
	case object == "" && version == "":
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
			"dataset %s carries no deposit marker (no otherId %s...): it was not made by deposit, and is not updated", pid, markerPrefix)}
	case version == "":
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
			"dataset %s was made by a deposit without --identity (it has no otherId %s...): it is not updated", pid, versionPrefix)}
	}
	return driver.ObjectState{Body: env.Data, Tag: v.number(), Version: version, Object: object, RecordID: v.number()}, driver.Finding{Kind: driver.Present, ID: pid}
}

// Identifiers of the draft look: no draft; a draft of ours for another
// version, to discard; a draft of ours for this version, with its files.
const (
	noDraft      = "none"
	discardDraft = "discard"
	draftPrefix  = "draft "
)

// draftFile is a file of a draft as the draft look records it.
type draftFile struct {
	Dir   string `json:"d,omitempty"`
	Label string `json:"l"`
	Type  string `json:"t"`
	Sum   string `json:"s"`
	Tab   bool   `json:"tab,omitempty"`
	Orig  string `json:"o,omitempty"`
}

func (f draftFile) entry() fileEntry {
	var e fileEntry
	e.Label, e.DirectoryLabel = f.Label, f.Dir
	e.DataFile.Filename, e.DataFile.OriginalFileName, e.DataFile.TabularData = f.Label, f.Orig, f.Tab
	e.DataFile.Checksum.Type, e.DataFile.Checksum.Value = f.Type, f.Sum
	return e
}

// fileOp is one change of the files: an add (id 0), a replace of the
// published file id, or a delete of it (local nil).
type fileOp struct {
	local *localFile
	id    int64
	path  string
}

func (op fileOp) kind() string {
	switch {
	case op.local == nil:
		return "delete"
	case op.id != 0:
		return "replace"
	}
	return "add"
}

// filePlan compares the dataset's files with the published ones, by path
// and checksum: an equal file is never sent again.
func filePlan(local []*localFile, published []fileEntry) []fileOp {
	var ops []fileOp
	kept := make([]bool, len(published))
	for _, f := range local {
		i := slices.IndexFunc(published, f.named)
		switch {
		case i < 0:
			ops = append(ops, fileOp{local: f, path: f.Path})
		case f.matches(published[i]):
			kept[i] = true
		default:
			kept[i] = true
			ops = append(ops, fileOp{local: f, id: published[i].DataFile.ID, path: f.Path})
		}
	}
	for i, e := range published {
		if !kept[i] {
			ops = append(ops, fileOp{id: e.DataFile.ID, path: e.path()})
		}
	}
	return ops
}

// UpdateSteps apply k's version to the dataset u.Record, whose published
// version (u.Held) holds the version the store applied:
//
//  1. draft look: GET .../versions/:draft. None, or ours for this version
//     (its version marker k's: a killed run's, continued, its files
//     recorded), or ours for another (discarded); any other draft (one a
//     person opened, whose markers are the published version's) stops the
//     line, and nothing is written.
//  2. discard: DELETE .../versions/:draft, only for a draft of another version.
//  3. draft: PUT .../versions/:draft with k's metadata and both markers.
//  4. one step per file that differs from the published version's:
//     POST /api/datasets/:persistentId/add, POST /api/files/{id}/replace,
//     DELETE /api/files/{id}; each settled by a draft found holding it,
//     and looked for in the draft's file list before it is sent again.
//  5. publish (the primary step): type=minor without file changes, else
//     major, polled as a create's until the finalizePublication lock ends
//     and the released version carries k's version marker.
//  6. version: the number Dataverse gave the released version, the result's
//     RecordID.
func (d *dv) UpdateSteps(k canonical.Keyed, u driver.ObjectUpdate) ([]driver.Step, error) {
	if k.Object == "" || u.Record == "" {
		return nil, errors.New("dataverse: an update needs the object key and its dataset")
	}
	payload := k.Body
	var local []*localFile
	if u.Dir != "" {
		files, meta, err := datasetDocument(k.Body)
		if err != nil {
			return nil, err
		}
		payload, local = meta, localFiles(u.Dir, files)
	}
	body, err := createBody(payload, Marker(k.Object), d.agency, k.Key)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Version json.RawMessage `json:"datasetVersion"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Version) == 0 {
		return nil, errors.New("dataverse: the payload has no datasetVersion")
	}
	var held versionAnswer
	if err := json.Unmarshal(u.Held.Body, &held); err != nil {
		return nil, fmt.Errorf("dataverse: the published version read cannot be parsed: %w", err)
	}
	var ops []fileOp
	if u.Dir != "" {
		ops = filePlan(local, held.Files)
	}
	pid := u.Record
	steps := []driver.Step{d.draftLookStep(u.Key, pid, k, u.Held.Version), d.discardStep(u.Key, pid), d.draftStep(u.Key, pid, doc.Version)}
	for _, op := range ops {
		steps = append(steps, d.opStep(u.Key, pid, op))
	}
	typ := "minor"
	if len(ops) > 0 {
		typ = "major"
	}
	return append(steps, d.updatePublishStep(u.Key, pid, typ, k.Key), d.versionStep(u.Key, pid, k.Key)), nil
}

// draftLookStep reads the dataset's draft, if any, before anything is
// written: see UpdateSteps.
func (d *dv) draftLookStep(key, pid string, k canonical.Keyed, published string) driver.Step {
	return driver.Step{
		Label: "draft look", Target: d.target("draft-look"), Key: key, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) { return d.get(d.versionURL(pid, ":draft", true)), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusNotFound && strings.HasPrefix(message(a.Body), "Dataset version ") {
				return driver.Verdict{Class: driver.Created, ID: noDraft}
			}
			if a.Err != nil || a.Status != http.StatusOK {
				return judge(a, readStep)
			}
			v, ok := readVersion(a.Body)
			if !ok {
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the draft answer cannot be read"}
			}
			object, version := markersOf(v.MetadataBlocks.Citation.Fields)
			switch {
			case v.VersionState != "DRAFT":
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the draft answer is not a draft (" + v.VersionState + ")"}
			case object != k.Object || version == "" || version == published:
				return driver.Verdict{Class: driver.Terminal, Problem: fmt.Sprintf(
					"dataset %s has a draft version this deposit did not make (its otherId names no version of this object but the published one): it is not overwritten; publish or delete that draft in Dataverse, then run again with --retry-failed", pid)}
			case version != k.Key:
				return driver.Verdict{Class: driver.Created, ID: discardDraft}
			}
			files := []draftFile{}
			for _, e := range v.Files {
				files = append(files, draftFile{Dir: strings.Trim(e.DirectoryLabel, "/"), Label: e.label(), Type: e.DataFile.Checksum.Type,
					Sum: strings.ToLower(e.DataFile.Checksum.Value), Tab: e.DataFile.TabularData, Orig: e.DataFile.OriginalFileName})
			}
			id, _ := json.Marshal(files)
			return driver.Verdict{Class: driver.Created, ID: draftPrefix + string(id)}
		},
	}
}

// draftFiles are the files the draft look found in a draft of this
// version; ok false when there was none (or it was discarded).
func draftFiles(look string) ([]fileEntry, bool) {
	raw, ok := strings.CutPrefix(look, draftPrefix)
	if !ok {
		return nil, false
	}
	var files []draftFile
	if json.Unmarshal([]byte(raw), &files) != nil {
		return nil, false
	}
	out := make([]fileEntry, len(files))
	for i, f := range files {
		out[i] = f.entry()
	}
	return out, true
}

// discardStep deletes a draft of another version of ours: one a killed or
// refused update left, which the published version's files are compared
// with no longer. After the look, no one but this deposit writes a draft
// of ours, so a second delete (of the one it deletes) has no other effect:
// arbitrated.
func (d *dv) discardStep(key, pid string) driver.Step {
	return driver.Step{
		Label: "discard draft", Target: d.target("draft-discard"), Key: key, Durable: true, Arbitrated: true,
		Settled: func(prior []string) (string, bool) { return "kept", prior[0] != discardDraft },
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodDelete, URL: d.versionURL(pid, ":draft", true), Header: d.header(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil && (a.Status == http.StatusOK || (a.Status == http.StatusUnauthorized && strings.Contains(message(a.Body), "NOT a DRAFT"))) {
				// Deleted, or gone already (IQSS/dataverse api/Datasets.java,
				// deleteDraftVersion: "This is NOT a DRAFT version").
				return driver.Verdict{Class: driver.Created, ID: "discarded"}
			}
			return judge(a, readStep)
		},
	}
}

// draftStep writes the version's metadata into the draft, which the PUT
// makes when there is none (a copy of the published version's files). An
// overwrite with the same body has no second effect: arbitrated.
func (d *dv) draftStep(key, pid string, version []byte) driver.Step {
	return driver.Step{
		Label: "draft", Target: d.target("draft"), Key: key, Durable: true, Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			h := d.header()
			h.Set("Content-Type", "application/json")
			return driver.Request{Method: http.MethodPut, URL: d.versionURL(pid, ":draft", true), Header: h, Body: version, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			m := message(a.Body)
			switch {
			case a.Err == nil && a.Status == http.StatusOK:
				return driver.Verdict{Class: driver.Created, ID: "saved"}
			case a.Err == nil && (strings.HasPrefix(m, "Error parsing dataset version") || a.Status == http.StatusConflict):
				// A body Dataverse cannot parse, or terms it refuses
				// (dataset.message.toua.invalid, a 409).
				return driver.Verdict{Class: driver.Terminal, Problem: "invalid metadata: " + m}
			}
			return judge(a, createStep)
		},
	}
}

// opStep is one file change in the draft; see UpdateSteps.
func (d *dv) opStep(key, pid string, op fileOp) driver.Step {
	s := driver.Step{
		Label: op.kind() + " " + strconv.Quote(op.path), Target: d.target("draft-file"), Key: key + " " + op.path, Durable: true,
		Settled: func(prior []string) (string, bool) {
			files, ok := draftFiles(prior[0])
			if !ok {
				return "", false
			}
			return op.found(files)
		},
		Check: &driver.Check{
			Build: func([]string) (driver.Request, error) { return d.get(d.versionURL(pid, ":draft", true)), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				v, ok := readVersion(a.Body)
				if !ok || v.VersionState != "DRAFT" {
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the draft's file list cannot be read"}
				}
				if id, found := op.found(v.Files); found {
					return driver.Finding{Kind: driver.Present, ID: id}
				}
				return driver.Finding{Kind: driver.Absent}
			},
		},
	}
	switch op.kind() {
	case "delete":
		s.Build = func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodDelete, URL: d.api("files/"+strconv.FormatInt(op.id, 10), nil), Header: d.header(), Full: true}, nil
		}
		s.Judge = func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusOK {
				return driver.Verdict{Class: driver.Created, ID: "deleted"}
			}
			if a.Err == nil && strings.HasPrefix(message(a.Body), "Delete failed") {
				return driver.Verdict{Class: driver.Terminal, Problem: message(a.Body)}
			}
			return judge(a, addStep)
		}
	default:
		extra := map[string]any{}
		u := d.api("datasets/:persistentId/add", url.Values{"persistentId": {pid}})
		if op.kind() == "replace" {
			// A replacement keeps neither the folder nor the type check
			// (native-api.rst, "Replacing Files"): both are said.
			extra["forceReplace"] = true
			u = d.api("files/"+strconv.FormatInt(op.id, 10)+"/replace", nil)
		}
		body := d.multipart(key, op.local, extra)
		s.Build = func([]string) (driver.Request, error) {
			h := d.header()
			h.Set("Content-Type", "multipart/form-data; boundary="+body.boundary)
			return driver.Request{Method: http.MethodPost, Header: h, Open: body.open, Size: body.size, Full: true, URL: u}, nil
		}
		s.Judge = func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusBadRequest && strings.Contains(message(a.Body), "duplicate content") {
				// The replacement is the file there: ours, sent before.
				return driver.Verdict{Class: driver.Conflict, Problem: message(a.Body)}
			}
			return judgeAdded(a)
		}
	}
	return s
}

// found reports whether files (a draft's) show op done, with the step's
// identifier: the file there with the local checksum, or, for a delete,
// no file at the path.
func (op fileOp) found(files []fileEntry) (string, bool) {
	if op.local == nil {
		i := slices.IndexFunc(files, func(e fileEntry) bool { return e.path() == op.path || e.DataFile.ID == op.id && op.id != 0 })
		return "deleted", i < 0
	}
	if i := slices.IndexFunc(files, op.local.matches); i >= 0 {
		return files[i].checksum(), true
	}
	return "", false
}

// updatePublishStep publishes the draft as a version of type typ; it is
// settled once the released version carries the version marker of key.
func (d *dv) updatePublishStep(key, pid, typ, version string) driver.Step {
	check := d.publishCheck()
	check.Build = func([]string) (driver.Request, error) {
		return d.get(d.api("datasets/:persistentId/locks", url.Values{"persistentId": {pid}})), nil
	}
	locks := check.Judge
	check.Judge = func(a driver.Answer) driver.Finding {
		f := locks(a)
		if f.Kind == driver.Absent && f.Then != nil {
			f.Then = d.publishedCheck(pid, version)
		}
		return f
	}
	return driver.Step{
		Label: "publish", Target: d.target("draft-publish"), Key: key, Primary: true, Durable: true, Accepts: true,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, Header: d.header(), Full: true,
				URL: d.api("datasets/:persistentId/actions/:publish", url.Values{"persistentId": {pid}, "type": {typ}})}, nil
		},
		Judge: judgePublish,
		Check: check,
	}
}

// publishedCheck reads the latest version: a draft is not published yet;
// a released version with the marker of version is this update's; any
// other released version means the draft is gone (deleted, or published
// by someone else), which is said rather than published over.
func (d *dv) publishedCheck(pid, version string) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) { return d.get(d.versionURL(pid, ":latest", false)), nil },
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			v, ok := readVersion(a.Body)
			if !ok {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the version answer cannot be read"}
			}
			_, marked := markersOf(v.MetadataBlocks.Citation.Fields)
			switch {
			case v.VersionState == "DRAFT":
				return driver.Finding{Kind: driver.Absent}
			case marked == version:
				return driver.Finding{Kind: driver.Present, ID: pid}
			}
			return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
				"dataset %s has no draft of this version to publish, and its latest version (%s) is not this one: the draft was deleted or published elsewhere", pid, v.number())}
		},
	}
}

// versionStep reads the number Dataverse gave the version published:
// "1.1" after a minor release, "2.0" after a major one.
func (d *dv) versionStep(key, pid, version string) driver.Step {
	return driver.Step{
		Label: "version", Target: d.target("version"), Key: key, Durable: true, Arbitrated: true, RecordID: true,
		Build: func([]string) (driver.Request, error) {
			return d.get(d.versionURL(pid, ":latest-published", false)), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err != nil || a.Status != http.StatusOK {
				return judge(a, readStep)
			}
			v, ok := readVersion(a.Body)
			_, marked := markersOf(v.MetadataBlocks.Citation.Fields)
			if !ok || marked != version || v.number() == "" {
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the published version does not show this update yet"}
			}
			return driver.Verdict{Class: driver.Created, ID: v.number()}
		},
	}
}
