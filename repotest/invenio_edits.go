package repotest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Edits of published records, as InvenioRDM makes them
// (inveniosoftware/invenio-drafts-resources,
// invenio_drafts_resources/services/records/service.py, edit, and
// records/api.py, Draft.edit): POST /api/records/{id}/draft opens an edit
// draft with the record's id, metadata, access and files, and answers 201
// with it, or with the one already open, whoever opened it. Its files are
// locked (RDM_LOCK_EDIT_PUBLISHED_FILES is true by default,
// invenio-rdm-records config.py): a file write is refused 403 "Bucket is
// locked for modifications." (invenio-files-rest's BucketLockedError). A
// PUT replaces its metadata; the publish (202) copies it into the record,
// which keeps its id, DOI and version, and the draft is gone. Every draft
// and record answer says its revision_id, and an ETag of it, quoted
// (invenio-records-resources resources/records/headers.py); PUT and DELETE
// of a draft take If-Match with that revision as a bare integer, and
// answer 412 to another (invenio-records-resources services/records/
// service.py, check_revision_id).

// edit serves POST /api/records/{id}/draft.
func (iv *Invenio) edit(w http.ResponseWriter, r *http.Request, id string) {
	ft, ok := iv.admitWrite(w, "edit", id)
	if !ok {
		return
	}
	iv.mu.Lock()
	rec := iv.records[id]
	var out []byte
	status, msg := 0, ""
	switch {
	case rec == nil || rec.discarded:
		status, msg = http.StatusNotFound, "The persistent identifier does not exist."
	case !rec.published:
		// A draft never published is edited as it is, through PUT.
		out = rec.answer(r, nil)
	default:
		e := iv.edits[id]
		if e == nil {
			e = iv.openEdit(rec)
		}
		out = e.answer(r, nil)
	}
	iv.mu.Unlock()
	if status != 0 {
		ivError(w, status, msg)
		return
	}
	iv.finish(w, r, ft, http.StatusCreated, out)
}

// openEdit opens the edit draft of the published record rec: its body
// copied, its files linked and locked; the draft's revision continues
// past the record's. iv.mu is held.
func (iv *Invenio) openEdit(rec *ivRecord) *ivRecord {
	now := iv.now()
	e := &ivRecord{id: rec.id, body: deepCopyJSON(rec.body).(map[string]any), created: now, updated: now,
		parent: rec.parent, index: rec.index, editOf: rec, revision: rec.revision + 1}
	for _, f := range rec.files {
		cp := *f
		e.files = append(e.files, &cp)
	}
	iv.edits[rec.id] = e
	iv.stats.Edits++
	return e
}

// editBody is the stored part of an edit draft's PUT: the draft body, with
// the record's pids, which an edit cannot change (invenio-rdm-records
// services/components/pids.py, edit).
func editBody(doc map[string]any, rec *ivRecord) map[string]any {
	body := draftBody(doc)
	body["pids"] = deepCopyJSON(rec.body["pids"])
	return body
}

// commitEdit publishes the edit draft e into its record and closes it.
// iv.mu is held.
func (iv *Invenio) commitEdit(e *ivRecord) *ivRecord {
	rec := e.editOf
	pids := rec.body["pids"]
	rec.body = e.body
	rec.body["pids"] = pids
	rec.files = e.files
	rec.revision++
	rec.updated = iv.now()
	delete(iv.edits, rec.id)
	iv.stats.EditsPublished++
	iv.reindex(rec)
	return rec
}

// locked reports whether id's draft is an edit draft, whose files are
// locked.
func (iv *Invenio) locked(id string) bool {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	rec := iv.draft(id)
	if rec != nil && rec.editOf != nil {
		iv.stats.LockedRefusals++
		return true
	}
	return false
}

// ifMatch checks the request's If-Match against rec's revision: "" when
// it has none or it matches, else the refusal. iv.mu is held.
func (iv *Invenio) ifMatch(r *http.Request, rec *ivRecord) string {
	h := r.Header.Get("If-Match")
	if h == "" {
		return ""
	}
	n, err := strconv.Atoi(h)
	if err != nil {
		// Parsed as an integer by the resource (ma.fields.Int): a quoted
		// ETag fails to parse. Upstream's answer to that was not traced;
		// the stub answers 400.
		return "bad:" + h
	}
	if n == rec.revision {
		return ""
	}
	iv.stats.Mismatches++
	return fmt.Sprintf("Revision id provided(%d) doesn't match record's one(%d)", n, rec.revision)
}

// ivPreconditionFailed answers a failed If-Match.
func ivPreconditionFailed(w http.ResponseWriter, mismatch string) {
	if bad, ok := strings.CutPrefix(mismatch, "bad:"); ok {
		ivValidation(w, []ivFieldError{{Field: "if_match", Messages: []string{"Not a valid integer: " + bad}}})
		return
	}
	ivError(w, http.StatusPreconditionFailed, mismatch)
}

// setETag sets the ETag of a single record or draft answer, its
// revision_id quoted.
func setETag(w http.ResponseWriter, body []byte) {
	var d struct {
		ID       string `json:"id"`
		Revision *int   `json:"revision_id"`
	}
	if json.Unmarshal(body, &d) == nil && d.ID != "" && d.Revision != nil {
		w.Header().Set("ETag", strconv.Quote(strconv.Itoa(*d.Revision)))
	}
}

// filesDoc is a published record's files: files.enabled and its entries,
// by key (invenio-rdm-records services/schemas/files.py). iv.mu is held.
func (rec *ivRecord) filesDoc() map[string]any {
	files, _ := rec.body["files"].(map[string]any)
	d := map[string]any{}
	for k, v := range files {
		d[k] = v
	}
	entries := map[string]any{}
	var total int64
	for _, f := range rec.files {
		entries[f.key] = map[string]any{"key": f.key, "checksum": f.checksum, "size": f.size}
		total += f.size
	}
	d["entries"], d["count"], d["total_bytes"] = entries, len(rec.files), total
	return d
}

// OpenEdit opens the edit draft of published record id as another user
// of the account would, and applies change to its metadata (nil changes
// nothing): what a deposit must not adopt once changed.
func (iv *Invenio) OpenEdit(id string, change func(metadata map[string]any)) error {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	rec := iv.records[id]
	if rec == nil || !rec.published {
		return fmt.Errorf("repotest: no published record %s", id)
	}
	e := iv.edits[id]
	if e == nil {
		e = iv.openEdit(rec)
	}
	if change != nil {
		md, _ := e.body["metadata"].(map[string]any)
		change(md)
		e.revision++
	}
	return nil
}

// OpenEdit is Invenio.OpenEdit.
func (s *InvenioServer) OpenEdit(id string, change func(metadata map[string]any)) error {
	return s.iv.OpenEdit(id, change)
}
