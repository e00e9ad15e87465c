package repotest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The versions of a dataset, as Dataverse keeps them (IQSS/dataverse,
// src/main/java/edu/harvard/iq/dataverse/api/Datasets.java and Files.java,
// engine/command/impl/PublishDatasetCommand.java, DatasetVersion.java,
// datasetutility/AddReplaceFileHelper.java): a dataset has released
// versions and at most one draft, the latest. A draft is made by the first
// edit after a release (the PUT of its metadata, an add, a replace, a
// delete), as a copy of the released version's metadata and files; the
// stub keeps the latest version in the dataset's own fields and the latest
// released one in pub.

// dvRelease is a released version. Dataverse.mu guards it.
type dvRelease struct {
	version      map[string]any
	otherIDs     []string
	files        []*dvFile
	major, minor int
	created      time.Time
}

// dvVersionView is one version as the API shows it.
type dvVersionView struct {
	state        string
	version      map[string]any
	files        []*dvFile
	major, minor int
	created      time.Time
}

// latest is the latest version: the draft, if any, else the released one.
// dv.mu is held.
func (ds *dvDataset) latest() dvVersionView {
	return dvVersionView{state: ds.state(), version: ds.version, files: ds.files, major: ds.major, minor: ds.minor, created: ds.versionCreated}
}

// pick is the version a path names (":draft", ":latest",
// ":latest-published", or a number "1.0") as the caller may see it: a
// draft only for a user with the token (user), a released version for
// anyone, the latest before any release for a user. dv.mu is held.
func (ds *dvDataset) pick(which string, user bool) (dvVersionView, bool) {
	switch which {
	case ":draft":
		return ds.latest(), ds.draft && user
	case ":latest":
		if ds.draft && !user {
			return ds.released0()
		}
		return ds.latest(), true
	case ":latest-published":
		return ds.released0()
	}
	if ds.pub != nil && !ds.draft && which == strconv.Itoa(ds.major)+"."+strconv.Itoa(ds.minor) {
		return ds.latest(), true
	}
	return dvVersionView{}, false
}

// released0 is the latest released version, if any. dv.mu is held.
func (ds *dvDataset) released0() (dvVersionView, bool) {
	if ds.pub == nil {
		return dvVersionView{}, false
	}
	p := ds.pub
	return dvVersionView{state: "RELEASED", version: p.version, files: p.files, major: p.major, minor: p.minor, created: p.created}, true
}

// dvVersionNotFound answers a version the dataset does not have, as
// getDatasetVersionOrDie does.
func dvVersionNotFound(w http.ResponseWriter, ds *dvDataset, which string) {
	dvError(w, http.StatusNotFound, "Dataset version "+which+" of dataset "+strconv.FormatInt(ds.id, 10)+" not found")
}

// openDraft makes the draft after a release, a copy of the released
// version; a dataset with a draft keeps it. dv.mu is held.
func (dv *Dataverse) openDraft(ds *dvDataset, now time.Time) {
	if ds.draft {
		return
	}
	ds.draft, ds.versionCreated = true, now
	ds.files = slices.Clone(ds.files)
}

// minorUpdate reports whether the draft may be released as a minor
// version: the same files (DataFiles, by id) as the released version, as
// DatasetVersion.isMinorUpdate decides. A replaced file is a new DataFile.
// dv.mu is held.
func (ds *dvDataset) minorUpdate() bool {
	if ds.pub == nil || len(ds.pub.files) != len(ds.files) {
		return false
	}
	for _, f := range ds.files {
		if !slices.Contains(ds.pub.files, f) {
			return false
		}
	}
	return true
}

// editLocked is the 403 message of an edit refused by a lock, or "": any
// lock but Ingest (PermissionServiceBean, checkEditDatasetLock). dv.mu is
// held.
func (ds *dvDataset) editLocked() string {
	if ds.finalizing {
		return "Dataset cannot be edited due to dataset lock."
	}
	return ""
}

// putDraft serves PUT /api/datasets/{id}/versions/:draft: the body is a
// version (not wrapped in datasetVersion), without files; it overwrites
// the draft's fields and terms, or makes the draft (Datasets.java,
// updateDraftVersion), and answers the draft with its files.
func (dv *Dataverse) putDraft(w http.ResponseWriter, r *http.Request, id string, user bool) {
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	if !user {
		dvError(w, http.StatusUnauthorized, "Only authenticated users can perform the requested operation")
		return
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, DefaultMaxBodyBytes+1))
	if err != nil || len(raw) > DefaultMaxBodyBytes {
		dvError(w, http.StatusRequestEntityTooLarge, "The request body is too large.")
		return
	}
	var probe map[string]any
	if json.Unmarshal(raw, &probe) != nil || probe == nil {
		dvError(w, http.StatusBadRequest, "Error parsing dataset version: the body is not a JSON object")
		return
	}
	if files, _ := probe["files"].([]any); len(files) > 0 {
		dvError(w, http.StatusBadRequest, "You may not add files via this api.")
		return
	}
	wrapped, _ := json.Marshal(map[string]any{"datasetVersion": probe})
	c, status, msg := parseCitation(wrapped)
	if status != 0 {
		dvError(w, status, strings.Replace(msg, "Error parsing Json", "Error parsing dataset version", 1))
		return
	}
	sum := sha256.Sum256(raw)
	ft, ok := dv.beginWrite(w, "edit", dv.pid(ds)+"/"+hex.EncodeToString(sum[:]))
	if !ok {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	dv.settle(ds, now)
	if m := ds.editLocked(); m != "" {
		dv.mu.Unlock()
		dvError(w, http.StatusForbidden, m)
		return
	}
	dv.openDraft(ds, now)
	version := c.version
	for _, k := range []string{"files", "versionState", "versionNumber", "versionMinorNumber", "id"} {
		delete(version, k)
	}
	ds.version, ds.otherIDs = version, c.otherIDs
	for _, v := range c.otherIDs {
		dv.markers[v] = true
	}
	dv.stats.DraftWrites++
	dv.reindex(ds, now)
	doc := dv.versionDoc(ds)
	files := make([]any, 0, len(ds.files))
	for _, f := range ds.files {
		files = append(files, dv.fileEntry(ds, f))
	}
	doc["files"] = files
	out := dvOK(doc)
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, out)
}

// deleteDraft serves DELETE /api/datasets/{id}/versions/:draft: the draft
// of a released dataset goes, the released version is the latest again;
// an unreleased dataset is destroyed (Datasets.java, deleteDraftVersion).
func (dv *Dataverse) deleteDraft(w http.ResponseWriter, r *http.Request, id string, user bool) {
	ds := dv.dataset(w, r, id)
	if ds == nil {
		return
	}
	if !user {
		dvError(w, http.StatusUnauthorized, "Only authenticated users can perform the requested operation")
		return
	}
	ft, ok := dv.beginWrite(w, "discard", dv.pid(ds))
	if !ok {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	dv.settle(ds, now)
	status, msg := 0, ""
	switch {
	case !ds.draft:
		status, msg = http.StatusUnauthorized, "This is NOT a DRAFT version"
	case ds.editLocked() != "":
		status, msg = http.StatusForbidden, ds.editLocked()
	case ds.pub == nil:
		dv.destroy(ds)
	default:
		p := ds.pub
		ds.version, ds.otherIDs, ds.files = p.version, p.otherIDs, slices.Clone(p.files)
		ds.major, ds.minor, ds.versionCreated, ds.draft = p.major, p.minor, p.created, false
		dv.reindex(ds, now)
	}
	if status == 0 {
		dv.stats.Discarded++
	}
	dv.mu.Unlock()
	if status != 0 {
		dvError(w, status, msg)
		return
	}
	dv.finish(w, r, ft, http.StatusOK, dvOK(map[string]any{"message": "Draft version of dataset " + id + " deleted"}))
}

// destroy removes a dataset that was never released. dv.mu is held.
func (dv *Dataverse) destroy(ds *dvDataset) {
	delete(dv.byID, ds.id)
	delete(dv.byPID, dv.pid(ds))
	dv.order = slices.DeleteFunc(dv.order, func(o *dvDataset) bool { return o == ds })
}

// fileByID finds a file of any version, with its dataset. dv.mu is held.
func (dv *Dataverse) fileByID(id int64) (*dvDataset, *dvFile) {
	for _, ds := range dv.order {
		for _, list := range [][]*dvFile{ds.files, dv.pubFiles(ds)} {
			if i := slices.IndexFunc(list, func(f *dvFile) bool { return f.id == id }); i >= 0 {
				return ds, list[i]
			}
		}
	}
	return nil, nil
}

func (dv *Dataverse) pubFiles(ds *dvDataset) []*dvFile {
	if ds.pub == nil {
		return nil
	}
	return ds.pub.files
}

// replace serves POST /api/files/{id}/replace: a new file (a new id) in
// the old one's place in the draft, made if needed. It refuses the same
// content, another content type without forceReplace, and a file not in
// the latest version (Files.java, replaceFileInDataset;
// AddReplaceFileHelper), each a 400.
func (dv *Dataverse) replace(w http.ResponseWriter, r *http.Request, id string, user bool) {
	if !user {
		dvError(w, http.StatusForbidden, "You do not have permission to edit this dataset.")
		return
	}
	fid, _ := strconv.ParseInt(id, 10, 64)
	dv.mu.Lock()
	ds, old := dv.fileByID(fid)
	dv.mu.Unlock()
	if old == nil {
		dvError(w, http.StatusBadRequest, "Replacement file not found. There was no file found for ID: "+id)
		return
	}
	req, force, ok := readReplace(w, r)
	if !ok {
		return
	}
	ft, ok := dv.beginWrite(w, "replace", dv.pid(ds)+"/"+id+"/"+req.md5)
	if !ok {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	dv.settle(ds, now)
	i := slices.Index(ds.files, old)
	refusal := ""
	switch {
	case ds.finalizing:
		refusal = "Failed to add file to dataset."
	case i < 0:
		refusal = "You cannot replace a file that is not in the most recently published dataset. (The file is unpublished or was deleted from a previous version.)"
	case old.md5 == req.md5:
		refusal = "Error! You may not replace a file with a file that has duplicate content."
	case !force && old.contentType != req.contentType:
		refusal = "The original file (" + old.contentType + ") and replacement file (" + req.contentType + ") are different file types."
	}
	if refusal != "" {
		dv.mu.Unlock()
		dvError(w, http.StatusBadRequest, refusal)
		return
	}
	dv.openDraft(ds, now)
	f := &dvFile{id: dv.nextID, label: req.name, dir: req.dir, description: req.description, contentType: req.contentType, md5: req.md5, size: req.size}
	dv.nextID++
	ds.files = slices.Delete(ds.files, i, i+1)
	for n := 1; ds.nameTaken(f.dir, f.label); n++ {
		ext := path.Ext(req.name)
		f.label = strings.TrimSuffix(req.name, ext) + "-" + strconv.Itoa(n) + ext
	}
	ds.files = slices.Insert(ds.files, i, f)
	dv.stats.Replaced++
	dv.reindex(ds, now)
	out, _ := json.Marshal(map[string]any{"status": "OK", "message": "File successfully replaced!", "data": map[string]any{"files": []any{dv.fileEntry(ds, f)}}})
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, out)
}

// readReplace reads a replace's multipart body, as an add's, and its
// forceReplace option.
func readReplace(w http.ResponseWriter, r *http.Request) (addRequest, bool, bool) {
	var force bool
	req, ok := readAddWith(w, r, func(jsonData []byte) {
		var opts struct {
			ForceReplace bool `json:"forceReplace"`
		}
		_ = json.Unmarshal(jsonData, &opts)
		force = opts.ForceReplace
	})
	return req, force, ok
}

// deleteFile serves DELETE /api/files/{id}: the file leaves the draft
// (made if needed), and goes for good if no release held it; the answer's
// data says which (Files.java, deleteFileInDataset). A file the draft no
// longer holds is refused as a failed command (what Dataverse does then
// is not verified).
func (dv *Dataverse) deleteFile(w http.ResponseWriter, r *http.Request, id string, user bool) {
	if !user {
		dvError(w, http.StatusForbidden, "You do not have permission to edit this dataset.")
		return
	}
	fid, _ := strconv.ParseInt(id, 10, 64)
	dv.mu.Lock()
	ds, f := dv.fileByID(fid)
	dv.mu.Unlock()
	if f == nil {
		dvError(w, http.StatusNotFound, "File with ID "+id+" not found.")
		return
	}
	ft, ok := dv.beginWrite(w, "delete", dv.pid(ds)+"/"+id)
	if !ok {
		return
	}
	dv.mu.Lock()
	now := dv.now()
	dv.settle(ds, now)
	i := slices.Index(ds.files, f)
	refusal := ""
	switch {
	case ds.editLocked() != "":
		refusal = ds.editLocked()
	case i < 0:
		refusal = "the file is not in the draft version"
	}
	if refusal != "" {
		dv.mu.Unlock()
		dvError(w, http.StatusBadRequest, "Delete failed for file ID "+id+" (CommandException): "+refusal)
		return
	}
	dv.openDraft(ds, now)
	ds.files = slices.Delete(ds.files, i, i+1)
	dv.stats.Deleted++
	dv.reindex(ds, now)
	out := dvOK(!f.released)
	dv.mu.Unlock()
	dv.finish(w, r, ft, http.StatusOK, out)
}
