package dataverse

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// A lost store is recovered from a scan of the collection
// (driver.ChainSeeder): the search alone cannot do it, since Dataverse
// indexes asynchronously and only logs a failed index, so a dataset the
// index never shows would be created again. The scan reads the
// collection's contents, which Dataverse answers from the database
// (IQSS/dataverse api/Dataverses.java, listContent: every direct child the
// caller may see, unpaged), takes the markers of the datasets a search
// page shows (their otherId read from the database by
// search/SolrSearchResult.java), and reads each dataset the search does
// not show, one request each.

var _ driver.ChainSeeder = (*dv)(nil)

func (d *dv) Marker(k canonical.Keyed) string { return Marker(k.Key) }

// ScanTarget names the scan of the collection in the store.
func (d *dv) ScanTarget() string { return d.target("scan") }

// ScanSettle is the settle time: the contents listing is read from the
// database, so a dataset whose create committed is listed at once (and
// read if search does not show it yet), but a create still running on the
// server when the store was lost commits later.
func (d *dv) ScanSettle() time.Duration { return d.settle }

// ScanProblem is the problem of an answer a look could not use, as the
// steps' reads judge it.
func (d *dv) ScanProblem(a driver.Answer) string {
	if v := judge(a, readStep); v.Problem != "" {
		return v.Problem
	}
	return message(a.Body)
}

// ScanStart lists the collection's contents.
func (d *dv) ScanStart() *driver.ScanLook {
	return &driver.ScanLook{
		Request: d.get(d.api("dataverses/"+url.PathEscape(d.alias)+"/contents", nil)),
		Read: func(a driver.Answer) ([]driver.Found, *driver.ScanLook, bool, error) {
			if a.Err != nil || a.Status != http.StatusOK {
				return nil, nil, false, nil
			}
			var list struct {
				Data []struct {
					Type       string `json:"type"`
					ID         int64  `json:"id"`
					Protocol   string `json:"protocol"`
					Authority  string `json:"authority"`
					Separator  string `json:"separator"`
					Identifier string `json:"identifier"`
				} `json:"data"`
			}
			if json.Unmarshal(a.Body, &list) != nil || list.Data == nil {
				return nil, nil, false, nil
			}
			unseen := map[int64]string{}
			for _, it := range list.Data {
				if it.Type == "dataset" && it.ID > 0 {
					unseen[it.ID] = it.Protocol + ":" + it.Authority + cmp.Or(it.Separator, "/") + it.Identifier
				}
			}
			return nil, d.scanNext(unseen, 0, -1), true, nil
		},
	}
}

// scanNext is the look after those that left unseen (dataset id to
// persistent identifier) not seen: a search page from start while one page
// costs fewer requests than reading what is left one by one (total is the
// search's count, -1 before the first page), else a read of each.
func (d *dv) scanNext(unseen map[int64]string, start, total int) *driver.ScanLook {
	if len(unseen) == 0 {
		return nil
	}
	pages := 1
	if total >= 0 {
		pages = (total - start + pageSize - 1) / pageSize
	}
	if pages > 0 && pages < len(unseen) {
		return d.scanPage(unseen, start)
	}
	ids := slices.Sorted(maps.Keys(unseen))
	return d.scanRead(ids, unseen)
}

// scanPage is the search page from start of every dataset in the
// collection, with its otherId.
func (d *dv) scanPage(unseen map[int64]string, start int) *driver.ScanLook {
	return &driver.ScanLook{
		Request: d.get(d.api("search", url.Values{
			"q": {"*"}, "type": {"dataset"}, "subtree": {d.alias}, "sort": {"date"}, "order": {"asc"},
			"per_page": {strconv.Itoa(pageSize)}, "start": {strconv.Itoa(start)},
			"metadata_fields": {"citation:otherId"}, "show_entity_ids": {"true"},
		})),
		Read: func(a driver.Answer) ([]driver.Found, *driver.ScanLook, bool, error) {
			if a.Err != nil || a.Status != http.StatusOK {
				return nil, nil, false, nil
			}
			var page struct {
				Data *struct {
					Total int `json:"total_count"`
					Items []struct {
						searchItem
						EntityID     int64  `json:"entity_id"`
						VersionState string `json:"versionState"`
					} `json:"items"`
				} `json:"data"`
			}
			if json.Unmarshal(a.Body, &page) != nil || page.Data == nil {
				return nil, nil, false, nil
			}
			var found []driver.Found
			rest := maps.Clone(unseen)
			for _, it := range page.Data.Items {
				if it.EntityID == 0 {
					return nil, nil, false, nil // not asked for with show_entity_ids
				}
				pid := cmp.Or(it.GlobalID, unseen[it.EntityID])
				found = append(found, foundIn(it.MetadataBlocks.Citation.Fields, it.EntityID, pid, it.VersionState)...)
				delete(rest, it.EntityID)
			}
			total := page.Data.Total
			if len(page.Data.Items) == 0 {
				total = start // no more pages, whatever the count says
			}
			return found, d.scanNext(rest, start+len(page.Data.Items), total), true, nil
		},
	}
}

// scanRead reads ids[0], a dataset the search did not show, then the rest.
func (d *dv) scanRead(ids []int64, pids map[int64]string) *driver.ScanLook {
	id := ids[0]
	return &driver.ScanLook{
		Request: d.get(d.api("datasets/"+strconv.FormatInt(id, 10)+"/versions/:latest",
			url.Values{"excludeFiles": {"true"}, "includeDeaccessioned": {"true"}})),
		Read: func(a driver.Answer) ([]driver.Found, *driver.ScanLook, bool, error) {
			var next *driver.ScanLook
			if len(ids) > 1 {
				next = d.scanRead(ids[1:], pids)
			}
			m := message(a.Body)
			switch {
			case a.Err == nil && a.Status == http.StatusNotFound && m != "" && !strings.HasPrefix(m, "API endpoint does not exist"):
				return nil, next, true, nil // deleted since the listing
			case a.Err != nil || a.Status != http.StatusOK:
				return nil, nil, false, nil
			}
			var v struct {
				Data *struct {
					DatasetPersistentID string `json:"datasetPersistentId"`
					VersionState        string `json:"versionState"`
					MetadataBlocks      struct {
						Citation struct {
							Fields []citationField `json:"fields"`
						} `json:"citation"`
					} `json:"metadataBlocks"`
				} `json:"data"`
			}
			if json.Unmarshal(a.Body, &v) != nil || v.Data == nil || v.Data.VersionState == "" {
				return nil, nil, false, nil
			}
			pid := cmp.Or(v.Data.DatasetPersistentID, pids[id])
			return foundIn(v.Data.MetadataBlocks.Citation.Fields, id, pid, v.Data.VersionState), next, true, nil
		},
	}
}

// foundIn is what fields, of dataset id, say: one finding per deposit
// marker among its otherId values.
func foundIn(fields []citationField, id int64, pid, state string) []driver.Found {
	var found []driver.Found
	for _, f := range fields {
		if f.TypeName != "otherId" {
			continue
		}
		var values []any
		if json.Unmarshal(f.Value, &values) != nil {
			continue
		}
		for _, v := range values {
			if m := otherIDValue(v); strings.HasPrefix(m, markerPrefix) {
				found = append(found, driver.Found{Marker: m, ID: strconv.FormatInt(id, 10), PID: pid, Published: state == "RELEASED"})
			}
		}
	}
	return found
}

// SeedRows seeds the look of a deposit whose dataset the scan found: done,
// as a look that found it, so that the create is settled by it and the
// files and the publication are looked into before anything is sent.
// Found in two datasets or more, the look fails, naming them: which is
// the deposit's is the user's call.
func (d *dv) SeedRows(k canonical.Keyed, steps []driver.Step, found []driver.Found) []driver.SeedRow {
	look := slices.IndexFunc(steps, func(s driver.Step) bool { return s.Label == "look" })
	if look < 0 {
		return nil
	}
	var pids []string
	for _, f := range found {
		if pid := cmp.Or(f.PID, f.ID); !slices.Contains(pids, pid) {
			pids = append(pids, pid)
		}
	}
	if len(pids) > 1 {
		return []driver.SeedRow{{Step: look, Conflict: fmt.Sprintf(
			"the scan of collection %s found %d datasets with the marker %s: %s; keep one and delete the others, then run again on a new store (its scan finds the one kept), or with --retry-failed if search shows the one kept",
			d.alias, len(pids), Marker(k.Key), strings.Join(pids, ", "))}}
	}
	return []driver.SeedRow{{Step: look, ID: foundPrefix + pids[0], Done: true}}
}
