package invenio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
)

// With an identity (the client's Config.Identity), a line is one version of
// an object, whose record is a published InvenioRDM record named by its
// record id:
//
//   - the record carries two alternate identifiers: the marker of the
//     object key (Marker), kept for good, and the version marker
//     "urn:deposit-version:sha256:" + the content key of the version it
//     holds, replaced by every update;
//   - it is read through GET {Endpoint}/records/{id}/versions/latest (the
//     database, never search), whose markers tell the engine the version
//     held;
//   - a changed line whose files are the record's (by key and checksum) is
//     an edit under OnChangeEdit: POST .../draft opens the edit draft
//     (InvenioRDM answers 201 with the one already open), PUT .../draft
//     saves the line's metadata with If-Match on the draft's revision_id,
//     and the publish keeps the record, its DOI and its versions;
//   - a changed line whose files differ, or any change under
//     OnChangeVersion, is a new version: POST .../versions, the draft
//     re-marked, the previous files imported when some are kept (those
//     whose checksum changed, or that the line drops, deleted from the
//     draft), the new ones uploaded, then the publish; the new version's id
//     is the object's record from then on. InvenioRDM locks the files of an
//     edit draft by default (RDM_LOCK_EDIT_PUBLISHED_FILES), so a file
//     change goes through a new version, as InvenioRDM itself asks.
//
// An edit draft or a new version's draft is adopted when it carries this
// version's marker (a killed run's) or equals the published record (no one
// saved anything in it yet); one holding anyone else's changes is not: the
// edit fails naming it, the new version waits (driver.ErrNotYet) until it
// is published or discarded.

// The values of Target.OnChange.
const (
	OnChangeEdit    = "edit"
	OnChangeVersion = "version"
)

// versionMarkerPrefix starts the marker of the version an object's record
// holds; the rest is "sha256:" and the content key. It is a URN of a
// namespace of its own, so that no reader of deposit markers
// ("urn:deposit:") takes it for a deposit's.
const versionMarkerPrefix = "urn:deposit-version:"

// versionMarker is the marker of version (a content key).
func versionMarker(version string) string { return versionMarkerPrefix + "sha256:" + version }

// The store targets of an update's saved edit draft and of its publish
// (the update's primary step: never Name, as an update makes no deposit).
func (d invenioDriver) editTarget() string {
	return driver.TargetName(protocol.Invenio+"-edit", d.endpoint)
}
func (d invenioDriver) updateTarget() string {
	return driver.TargetName(protocol.Invenio+"-update", d.endpoint)
}

// objectLine refuses what an object's line cannot ask for.
func (d invenioDriver) objectLine(opts lineOptions) error {
	switch {
	case len(d.secret) > 0:
		return errors.New("invenio: with an identity, the version marker names the content key: a key secret (DEPOSIT_KEY_SECRET) would be revealed by it, so the two do not go together")
	case !d.publish:
		return errors.New("invenio: with an identity, an object's record is a published record: --no-publish does not apply")
	case opts != lineOptions{}:
		return fmt.Errorf("invenio: with an identity, an object's versions are the client's to make: a line cannot name %q", optionsMember)
	}
	return nil
}

// ReadObject cannot name the record: InvenioRDM mints its id. The engine
// reads it with ReadRecord.
func (d invenioDriver) ReadObject(canonical.Keyed) (driver.Request, error) {
	return driver.Request{}, errors.New("invenio: an object's record is read by its record id")
}

// ReadRecord reads the latest published version of the object's record,
// named by the id of any of its versions.
func (d invenioDriver) ReadRecord(_ canonical.Keyed, record string) (driver.Request, error) {
	if record == "" {
		return driver.Request{}, errors.New("invenio: the object's record has no id in the store")
	}
	return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(record)+"/versions/latest", nil), Header: acceptJSON(), Full: true}, nil
}

// JudgeRead: the latest published version, Present with its markers as the
// version and the object; a record without a version marker is Foreign;
// 404 or 410 (deleted) is Absent.
func (d invenioDriver) JudgeRead(a driver.Answer) (driver.ObjectState, driver.Finding) {
	switch {
	case a.Err == nil && (a.Status == http.StatusNotFound || a.Status == http.StatusGone):
		return driver.ObjectState{}, driver.Finding{Kind: driver.Absent}
	case a.Err != nil || a.Status != http.StatusOK:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
	}
	h := hitOf(a.Body)
	if h.ID == "" || !h.Published {
		return driver.ObjectState{}, driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the latest version's answer is not a published record"}
	}
	ms, vs := h.markers(), h.versionMarkers()
	switch {
	case len(ms) == 0 && len(vs) == 0:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("record %s carries no deposit marker: it was not made by deposit, and is not edited", h.ID)}
	case len(vs) == 0:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("record %s was deposited without --identity (its marker %s names a content, and it has no version marker): it is not edited", h.ID, strings.Join(ms, ", "))}
	case len(vs) > 1 || len(ms) > 1:
		return driver.ObjectState{}, driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("record %s carries the markers %s: more than one object's or version's, which no deposit writes; it is not edited", h.ID, strings.Join(append(ms, vs...), ", "))}
	}
	object, _ := strings.CutPrefix(strings.Join(ms, ""), invenioMarkerPrefix+"sha256:")
	version, _ := strings.CutPrefix(vs[0], versionMarkerPrefix+"sha256:")
	return driver.ObjectState{Body: a.Body, Version: version, Object: object, RecordID: h.ID}, driver.Finding{Kind: driver.Present, ID: h.ID}
}

// heldRecord is the part of the published record the engine read that an
// update is built from.
type heldRecord struct {
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata"`
	Files    struct {
		Enabled bool            `json:"enabled"`
		Entries json.RawMessage `json:"entries"`
	} `json:"files"`
}

// checksums are the record's files, checksum by key: files.entries is an
// object keyed by file key in a record (invenio-rdm-records
// services/schemas/files.py, FilesSchema.entries), a list in a draft's
// files listing; both are read.
func (h heldRecord) checksums() map[string]string {
	sums := map[string]string{}
	type entry struct {
		Key      string `json:"key"`
		Checksum string `json:"checksum"`
	}
	var byKey map[string]entry
	if json.Unmarshal(h.Files.Entries, &byKey) == nil {
		for k, e := range byKey {
			sums[k] = e.Checksum
		}
		return sums
	}
	var list []entry
	_ = json.Unmarshal(h.Files.Entries, &list)
	for _, e := range list {
		sums[e.Key] = e.Checksum
	}
	return sums
}

// UpdateSteps are an edit of the record, or a new version of it (see
// above).
func (d invenioDriver) UpdateSteps(k canonical.Keyed, u driver.ObjectUpdate) ([]driver.Step, error) {
	if k.Object == "" {
		return nil, errors.New("invenio: an update needs the payload's object key")
	}
	files, payload, err := d.objectPayload(k)
	if err != nil {
		return nil, err
	}
	var held heldRecord
	if err := json.Unmarshal(u.Held.Body, &held); err != nil || held.ID == "" {
		return nil, errors.New("invenio: the record read before the update is not a record")
	}
	marker, version := Marker(k.Object, nil), versionMarker(k.Key)
	sums := held.checksums()
	same := (len(files) > 0) == held.Files.Enabled && len(files) == len(sums)
	for _, f := range files {
		md5 := k.MD5[f.Path]
		if md5 == "" {
			return nil, fmt.Errorf("invenio: no MD5 for file %q (the keyer must be made WithFileMD5)", f.Path)
		}
		same = same && sums[f.Path] == "md5:"+md5
	}
	body, err := invenioDraftBody(payload, marker, len(files) > 0, k.Key)
	if err != nil {
		return nil, err
	}
	if same && !d.version {
		return d.editSteps(u.Key, held, body, version), nil
	}
	return d.objectVersionSteps(k, u, held, files, sums, body, version), nil
}

// objectPayload splits an object's line into its files and its metadata.
func (d invenioDriver) objectPayload(k canonical.Keyed) ([]driver.DatasetFile, []byte, error) {
	payload := k.Body
	var files []driver.DatasetFile
	if k.MD5 != nil {
		var doc struct {
			Dataset  []driver.DatasetFile `json:"dataset"`
			Metadata json.RawMessage      `json:"metadata"`
		}
		if err := json.Unmarshal(k.Body, &doc); err != nil || len(doc.Dataset) == 0 {
			return nil, nil, errors.New("invenio: not a dataset document")
		}
		files, payload = doc.Dataset, doc.Metadata
		if len(files) > d.maxFiles {
			return nil, nil, fmt.Errorf("invenio: %d files, but a record may have at most %d (Target.MaxFiles)", len(files), d.maxFiles)
		}
	}
	opts, payload, err := splitOptions(payload)
	if err != nil {
		return nil, nil, err
	}
	if err := d.objectLine(opts); err != nil {
		return nil, nil, err
	}
	return files, payload, nil
}

// draftState says whose a draft is: "ours" carries version (a killed run
// saved it), "fresh" holds what the record held (metadata, files.enabled,
// and the record's version marker), with publication_date and version
// left out of the comparison for a new version's draft, which InvenioRDM
// resets (invenio-rdm-records services/components/metadata.py,
// new_version_skip_fields); anything else is someone else's, and why.
func draftState(body []byte, held heldRecord, version string, newVersion bool) (string, string) {
	var dr heldRecord
	if json.Unmarshal(body, &dr) != nil {
		return "", "the draft's answer is not a record"
	}
	if slices.Contains(hitOf(body).versionMarkers(), version) {
		return "ours", ""
	}
	a, b := dr.Metadata, held.Metadata
	if newVersion {
		a, b = withoutKeys(a, "publication_date", "version"), withoutKeys(b, "publication_date", "version")
	}
	switch {
	case dr.Files.Enabled != held.Files.Enabled:
		return "", fmt.Sprintf("its files.enabled is %v, the record's %v", dr.Files.Enabled, held.Files.Enabled)
	case !reflect.DeepEqual(a, b):
		return "", "its metadata differs from the published record's, and it does not carry this version's marker " + version
	}
	return "fresh", ""
}

// withoutKeys is a copy of m without names.
func withoutKeys(m map[string]any, names ...string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !slices.Contains(names, k) {
			out[k] = v
		}
	}
	return out
}

// editSteps edit the published record held in place: its edit draft
// opened, the line's metadata saved in it, then published.
func (d invenioDriver) editSteps(key string, held heldRecord, body []byte, version string) []driver.Step {
	id := held.ID
	draftURL := d.url("records/"+url.PathEscape(id)+"/draft", nil)
	// The open has no row: InvenioRDM answers every POST .../draft with
	// the edit draft already open (invenio-drafts-resources
	// services/records/service.py, edit), so it is sent again as it is,
	// and until the save is done every attempt opens afresh and reads the
	// draft's revision. Its identifier is that revision_id.
	open := driver.Step{
		Label: "edit draft", Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: draftURL, Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			if a.Err == nil && a.Status == http.StatusNotFound {
				v.Class, v.Problem = driver.Terminal, fmt.Sprintf("record %s is gone (deleted?): %s", id, v.Problem)
			}
			if v.Class != driver.Created {
				return v
			}
			rev := revisionOf(a)
			if stringMember(a.Body, "id") != id || rev == "" {
				v.Class, v.Problem = driver.Ambiguous, "the edit answer is not the record's draft with a revision_id"
				return v
			}
			if state, why := draftState(a.Body, held, version, false); state == "" {
				v.Class = driver.Terminal
				v.Problem = fmt.Sprintf("record %s has an edit draft open with changes not made by this deposit (%s): not adopted; publish or discard it (DELETE /api/records/%s/draft), then run again with --retry-failed", id, why, id)
				return v
			}
			v.ID = rev
			return v
		},
	}
	// The save replaces the draft's metadata on If-Match: the revision the
	// open read (a bare integer: invenio-records-resources parses it as
	// one). A 412 is a draft saved since: by an earlier attempt of this
	// save (it carries this version's marker), or by someone else.
	save := driver.Step{
		Label: "edit save", Target: d.editTarget(), Key: key, Durable: true, Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			if prior[0] == "" {
				return driver.Request{}, errors.New("invenio: the edit draft's revision is unknown")
			}
			h := jsonHeader()
			h.Set("If-Match", prior[0])
			return driver.Request{Method: http.MethodPut, URL: draftURL, Header: h, Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			switch {
			case v.Class == driver.Created:
				v.ID = id
				if bytes.Contains(a.Body, []byte(`"errors"`)) {
					v.Warn = "InvenioRDM saved edit drafts with validation errors (the fields it dropped are in the answer); publishing them will be refused"
				}
			case a.Err == nil && a.Status == http.StatusPreconditionFailed:
				v.Class = driver.Conflict
			}
			return v
		},
		Check: &driver.Check{
			Build: func([]string) (driver.Request, error) {
				return driver.Request{Method: http.MethodGet, URL: draftURL, Header: acceptJSON(), Full: true}, nil
			},
			Judge: func(a driver.Answer) driver.Finding {
				switch {
				case a.Err == nil && a.Status == http.StatusOK && slices.Contains(hitOf(a.Body).versionMarkers(), version):
					return driver.Finding{Kind: driver.Present, ID: id}
				case a.Err == nil && a.Status == http.StatusOK:
					return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("the edit draft of record %s was saved by someone else while this deposit edited it: not overwritten; publish or discard it, then run again with --retry-failed", id)}
				case a.Err == nil && a.Status == http.StatusNotFound:
					return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("the edit draft of record %s is gone (published or discarded by someone else) before this deposit saved it", id)}
				}
				return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
			},
		},
	}
	return []driver.Step{open, save, d.updatePublish(key, version, func([]string) string { return id })}
}

// revisionOf is the revision_id of a record or draft answer, as text; its
// ETag (quoted, invenio-records-resources resources/records/headers.py)
// when the body names none.
func revisionOf(a driver.Answer) string {
	var r struct {
		Revision *int64 `json:"revision_id"`
	}
	if json.Unmarshal(a.Body, &r) == nil && r.Revision != nil {
		return strconv.FormatInt(*r.Revision, 10)
	}
	tag := strings.Trim(strings.TrimPrefix(a.Header.Get("ETag"), "W/"), `"`)
	if _, err := strconv.ParseInt(tag, 10, 64); err != nil {
		return ""
	}
	return tag
}

// updatePublish publishes the draft draftOf names, the update's primary
// step: its identifier is the published record's id. An ambiguous answer
// is settled by reading the latest version, which holds this version
// once published; a 404 (no draft) likewise.
func (d invenioDriver) updatePublish(key, version string, draftOf func(prior []string) string) driver.Step {
	return driver.Step{
		Label: "publish", Target: d.updateTarget(), Key: key, Primary: true, Durable: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url("records/"+url.PathEscape(draftOf(prior))+"/draft/actions/publish", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			switch {
			case a.Err == nil && a.Status == http.StatusAccepted:
				v.Class = driver.Created
			case a.Err == nil && a.Status == http.StatusNotFound:
				v.Class, v.Problem = driver.Conflict, "the draft is gone, and the record does not hold this version (discarded?)"
			case v.Class == driver.Terminal:
				v.Problem = "publish refused, the draft stays: " + v.Problem
			}
			if v.Class == driver.Created {
				h := hitOf(a.Body)
				v.ID = h.ID
				if !slices.Contains(h.versionMarkers(), version) {
					v.Class, v.ID = driver.Terminal, ""
					v.Problem = fmt.Sprintf("the record published carries the version markers [%s], not this version's %s: someone else changed the draft", strings.Join(h.versionMarkers(), " "), version)
				}
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) {
				return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(draftOf(prior))+"/versions/latest", nil), Header: acceptJSON(), Full: true}, nil
			},
			Judge: func(a driver.Answer) driver.Finding {
				switch {
				case a.Err == nil && a.Status == http.StatusNotFound:
					// A new version's draft never published has no latest
					// version: the draft says whether it is still there.
					return driver.Finding{Then: d.draftLeft(draftOf)}
				case a.Err != nil || a.Status != http.StatusOK:
					return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
				}
				if h := hitOf(a.Body); h.Published && slices.Contains(h.versionMarkers(), version) {
					return driver.Finding{Kind: driver.Present, ID: h.ID}
				}
				return driver.Finding{Then: d.draftLeft(draftOf)}
			},
		},
	}
}

// draftLeft reads, once the latest version does not hold the update, the
// draft the publish was for: still there, the publish is to be sent;
// gone, it was discarded by someone else.
func (d invenioDriver) draftLeft(draftOf func(prior []string) string) *driver.Check {
	return &driver.Check{
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(draftOf(prior))+"/draft", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			switch {
			case a.Err == nil && a.Status == http.StatusOK:
				return driver.Finding{Kind: driver.Absent}
			case a.Err == nil && a.Status == http.StatusNotFound:
				return driver.Finding{Kind: driver.Foreign, Problem: "the draft is gone (discarded?) and the record does not hold this version"}
			}
			return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
		},
	}
}

// objectVersionSteps make a new version of the record held: its draft
// opened and re-marked, the record's files imported when some are kept,
// the changed and dropped ones deleted from it, the new ones uploaded, the
// publish.
func (d invenioDriver) objectVersionSteps(k canonical.Keyed, u driver.ObjectUpdate, held heldRecord, files []driver.DatasetFile, sums map[string]string, body []byte, version string) []driver.Step {
	const openAt, markAt = 0, 1
	open := driver.Step{
		Label: "new version", Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url("records/"+url.PathEscape(held.ID)+"/versions", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			if a.Err == nil && a.Status == http.StatusNotFound {
				v.Class = driver.Terminal
			}
			if v.Class != driver.Created {
				return v
			}
			h := hitOf(a.Body)
			if h.ID == "" || h.ID == held.ID {
				v.Class, v.Problem = driver.Ambiguous, "the new version's answer is not a draft of its own"
				return v
			}
			state, why := draftState(a.Body, held, version, true)
			v.ID = h.ID + " " + state
			if state == "" {
				v.ID = h.ID + " other " + why
			}
			return v
		},
	}
	mark := driver.Step{
		Label: "new version marker", Target: d.markTarget(), Key: u.Key, Durable: true, Arbitrated: true, RecordID: true,
		Build: func(prior []string) (driver.Request, error) {
			id, state, _ := strings.Cut(prior[openAt], " ")
			if id == "" {
				return driver.Request{}, fmt.Errorf("invenio: the new version was recorded as %q", prior[openAt])
			}
			if why, other := strings.CutPrefix(state, "other "); other {
				return driver.Request{}, fmt.Errorf("%w: invenio: the open draft %s of the next version of record %s is someone else's (%s): not adopted; run again once it is published, or delete it (DELETE /api/records/%s/draft)",
					driver.ErrNotYet, id, held.ID, why, id)
			}
			return driver.Request{Method: http.MethodPut, URL: d.url("records/"+url.PathEscape(id)+"/draft", nil), Header: jsonHeader(), Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			if v.Class == driver.Created {
				if v.ID = stringMember(a.Body, "id"); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the draft update names no draft id"
				}
			}
			return v
		},
	}
	steps := []driver.Step{open, mark}
	var kept, upload []driver.DatasetFile
	for _, f := range files {
		if sums[f.Path] == "md5:"+k.MD5[f.Path] {
			kept = append(kept, f)
		} else {
			upload = append(upload, f)
		}
	}
	if len(kept) > 0 {
		// files-import links every file of the latest version or none
		// (invenio-drafts-resources services/records/components/base.py,
		// import_files): those the line changes or drops go again.
		steps = append(steps, d.importStepAt(u.Key, markAt, nil))
		for key, sum := range sums {
			if i := slices.IndexFunc(kept, func(f driver.DatasetFile) bool { return f.Path == key }); i < 0 || sum != "md5:"+k.MD5[key] {
				steps = append(steps, d.deleteFileStep(u.Key, key, markAt))
			}
		}
		slices.SortStableFunc(steps[3:], func(a, b driver.Step) int { return strings.Compare(a.Key, b.Key) })
	}
	for _, f := range upload {
		steps = append(steps, d.fileSteps(u.Key, u.Dir, f, k.MD5[f.Path], len(steps), markAt)...)
	}
	return append(steps, d.updatePublish(u.Key, version, func(prior []string) string { return prior[markAt] }))
}

// deleteFileStep removes the file key the import linked into the draft
// whose id is the identifier of step markAt: 204, or 404 once it is gone.
func (d invenioDriver) deleteFileStep(key, file string, markAt int) driver.Step {
	return driver.Step{
		Label: "file " + strconv.Quote(file) + " removal", Target: d.fileTarget(), Key: key + " delete " + file, Durable: true, Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodDelete, URL: d.fileURL(prior[markAt], file, ""), Header: acceptJSON()}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			switch {
			case a.Err == nil && (a.Status == http.StatusNoContent || a.Status == http.StatusOK):
				v.Class, v.ID = driver.Created, "deleted"
			case a.Err == nil && a.Status == http.StatusNotFound:
				v.Class, v.ID = driver.Exists, "deleted"
			}
			return v
		},
	}
}
