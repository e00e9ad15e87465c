// Package osf provides a deposit target for the Open Science Framework:
// a project (or a component of a parent node), its files in OSF Storage,
// and optionally its publication and a DOI, each exactly once.
//
// OSF's API v2 arbitrates no create: POST /v2/nodes/ makes a new node
// every time (CenterForOpenScience/osf.io api/nodes/serializers.py,
// NodeSerializer.create). So every node carries a marker, the tag
// "deposit:sha256:" and its key, and is looked for by that tag in the
// user's node listing, which OSF reads from its database, not from its
// search index (api/users/views.py, UserNodes; the tags filter matches a
// tag's name exactly, case aside: api/base/filters.py). Files go to
// WaterButler, OSF's file service, which refuses a name already taken in
// a folder with 409 and the file that holds it
// (CenterForOpenScience/waterbutler server/api/v1/provider/create.py,
// core/exceptions.py NamingConflict): an upload is arbitrated by name and
// compared by its SHA-256, which OSF Storage reports in extra.hashes. A
// file is never uploaded to its own path, which would add a version.
//
// Give a [Target] to client.New as Config.Target. A line is a node's
// attributes ({"title":..., "description":..., "category":..., "tags":[...]}),
// or under datasets {"metadata":A,"files":[...]} with A those attributes.
package osf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// Protocol is the protocol name that begins the store targets of this
// target.
const Protocol = "osf"

// Defaults.
const (
	// DefaultEndpoint is OSF's API v2.
	DefaultEndpoint = "https://api.osf.io/v2"
	// DefaultFiles is OSF's WaterButler, for DefaultEndpoint.
	DefaultFiles = "https://files.osf.io"
	// DefaultCategory is the category of a node whose payload gives none.
	DefaultCategory = "project"
	// DefaultSettleTime is the default Target.SettleTime: the listing is
	// read from OSF's database, so a create that committed is listed at
	// once; an ambiguous create still running on the server has this
	// long to end.
	DefaultSettleTime = 2 * time.Second
	// DefaultRate is the request rate when the client sets none: under
	// the API's burst throttle, 10 per second per user
	// (osf.io api/base/settings/defaults.py, DEFAULT_THROTTLE_RATES).
	DefaultRate = 5
)

// markerPrefix begins every marker.
const markerPrefix = "deposit:sha256:"

// Marker returns the tag a deposit with key carries.
func Marker(key string) string { return markerPrefix + key }

// Target is a user's OSF account through API v2 and WaterButler. A store
// that has never scanned the account scans it once before its first
// deposit (driver.Seeder): the user's nodes, oldest first, with their
// tags. Each deposit is these steps, each guarded in the store:
//
//  1. node: POST /v2/nodes/ (or /v2/nodes/{Parent}/children/) with the
//     attributes and the marker among the tags. After an ambiguous answer
//     it is looked for before it is sent again, by
//     GET /v2/users/me/nodes/?filter[tags]=MARKER.
//  2. one step per file, named by the last element of its path (the files
//     go to the top folder: two files of one name are refused): PUT {Files}/v1/resources/{node}/providers/osfstorage/?kind=file&name=NAME.
//     A 409 names the file that holds the name: ours if its SHA-256 is
//     the file's, else the deposit fails. After an ambiguous answer the
//     folder is listed before it is sent again.
//  3. public, with Public: PATCH /v2/nodes/{node}/ {"public":true}.
//  4. doi, with DOI: POST /v2/nodes/{node}/identifiers/ (category doi);
//     OSF refuses a second ("A DOI already exists"), and the node's
//     identifiers are read then.
//
// The deposit's identifier is the node's id, or its DOI with DOI (the
// node's id is then the record id). The zero value deposits projects to
// OSF. A Target is a value; its Driver is safe for concurrent use.
type Target struct {
	// Endpoint is the API's root, such as https://api.osf.io/v2; default
	// DefaultEndpoint.
	Endpoint string
	// Files is WaterButler's root: DefaultFiles for OSF's own API, else
	// by default Endpoint's origin (as `deposit serve --protocol osf`
	// serves both).
	Files string
	// Token is the personal access token, sent as a bearer token; ""
	// sends none. It is never stored.
	Token string
	// Parent, when set, is the id of the node the deposits are created
	// under, as components.
	Parent string
	// Category is the category of a node whose attributes give none;
	// default DefaultCategory.
	Category string
	// Public makes each node public once its files are up.
	Public bool
	// DOI mints a DOI for each node, after Public (OSF mints DOIs for
	// public nodes).
	DOI bool
	// SettleTime is how long after an ambiguous write the look for it is
	// repeated before "not found" is trusted, and how long a new store
	// waits before it scans the account; default DefaultSettleTime.
	SettleTime time.Duration
}

// osf is the driver of a Target.
type osf struct {
	api, files, token, parent, category string
	public, doi                         bool
	settle                              time.Duration
}

var _ driver.RateSetter = (*osf)(nil)

// Driver checks the target's fields and returns its driver.
func (t Target) Driver() (driver.Driver, error) {
	raw := strings.TrimSpace(t.Endpoint)
	if raw == "" {
		raw = DefaultEndpoint
	}
	api, err := endpoint("osf: Target.Endpoint", raw)
	if err != nil {
		return nil, err
	}
	files := strings.TrimSpace(t.Files)
	switch {
	case files == "" && api == DefaultEndpoint:
		files = DefaultFiles
	case files == "":
		u, _ := url.Parse(api)
		files = u.Scheme + "://" + u.Host
	}
	if files, err = endpoint("osf: Target.Files", files); err != nil {
		return nil, err
	}
	if t.Parent != "" && (strings.TrimSpace(t.Parent) != t.Parent || strings.ContainsAny(t.Parent, "/?#% ")) {
		return nil, errors.New("osf: Target.Parent must be a node's id (such as abc12)")
	}
	if t.SettleTime < 0 {
		return nil, errors.New("osf: Target.SettleTime must not be negative")
	}
	d := &osf{api: api, files: files, token: t.Token, parent: t.Parent, category: t.Category,
		public: t.Public || t.DOI, doi: t.DOI, settle: t.SettleTime}
	if d.category == "" {
		d.category = DefaultCategory
	}
	if d.settle == 0 {
		d.settle = DefaultSettleTime
	}
	return d, nil
}

// endpoint normalises a root URL: no user info, no query (the token goes
// in Target.Token), no trailing slash.
func endpoint(field, raw string) (string, error) {
	if u, err := url.Parse(raw); err == nil && (u.User != nil || u.RawQuery != "") {
		return "", errors.New(field + " must have no user info or query (the token goes in Target.Token)")
	}
	e, err := driver.Endpoint(field, raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return strings.TrimRight(e, "/"), nil
}

// target is the store target of a step ("" for the deposit's own): "osf"
// or "osf-STEP" and the URL nodes are created at.
func (d *osf) target(step string) string {
	name := driver.TargetName(Protocol, d.nodesURL())
	if step == "" {
		return name
	}
	return driver.StepTarget(name, step)
}

// nodesURL is where a node is created.
func (d *osf) nodesURL() string {
	if d.parent != "" {
		return d.api + "/nodes/" + url.PathEscape(d.parent) + "/children/"
	}
	return d.api + "/nodes/"
}

func (d *osf) Name() string { return d.target("") }
func (d *osf) StepTargets() []string {
	return []string{d.target("node"), d.target("file"), d.target("public"), d.target("doi")}
}
func (d *osf) SecretFingerprint() string { return "" }
func (d *osf) Guards(name string) bool {
	return driver.Guarded(name) || (d.token != "" && http.CanonicalHeaderKey(name) == "Authorization")
}
func (d *osf) DefaultRate() float64 { return DefaultRate }

// header is a request's header: the token, and the JSON:API media type.
func (d *osf) header() http.Header {
	h := http.Header{}
	h.Set("Accept", "application/vnd.api+json")
	if d.token != "" {
		h.Set("Authorization", "Bearer "+d.token)
	}
	return h
}

func (d *osf) get(u string) driver.Request {
	return driver.Request{Method: http.MethodGet, URL: u, Header: d.header(), Full: true}
}

// write is a JSON:API write of body.
func (d *osf) write(method, u string, body []byte) driver.Request {
	h := d.header()
	h.Set("Content-Type", "application/vnd.api+json")
	return driver.Request{Method: method, URL: u, Header: h, Body: body, Full: true}
}

// nodeURL is a node's own URL.
func (d *osf) nodeURL(id string) string { return d.api + "/nodes/" + url.PathEscape(id) + "/" }

// Steps are node, one per file, public, doi, and the deposit's own
// (settled by them).
func (d *osf) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	attrs := k.Body
	var files []driver.DatasetFile
	if dir != "" {
		var err error
		if files, attrs, err = datasetDocument(k.Body); err != nil {
			return nil, err
		}
	}
	marker := Marker(k.Key)
	body, err := d.createBody(attrs, marker)
	if err != nil {
		return nil, err
	}
	steps := []driver.Step{d.nodeStep(k.Key, marker, body)}
	names := map[string]string{}
	for _, f := range files {
		name := path.Base(f.Path)
		if other, ok := names[name]; ok {
			return nil, fmt.Errorf("osf: files %q and %q have one name: this target uploads a dataset's files to the top folder of OSF Storage, by name", other, f.Path)
		}
		names[name] = f.Path
		steps = append(steps, d.fileStep(k.Key, name, f, filepath.Join(dir, filepath.FromSlash(f.Path))))
	}
	if d.public {
		steps = append(steps, d.publicStep(k.Key))
	}
	if d.doi {
		steps = append(steps, d.doiStep(k.Key))
	}
	last := len(steps) - 1
	return append(steps, driver.Step{
		Target: d.target(""), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Settled: func(prior []string) (string, bool) {
			if d.doi {
				return prior[last], true
			}
			return prior[0], true
		},
		Build: func(prior []string) (driver.Request, error) { return d.get(d.nodeURL(prior[0])), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, readStep)
			if v.Class == driver.Created {
				v.ID, _ = driver.StringAt(a.Body, []string{"/data/id"})
			}
			return v
		},
	}), nil
}

// datasetDocument splits a dataset's keyed body,
// {"dataset":[...],"metadata":A}, into its files and attributes.
func datasetDocument(body []byte) ([]driver.DatasetFile, json.RawMessage, error) {
	files, err := driver.DatasetFiles(body)
	if err != nil {
		return nil, nil, fmt.Errorf("osf: %w", err)
	}
	var doc struct {
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, nil, fmt.Errorf("osf: %w", err)
	}
	return files, doc.Metadata, nil
}

// createBody is the JSON:API create of a node with attrs, the marker
// appended to its tags and the category defaulted. Attributes that hold
// another deposit's marker are refused.
func (d *osf) createBody(attrs []byte, marker string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(attrs))
	dec.UseNumber()
	var a map[string]any
	if err := dec.Decode(&a); err != nil || a == nil {
		return nil, errors.New("osf: the payload must be a JSON object of a node's attributes ({\"title\":...})")
	}
	if t, _ := a["title"].(string); strings.TrimSpace(t) == "" {
		return nil, errors.New("osf: the payload has no title")
	}
	if _, ok := a["category"]; !ok {
		a["category"] = d.category
	}
	var tags []any
	if raw, ok := a["tags"]; ok {
		if tags, ok = raw.([]any); !ok {
			return nil, errors.New("osf: tags must be a list of strings")
		}
	}
	for _, t := range tags {
		s, ok := t.(string)
		if !ok {
			return nil, errors.New("osf: tags must be a list of strings")
		}
		if strings.HasPrefix(strings.ToLower(s), markerPrefix) && !strings.EqualFold(s, marker) {
			return nil, fmt.Errorf("osf: the tags hold the deposit marker %s, not this payload's %s", s, marker)
		}
	}
	a["tags"] = append(tags, marker)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"data": map[string]any{"type": "nodes", "attributes": a}}); err != nil {
		return nil, fmt.Errorf("osf: create body: %w", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// nodeStep creates the node; after an ambiguous answer it is looked for
// by its marker.
func (d *osf) nodeStep(key, marker string, body []byte) driver.Step {
	return driver.Step{
		Label: "node", Target: d.target("node"), Key: key, Durable: true, RecordID: d.doi,
		Build: func([]string) (driver.Request, error) { return d.write(http.MethodPost, d.nodesURL(), body), nil },
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, createStep)
			if v.Class == driver.Created {
				if v.ID, _ = driver.StringAt(a.Body, []string{"/data/id"}); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the create answer names no node id"
				}
			}
			return v
		},
		Check: &driver.Check{
			Settle: d.settle,
			Build:  func([]string) (driver.Request, error) { return d.get(d.markedURL(marker)), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				ids, ok := markedNodes(a.Body, marker)
				switch {
				case !ok:
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the node listing cannot be read"}
				case len(ids) > 1:
					return driver.Finding{Kind: driver.Foreign, Problem: duplicates(marker, ids)}
				case len(ids) == 1:
					return driver.Finding{Kind: driver.Present, ID: ids[0]}
				}
				return driver.Finding{Kind: driver.Absent}
			},
		},
	}
}

// markedURL lists the user's nodes tagged marker.
func (d *osf) markedURL(marker string) string {
	return d.api + "/users/me/nodes/?" + url.Values{"filter[tags]": {marker}, "page[size]": {"100"}}.Encode()
}

// duplicates is the problem of several nodes with one marker.
func duplicates(marker string, ids []string) string {
	return fmt.Sprintf("%d nodes carry the tag %s: %s; keep one, delete the others, then run again with --retry-failed",
		len(ids), marker, strings.Join(ids, ", "))
}

// node is the part of a JSON:API node the target reads.
type node struct {
	ID         string `json:"id"`
	Attributes struct {
		Tags   []string `json:"tags"`
		Public bool     `json:"public"`
	} `json:"attributes"`
}

// nodeList is a page of nodes; total is the listing's size (meta.total,
// or links.meta.total before API version 2.1), -1 if absent.
func nodeList(body []byte) (nodes []node, total int, ok bool) {
	var page struct {
		Data  []node               `json:"data"`
		Meta  struct{ Total *int } `json:"meta"`
		Links struct {
			Meta struct{ Total *int } `json:"meta"`
		} `json:"links"`
	}
	if json.Unmarshal(body, &page) != nil || page.Data == nil {
		return nil, 0, false
	}
	total = -1
	if page.Meta.Total != nil {
		total = *page.Meta.Total
	} else if page.Links.Meta.Total != nil {
		total = *page.Links.Meta.Total
	}
	return page.Data, total, true
}

// markedNodes are the ids of the nodes in a listing tagged marker.
func markedNodes(body []byte, marker string) ([]string, bool) {
	nodes, _, ok := nodeList(body)
	var ids []string
	for _, n := range nodes {
		if slices.ContainsFunc(n.Attributes.Tags, func(t string) bool { return strings.EqualFold(t, marker) }) && !slices.Contains(ids, n.ID) {
			ids = append(ids, n.ID)
		}
	}
	return ids, ok
}

// storageURL is the top folder of a node's OSF Storage in WaterButler.
func (d *osf) storageURL(node string) string {
	return d.files + "/v1/resources/" + url.PathEscape(node) + "/providers/osfstorage/"
}

// wbFile is WaterButler's metadata of one file or folder.
type wbFile struct {
	Attributes struct {
		Kind  string `json:"kind"`
		Name  string `json:"name"`
		Path  string `json:"path"`
		Extra struct {
			Hashes struct {
				SHA256 string `json:"sha256"`
			} `json:"hashes"`
		} `json:"extra"`
	} `json:"attributes"`
}

// fileStep uploads one file to the top folder; see Target.
func (d *osf) fileStep(key, name string, f driver.DatasetFile, local string) driver.Step {
	ours := func(e wbFile) bool {
		return e.Attributes.Kind == "file" && e.Attributes.Name == name && strings.EqualFold(e.Attributes.Extra.Hashes.SHA256, f.SHA256)
	}
	return driver.Step{
		Label: "file " + strconv.Quote(name), Target: d.target("file"), Key: key + " " + name, Durable: true,
		Build: func(prior []string) (driver.Request, error) {
			h := d.header()
			h.Set("Content-Type", "application/octet-stream")
			return driver.Request{Method: http.MethodPut, Header: h, Size: f.Size, Full: true,
				URL: d.storageURL(prior[0]) + "?" + url.Values{"kind": {"file"}, "name": {name}}.Encode(),
				Open: func() (io.Reader, error) {
					fh, err := os.Open(local)
					if err != nil {
						return nil, err
					}
					return driver.SizedFile{File: fh, Size: f.Size}, nil
				}}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusConflict {
				var c struct {
					Message string  `json:"message"`
					Data    *wbFile `json:"data"`
				}
				_ = json.Unmarshal(a.Body, &c)
				switch {
				case c.Data == nil || c.Data.Attributes.Name == "":
					return driver.Verdict{Class: driver.Conflict, Problem: driver.OneLine(c.Message)}
				case ours(*c.Data):
					return driver.Verdict{Class: driver.Exists, ID: c.Data.Attributes.Path}
				}
				return driver.Verdict{Class: driver.Terminal, Problem: fmt.Sprintf(
					"the project already holds another %s named %q (SHA-256 %s, not this file's %s); rename or remove it, then run again with --retry-failed",
					c.Data.Attributes.Kind, name, c.Data.Attributes.Extra.Hashes.SHA256, f.SHA256)}
			}
			v := judge(a, uploadStep)
			if v.Class != driver.Created {
				return v
			}
			var up struct {
				Data wbFile `json:"data"`
			}
			if json.Unmarshal(a.Body, &up) != nil || up.Data.Attributes.Path == "" {
				return driver.Verdict{Class: driver.Ambiguous, Problem: "the upload answer names no file"}
			}
			if !ours(up.Data) {
				return driver.Verdict{Class: driver.Terminal, Problem: fmt.Sprintf("OSF stored %q with SHA-256 %s, not this file's %s",
					name, up.Data.Attributes.Extra.Hashes.SHA256, f.SHA256)}
			}
			v.ID = up.Data.Attributes.Path
			if a.Status == http.StatusOK {
				v.Warn = "WaterButler answered an upload of a new name as a new version of a file (two uploads of one name at once)"
			}
			return v
		},
		Check: &driver.Check{
			Settle: d.settle,
			Build:  func(prior []string) (driver.Request, error) { return d.get(d.storageURL(prior[0])), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				var list struct {
					Data []wbFile `json:"data"`
				}
				if json.Unmarshal(a.Body, &list) != nil || list.Data == nil {
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the folder listing cannot be read"}
				}
				for _, e := range list.Data {
					switch {
					case ours(e):
						return driver.Finding{Kind: driver.Present, ID: e.Attributes.Path}
					case e.Attributes.Name == name:
						return driver.Finding{Kind: driver.Foreign, Problem: fmt.Sprintf(
							"the project already holds another %s named %q; rename or remove it, then run again with --retry-failed", e.Attributes.Kind, name)}
					}
				}
				return driver.Finding{Kind: driver.Absent}
			},
		},
	}
}

// publicStep makes the node public: a PATCH of one attribute, which has
// no second effect.
func (d *osf) publicStep(key string) driver.Step {
	return driver.Step{
		Label: "public", Target: d.target("public"), Key: key, Durable: true, Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			body, _ := json.Marshal(map[string]any{"data": map[string]any{"type": "nodes", "id": prior[0], "attributes": map[string]any{"public": true}}})
			return d.write(http.MethodPatch, d.nodeURL(prior[0]), body), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := judge(a, publicStep)
			if v.Class == driver.Created {
				var n struct{ Data node }
				if json.Unmarshal(a.Body, &n) != nil || !n.Data.Attributes.Public || n.Data.ID == "" {
					return driver.Verdict{Class: driver.Ambiguous, Problem: "the answer does not show the node public"}
				}
				v.ID = n.Data.ID
			}
			return v
		},
	}
}

// doiStep mints the node's DOI. OSF refuses a second one (osf.io
// api/identifiers/serializers.py: "A DOI already exists for this
// resource."), and then the node's identifiers are read.
func (d *osf) doiStep(key string) driver.Step {
	return driver.Step{
		Label: "doi", Target: d.target("doi"), Key: key, Durable: true, Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			return d.write(http.MethodPost, d.nodeURL(prior[0])+"identifiers/", []byte(`{"data":{"type":"identifiers","attributes":{"category":"doi"}}}`)), nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			if a.Err == nil && a.Status == http.StatusBadRequest && strings.Contains(detail(a.Body), "DOI already exists") {
				return driver.Verdict{Class: driver.Exists}
			}
			v := judge(a, doiStep)
			if v.Class == driver.Created {
				if v.ID, _ = driver.StringAt(a.Body, []string{"/data/attributes/value"}); v.ID == "" {
					v.Class, v.Problem = driver.Ambiguous, "the answer names no DOI"
				}
			}
			return v
		},
		Check: &driver.Check{
			Build: func(prior []string) (driver.Request, error) { return d.get(d.nodeURL(prior[0]) + "identifiers/"), nil },
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return unknown(a)
				}
				var list struct {
					Data []struct {
						Attributes struct{ Category, Value string } `json:"attributes"`
					} `json:"data"`
				}
				if json.Unmarshal(a.Body, &list) != nil || list.Data == nil {
					return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the identifier listing cannot be read"}
				}
				for _, id := range list.Data {
					if id.Attributes.Category == "doi" && id.Attributes.Value != "" {
						return driver.Finding{Kind: driver.Present, ID: id.Attributes.Value}
					}
				}
				return driver.Finding{Kind: driver.Absent}
			},
		},
	}
}
