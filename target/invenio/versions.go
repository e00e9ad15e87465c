package invenio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
)

// optionsMember is the payload's reserved top-level member that says what
// else a line asks for; it is part of the key, and removed before the
// payload is sent.
const optionsMember = "deposit"

// lineOptions are what a line asks for beside a record of its own.
type lineOptions struct {
	// NewVersionOf is the id of a published record (any of its versions):
	// the line is a new version of it.
	NewVersionOf string `json:"new_version_of"`
	// Community is the id of a community the record is submitted to for
	// review; the curator's acceptance publishes it.
	Community string `json:"community"`
}

// splitOptions takes the reserved member out of payload, a JSON object,
// and reads it.
func splitOptions(payload []byte) (lineOptions, []byte, error) {
	var opts lineOptions
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return opts, nil, errors.New("invenio: the payload must be a JSON object: the draft's body, or its metadata")
	}
	raw, present := doc[optionsMember]
	if !present {
		return opts, payload, nil
	}
	delete(doc, optionsMember)
	b, _ := json.Marshal(raw)
	strict := json.NewDecoder(bytes.NewReader(b))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&opts); err != nil {
		return opts, nil, fmt.Errorf(`invenio: member %q must be {"new_version_of":RECORD_ID} or {"community":COMMUNITY_ID}: %w`, optionsMember, err)
	}
	switch {
	case opts == lineOptions{}:
		return opts, nil, fmt.Errorf("invenio: member %q names neither new_version_of nor community", optionsMember)
	case opts.NewVersionOf != "" && opts.Community != "":
		// InvenioRDM refuses a review for a new version: its record's
		// communities carry over (invenio-rdm-records, review service).
		return opts, nil, errors.New("invenio: a new version stays in its record's communities: name new_version_of or community, not both")
	}
	rest, err := encodeJSON(doc)
	return opts, rest, err
}

// encodeJSON encodes v without HTML escaping and without a newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("invenio: draft body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// The store targets of a new version's marker step and of a review.
func (d invenioDriver) markTarget() string {
	return driver.TargetName(protocol.Invenio+"-mark", d.endpoint)
}
func (d invenioDriver) reviewTarget() string {
	return driver.TargetName(protocol.Invenio+"-review", d.endpoint)
}

// The steps of a new version, by index: the latest version resolved, the
// new version's draft, the draft re-marked (whose identifier is the draft
// id), then its files and the publish.
const (
	stepLatest = iota
	stepNewDraft
	stepMark
	stepFilesFrom
)

// versionLayout returns the steps of a new version of the record opts
// names, and for each the identifier it has once published (seedFromScan
// reads them).
func (d invenioDriver) versionLayout(k canonical.Keyed, dir string, files []driver.DatasetFile, payload []byte, record, marker string) ([]driver.Step, []string, error) {
	withFiles, err := invenioDraftBody(payload, marker, true, "")
	if err != nil {
		return nil, nil, err
	}
	withoutFiles, err := invenioDraftBody(payload, marker, false, "")
	if err != nil {
		return nil, nil, err
	}
	steps := []driver.Step{d.latestStep(record, marker), d.newDraftStep(), d.markStep(k.Key, marker, withFiles, withoutFiles, len(files) > 0)}
	seeds := []string{"", "", ""}
	if len(files) == 0 {
		steps = append(steps, d.importStep(k.Key))
		seeds = append(seeds, "imported")
	}
	for _, f := range files {
		md5 := k.MD5[f.Path]
		if md5 == "" {
			return nil, nil, fmt.Errorf("invenio: no MD5 for file %q (the keyer must be made WithFileMD5)", f.Path)
		}
		steps = append(steps, d.fileSteps(k.Key, dir, f, md5, len(steps), stepMark)...)
		seeds = append(seeds, "completed", "md5:"+md5, "md5:"+md5)
	}
	if d.publish {
		steps = append(steps, d.publishStep(k.Key, marker, stepMark, d.latestCheck(marker, stepMark, false), false))
		seeds = append(seeds, "")
	} else {
		steps[stepMark].Primary, steps[stepMark].Target = true, d.draftTarget()
	}
	return steps, seeds, nil
}

// resolved is what the step that resolved the latest version recorded,
// as its identifier: "ID FILES MARKER..." (FILES "files" or "nofiles",
// the markers the version carries, none or more).
type resolved struct {
	id      string
	files   bool
	markers []string
}

func (r resolved) String() string {
	return strings.Join(append([]string{r.id, map[bool]string{true: "files", false: "nofiles"}[r.files]}, r.markers...), " ")
}

func parseResolved(s string) (resolved, bool) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return resolved{}, false
	}
	return resolved{id: f[0], files: f[1] == "files", markers: f[2:]}, true
}

// latestStep resolves the latest version of record through the database
// (GET .../versions/latest, a redirect to it; never a search, which lags).
// A read changes nothing, so it is sent again as it is, and it has no
// store row: until the draft carries this line's marker, every attempt
// resolves the latest version afresh, which another line may have
// published meanwhile. A latest version
// that carries this line's marker is this line's, published by a run whose
// store is gone and that the scan did not show: the line fails rather
// than make another version.
func (d invenioDriver) latestStep(record, marker string) driver.Step {
	return driver.Step{
		Label: "latest version", Arbitrated: true,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(record)+"/versions/latest", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioVerdict(a)
			if a.Err == nil && a.Status == http.StatusNotFound {
				v.Class, v.Problem = driver.Terminal, fmt.Sprintf("record %s has no published version (a new version is made from a published record): %s", record, v.Problem)
			}
			if v.Class != driver.Created {
				return v
			}
			h := hitOf(a.Body)
			switch {
			case h.ID == "" || !h.Published:
				v.Class, v.Problem = driver.Ambiguous, "the latest version's answer is not a published record"
			case slices.Contains(h.markers(), marker):
				v.Class, v.Problem = driver.Terminal, fmt.Sprintf("the latest version of %s, %s, already carries this line's marker %s: it is this line's new version", record, h.ID, marker)
			default:
				v.ID = resolved{id: h.ID, files: h.Files.Enabled, markers: h.markers()}.String()
			}
			return v
		},
	}
}

// newDraftStep opens the new version's draft. InvenioRDM answers a retry
// with the draft already open (invenio-drafts-resources, service.py
// new_version, next_draft_id), so an ambiguous answer is sent again as it
// is. Like the resolve it has no store row: until the draft is re-marked,
// every attempt asks again, so a draft another line adopted and published
// meanwhile is never written to. Its identifier is "ID MARKER...": the
// draft and the markers it carries, which the next step compares with the
// version it was made from.
func (d invenioDriver) newDraftStep() driver.Step {
	return driver.Step{
		Label: "new version", Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			latest, ok := parseResolved(prior[stepLatest])
			if !ok {
				return driver.Request{}, fmt.Errorf("invenio: the latest version was recorded as %q", prior[stepLatest])
			}
			return driver.Request{Method: http.MethodPost, URL: d.url("records/"+url.PathEscape(latest.id)+"/versions", nil), Header: acceptJSON(), Full: true}, nil
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
			if h.ID == "" || h.Published {
				v.Class, v.Problem = driver.Ambiguous, "the new version's answer is not a draft"
				return v
			}
			v.ID = strings.Join(append([]string{h.ID}, h.markers()...), " ")
			return v
		},
	}
}

// markStep replaces the draft's metadata with the line's, carrying this
// line's marker in place of the one inherited: a PUT of the same body has
// the same effect however often it is sent. Before it, the draft must
// carry this line's marker alone (re-marked by an earlier attempt) or
// exactly the markers of the version it was made from (fresh): a draft
// carrying another's is never adopted.
func (d invenioDriver) markStep(key, marker string, withFiles, withoutFiles []byte, dataset bool) driver.Step {
	return driver.Step{
		Label: "new version marker", Target: d.markTarget(), Key: key, Durable: true, Arbitrated: true, RecordID: true,
		Build: func(prior []string) (driver.Request, error) {
			latest, ok := parseResolved(prior[stepLatest])
			draft := strings.Fields(prior[stepNewDraft])
			if !ok || len(draft) == 0 {
				return driver.Request{}, fmt.Errorf("invenio: the new version was recorded as %q of %q", prior[stepNewDraft], prior[stepLatest])
			}
			id, carried := draft[0], draft[1:]
			if !slices.Equal(carried, []string{marker}) && !slices.Equal(carried, latest.markers) {
				return driver.Request{}, fmt.Errorf("%w: invenio: the open draft %s of record %s carries the markers [%s], neither this line's %s nor those of the version it was made from [%s]: another deposit's draft, not adopted; run again once it is published, or delete it (DELETE /api/records/%s/draft)",
					driver.ErrNotYet, id, latest.id, strings.Join(carried, " "), marker, strings.Join(latest.markers, " "), id)
			}
			body := withoutFiles
			if dataset || latest.files {
				body = withFiles
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
}

// importStep links the latest version's files into the draft (POST
// .../draft/actions/files-import), which InvenioRDM refuses for a draft
// holding any file ("Please remove all files first."): the draft's files
// are read before it is ever sent again. A version without files imports
// none.
func (d invenioDriver) importStep(key string) driver.Step {
	return d.importStepAt(key, stepMark, func(prior []string) (string, bool) {
		latest, ok := parseResolved(prior[stepLatest])
		return "none", ok && !latest.files
	})
}

// importStepAt is the import into the draft whose id is the identifier of
// step markAt; settled, when set, says that no import is needed.
func (d invenioDriver) importStepAt(key string, markAt int, settled func(prior []string) (string, bool)) driver.Step {
	return driver.Step{
		Label: "files import", Target: d.fileTarget(), Key: key + " import", Durable: true,
		Settled: settled,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: d.url("records/"+url.PathEscape(prior[markAt])+"/draft/actions/files-import", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := invenioFileVerdict(a)
			problem := invenioProblem(a.Body)
			switch {
			case v.Class == driver.Created:
				v.ID = "imported"
			case a.Err == nil && a.Status == http.StatusBadRequest && strings.Contains(problem, "remove all files"):
				v.Class = driver.Conflict // imported before, or files of another's
			case a.Err == nil && a.Status == http.StatusBadRequest && strings.Contains(problem, "must be enabled"):
				v.Class, v.ID = driver.Created, "none"
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) {
				return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(prior[markAt])+"/draft/files", nil), Header: acceptJSON(), Full: true}, nil
			},
			Judge: judgeImported,
		},
	}
}

// judgeImported reads a draft's files after an import may have been sent:
// none is absent; all committed is the import; a file still pending was
// uploaded, not imported, so the draft is not as the line asks.
func judgeImported(a driver.Answer) driver.Finding {
	if a.Err == nil && a.Status == http.StatusNotFound {
		return driver.Finding{Kind: driver.Foreign, Problem: "the draft is gone (published by another deposit, or deleted): " + invenioProblem(a.Body)}
	}
	if a.Err != nil || a.Status != http.StatusOK {
		return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
	}
	var files struct {
		Entries []struct {
			Key    string `json:"key"`
			Status string `json:"status"`
		} `json:"entries"`
	}
	if json.Unmarshal(a.Body, &files) != nil {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the draft's files answer is not a list of files"}
	}
	if len(files.Entries) == 0 {
		return driver.Finding{Kind: driver.Absent}
	}
	for _, e := range files.Entries {
		if e.Status != "completed" {
			return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf("the draft holds file %q, not committed: not the previous version's files; delete it and run again with --retry-failed", e.Key)}
		}
	}
	return driver.Finding{Kind: driver.Present, ID: "imported"}
}

// latestCheck finds out whether a new version was published: the latest
// version of the draft's record (resolved through the database) carries
// marker (this line's, or an object version's), or else the draft's own
// record is published. markAt is the step whose identifier is the draft
// id; byID as for publishStep.
func (d invenioDriver) latestCheck(marker string, markAt int, byID bool) *driver.Check {
	return &driver.Check{
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: http.MethodGet, URL: d.url("records/"+url.PathEscape(prior[markAt])+"/versions/latest", nil), Header: acceptJSON(), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			switch {
			case a.Err == nil && a.Status == http.StatusOK:
				h := hitOf(a.Body)
				if h.Published && (slices.Contains(h.markers(), marker) || slices.Contains(h.versionMarkers(), marker)) {
					return driver.Finding{Kind: driver.Present, ID: recordID(a.Body, h.ID, byID)}
				}
				// A later version may have followed ours: the draft's own
				// record says.
				return driver.Finding{Then: d.readBack(markAt, byID)}
			case a.Err == nil && a.Status == http.StatusNotFound:
				return driver.Finding{Kind: driver.Absent} // the draft was never published
			}
			return driver.Finding{Kind: driver.Unknown, Class: invenioVerdict(a).Class, Problem: invenioProblem(a.Body)}
		},
	}
}

// SerialTarget names the store rows whose leases keep new versions of one
// record from running at once.
func (d invenioDriver) SerialTarget() string {
	return driver.TargetName(protocol.Invenio+"-serial", d.endpoint)
}

// Serial is the record a new-version line names: InvenioRDM keeps one
// draft open for a record's next version and answers every POST
// .../versions with it, so two lines making new versions of one record at
// once would share it. Lines that name the record by different ids (two
// of its versions) are not told apart: name one id per record.
func (d invenioDriver) Serial(k canonical.Keyed) string {
	payload := k.Body
	var doc struct {
		Dataset  []driver.DatasetFile `json:"dataset"`
		Metadata json.RawMessage      `json:"metadata"`
	}
	if json.Unmarshal(k.Body, &doc) == nil && len(doc.Dataset) > 0 {
		payload = doc.Metadata
	}
	opts, _, err := splitOptions(payload)
	if err != nil || opts.NewVersionOf == "" {
		return ""
	}
	return "new-version " + opts.NewVersionOf
}
