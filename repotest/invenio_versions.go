package repotest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"slices"
)

// The versions of a record, as InvenioRDM keeps them
// (inveniosoftware/invenio-drafts-resources,
// invenio_drafts_resources/services/records/service.py): every version is a
// record of its own with its own id, and the versions share a parent whose
// state, in the database, names the latest published version and the open
// draft of the next one.

// ivParent is the parent of a record's versions. iv.mu guards it.
type ivParent struct {
	id     string
	latest *ivRecord // the latest published version; nil before the first publish
	// next is the open draft of the next version: the first draft until
	// it is published, then the draft POST .../versions opened, if any.
	next *ivRecord
	// communities are the communities accepted reviews added, the
	// default first.
	communities []string
}

// newParent draws a parent id and registers the parent. iv.mu is held.
func (iv *Invenio) newParent() *ivParent {
	p := &ivParent{id: iv.drawID(&iv.pseq, "parent")}
	iv.parents[p.id] = p
	return p
}

// drawID draws an id shaped like a record id from its own sequence, so
// that drawing one does not change the record ids a seed gives. iv.mu is
// held.
func (iv *Invenio) drawID(seq *uint64, domain string) string {
	const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
	for {
		*seq++
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(iv.cfg.Seed))
		binary.BigEndian.PutUint64(b[8:], *seq)
		sum := sha256.Sum256(append(b[:], domain...))
		id := make([]byte, 0, 11)
		for i := range 10 {
			if i == 5 {
				id = append(id, '-')
			}
			id = append(id, alphabet[sum[i]%32])
		}
		if !iv.taken(string(id)) {
			return string(id)
		}
	}
}

// isLatest is versions.is_latest: rec is the latest published version.
func (rec *ivRecord) isLatest() bool { return rec.parent.latest == rec }

// isLatestDraft is versions.is_latest_draft: rec is the open draft of the
// next version or, when there is none, the latest version.
func (rec *ivRecord) isLatestDraft() bool {
	p := rec.parent
	return p.next == rec || p.next == nil && p.latest == rec
}

// versionsDoc is the record's "versions". iv.mu is held.
func (rec *ivRecord) versionsDoc() map[string]any {
	if rec.editOf != nil {
		return rec.editOf.versionsDoc()
	}
	return map[string]any{"index": rec.index, "is_latest": rec.isLatest(), "is_latest_draft": rec.isLatestDraft()}
}

// parentDoc is the record's "parent": its id, its communities and, for a
// draft under review when withReview, the review request. iv.mu is held.
func (rec *ivRecord) parentDoc(withReview bool) map[string]any {
	communities := map[string]any{}
	if cs := rec.parent.communities; len(cs) > 0 {
		communities = map[string]any{"ids": slices.Clone(cs), "default": cs[0]}
	}
	d := map[string]any{"id": rec.parent.id, "communities": communities}
	if q := rec.review; withReview && q != nil {
		d["review"] = map[string]any{"id": q.id, "type": ivSubmission, "receiver": map[string]any{"community": q.community}}
	}
	return d
}

// newVersion serves POST /api/records/{id}/versions: 201 with a new draft
// of the next version, or with the one already open (the server's own
// arbitration of a retry). {id} may be any published version.
func (iv *Invenio) newVersion(w http.ResponseWriter, r *http.Request, id string) {
	ft, ok := iv.admitWrite(w, "new-version", id)
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
		status, msg = http.StatusNotFound, "The persistent identifier is not registered."
	default:
		if rec.parent.next == nil {
			iv.openVersion(rec.parent)
		}
		out = rec.parent.next.answer(r, nil)
	}
	iv.mu.Unlock()
	if status != 0 {
		ivError(w, status, msg)
		return
	}
	iv.finish(w, r, ft, http.StatusCreated, out)
}

// openVersion opens the draft of p's next version: the latest version's
// access, files.enabled and metadata, less metadata.version and with
// today's publication_date (invenio-rdm-records
// services/components/metadata.py), no files and no pids. Everything else
// in metadata, alternate identifiers included, is copied. iv.mu is held.
func (iv *Invenio) openVersion(p *ivParent) {
	latest, now := p.latest, iv.now()
	md := deepCopyJSON(latest.body["metadata"]).(map[string]any)
	delete(md, "version")
	md["publication_date"] = now.UTC().Format("2006-01-02")
	files, _ := latest.body["files"].(map[string]any)
	enabled, _ := files["enabled"].(bool)
	body := map[string]any{"metadata": md, "files": map[string]any{"enabled": enabled}, "pids": map[string]any{}}
	if access, ok := latest.body["access"]; ok {
		body["access"] = deepCopyJSON(access)
	}
	rec := &ivRecord{id: iv.newID(), body: body, created: now, updated: now, parent: p, index: latest.index + 1, revision: 1}
	p.next = rec
	iv.records[rec.id] = rec
	iv.order = append(iv.order, rec)
	iv.stats.Versions++
	iv.reindex(rec)
	iv.reindex(latest) // no longer the latest draft
}

// deepCopyJSON copies a decoded JSON value.
func deepCopyJSON(v any) any {
	raw, _ := json.Marshal(v)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	_ = dec.Decode(&out)
	return out
}

// importFiles serves POST /api/records/{id}/draft/actions/files-import: 201
// with the draft's files once every file of the latest version is linked
// into it. A draft that holds any file already is refused (400 "Please
// remove all files first.", invenio-drafts-resources
// services/records/components/base.py, import_files), so a retry after a
// lost answer is refused too.
func (iv *Invenio) importFiles(w http.ResponseWriter, r *http.Request, id string) {
	ft, ok := iv.admitWrite(w, "files-import", id)
	if !ok {
		return
	}
	iv.mu.Lock()
	rec := iv.draft(id)
	status, msg, problem := 0, "", ""
	switch {
	case rec == nil:
		status, msg = http.StatusNotFound, "Draft not found."
	case rec.parent.latest == nil:
		status, msg = http.StatusNotFound, "Not found." // no version before this draft
	case !filesEnabled(rec):
		problem = "Files support must be enabled."
	case len(rec.files) > 0:
		problem = "Please remove all files first."
	case !filesEnabled(rec.parent.latest) && len(rec.parent.latest.files) == 0:
		problem = "The record has no files."
	}
	var out []byte
	if status == 0 && problem == "" {
		for _, f := range rec.parent.latest.files {
			cp := *f
			rec.files = append(rec.files, &cp)
		}
		rec.updated = iv.now()
		iv.stats.FileImports++
		out = rec.filesAnswer(r)
	}
	iv.mu.Unlock()
	switch {
	case status != 0:
		ivError(w, status, msg)
	case problem != "":
		ivValidation(w, []ivFieldError{{Field: "files.enabled", Messages: []string{problem}}})
	default:
		iv.finish(w, r, ft, http.StatusCreated, out)
	}
}

// filesEnabled is files.enabled of rec.
func filesEnabled(rec *ivRecord) bool {
	files, _ := rec.body["files"].(map[string]any)
	enabled, _ := files["enabled"].(bool)
	return enabled
}

// readLatest serves GET /api/records/{id}/versions/latest: a 301 to the
// latest published version, resolved through the database, never search
// (invenio-drafts-resources resources/records/resource.py, read_latest,
// and resources/records/errors.py, RedirectException). {id} may be any
// published version or the parent's id.
func (iv *Invenio) readLatest(w http.ResponseWriter, r *http.Request, id string) {
	ft, answered := iv.fault(w, "read", r.URL.Path, false)
	if answered {
		return
	}
	iv.mu.Lock()
	var latest *ivRecord
	msg := "The persistent identifier does not exist."
	if rec := iv.records[id]; rec != nil && !rec.discarded {
		msg = "The persistent identifier is not registered."
		if rec.published {
			latest = rec.parent.latest
		}
	} else if p := iv.parents[id]; p != nil {
		msg, latest = "The persistent identifier is not registered.", p.latest
	}
	iv.mu.Unlock()
	if latest == nil {
		ivError(w, http.StatusNotFound, msg)
		return
	}
	loc := absURL(r, "/api/records/"+latest.id)
	out, _ := json.Marshal(map[string]any{"status": http.StatusMovedPermanently, "message": "Redirecting...", "location": loc})
	w.Header().Set("Location", loc)
	iv.finish(w, r, ft, http.StatusMovedPermanently, out)
}

// listVersions serves GET /api/records/{id}/versions: the published
// versions of {id}'s parent as search sees them (lagging like every
// search), highest versions.index first. {id} may be a draft.
func (iv *Invenio) listVersions(w http.ResponseWriter, r *http.Request, id string) {
	sp, ok := parseIVSearch(w, r)
	if !ok {
		return
	}
	ft, answered := iv.fault(w, "read", "versions\x00"+id+"\x00"+r.URL.RawQuery, false)
	if answered {
		return
	}
	iv.mu.Lock()
	parent := ""
	if rec := iv.records[id]; rec != nil && !rec.discarded {
		parent = rec.parent.id
	}
	iv.mu.Unlock()
	if parent == "" {
		ivError(w, http.StatusNotFound, "The persistent identifier does not exist.")
		return
	}
	hits := iv.hits(sp, func(h *ivHit) bool { return h.published && h.parent == parent })
	slices.SortStableFunc(hits, func(a, b *ivHit) int { return b.index - a.index })
	iv.finish(w, r, ft, http.StatusOK, hitsAnswer(r, hits, sp, "version", false))
}

// searchRecords serves GET /api/records: published records, newest first,
// and, unless allversions is true, only the latest version of each
// (versions.is_latest; invenio-rdm-records services/config.py,
// RDMSearchOptions). Anyone may search.
func (iv *Invenio) searchRecords(w http.ResponseWriter, r *http.Request) {
	sp, ok := parseIVSearch(w, r)
	if !ok {
		return
	}
	ft, answered := iv.fault(w, "read", "records\x00"+r.URL.RawQuery, false)
	if answered {
		return
	}
	hits := iv.hits(sp, func(h *ivHit) bool { return h.published && (sp.all || h.latest) })
	slices.SortStableFunc(hits, func(a, b *ivHit) int { return b.created.Compare(a.created) })
	iv.finish(w, r, ft, http.StatusOK, hitsAnswer(r, hits, sp, "newest", true))
}
