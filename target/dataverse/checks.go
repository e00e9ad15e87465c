package dataverse

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/driver"
)

// clockSlack is how much older than the look a dataset may seem and still
// be read: the look's Date header and a version's createTime come from
// the server's clocks, in whole seconds.
const clockSlack = time.Second

// searchItem is the part of a search hit the checks read.
type searchItem struct {
	GlobalID       string `json:"global_id"`
	MetadataBlocks struct {
		Citation struct {
			Fields []citationField `json:"fields"`
		} `json:"citation"`
	} `json:"metadataBlocks"`
}

// citationField is one field of the citation block.
type citationField struct {
	TypeName string          `json:"typeName"`
	Value    json.RawMessage `json:"value"`
}

// hasMarker reports whether fields hold marker as an otherIdValue,
// exactly: otherIdValue is tokenised text, so a phrase query also matches
// longer values.
func hasMarker(fields []citationField, marker string) bool {
	for _, f := range fields {
		if f.TypeName != "otherId" {
			continue
		}
		var values []any
		if json.Unmarshal(f.Value, &values) != nil {
			continue
		}
		if slices.ContainsFunc(values, func(v any) bool { return otherIDValue(v) == marker }) {
			return true
		}
	}
	return false
}

// markedHits reads a search answer: the persistent identifiers of the
// hits that carry marker exactly. ok is false for a body that is no page
// of hits.
func markedHits(body []byte, marker string) (pids []string, ok bool) {
	var page struct {
		Data *struct {
			Items []searchItem `json:"items"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &page) != nil || page.Data == nil {
		return nil, false
	}
	for _, it := range page.Data.Items {
		if hasMarker(it.MetadataBlocks.Citation.Fields, marker) && !slices.Contains(pids, it.GlobalID) {
			pids = append(pids, it.GlobalID)
		}
	}
	return pids, true
}

// unknown is the finding of an answer that settles nothing.
func unknown(a driver.Answer) driver.Finding {
	v := judge(a, readStep)
	if v.Class == driver.Created {
		v.Class = driver.Ambiguous // a 2xx whose body could not be read
	}
	return driver.Finding{Kind: driver.Unknown, Class: v.Class, Problem: v.Problem}
}

// sinceFragment carries the look's time from the check's Build to its
// Judge, which sees only the answer: a URL fragment is never sent.
const sinceFragment = "#since="

// createCheck looks for the dataset of marker: the search; on a miss
// (which proves nothing: Dataverse indexes asynchronously and only logs a
// failed index) the collection's contents; then each dataset created since
// the look, newest first.
func (d *dv) createCheck(marker string) *driver.Check {
	return &driver.Check{
		Settle: d.settle,
		Build: func(prior []string) (driver.Request, error) {
			since, _ := strings.CutPrefix(prior[0], newPrefix)
			r := d.get(d.searchURL(marker))
			r.URL += sinceFragment + since
			return r, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			pids, ok := markedHits(a.Body, marker)
			switch {
			case !ok:
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the search answer is not a page of hits"}
			case len(pids) == 1:
				return driver.Finding{Kind: driver.Present, ID: pids[0]}
			case len(pids) > 1:
				return driver.Finding{Kind: driver.Foreign, Problem: duplicates(marker, pids)}
			}
			_, frag, _ := strings.Cut(a.URL, sinceFragment)
			since, _ := strconv.ParseInt(frag, 10, 64)
			return driver.Finding{Kind: driver.Absent, Then: d.contentsCheck(marker, time.Unix(since, 0).Add(-clockSlack))}
		},
	}
}

// contentsCheck reads the collection's contents (unpaged, from the
// database, without metadata: IQSS/dataverse api/Dataverses.java,
// listContent) and then the datasets in it newest first.
func (d *dv) contentsCheck(marker string, since time.Time) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) {
			return d.get(d.api("dataverses/"+url.PathEscape(d.alias)+"/contents", nil)), nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			var page struct {
				Data []struct {
					ID   int64  `json:"id"`
					Type string `json:"type"`
				} `json:"data"`
			}
			if json.Unmarshal(a.Body, &page) != nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the contents answer is not a list"}
			}
			var ids []int64
			for _, it := range page.Data {
				if it.Type == "dataset" {
					ids = append(ids, it.ID)
				}
			}
			// Identifiers grow with creation: newest first.
			slices.SortFunc(ids, func(x, y int64) int { return cmp.Compare(y, x) })
			if len(ids) == 0 {
				return driver.Finding{Kind: driver.Absent}
			}
			return driver.Finding{Kind: driver.Absent, Then: d.pageCheck(marker, since, ids)}
		},
	}
}

// pageSize is how many of the newest datasets one search page shows.
const pageSize = 1000

// pageHit is what a page of the newest indexed datasets says of one.
type pageHit struct {
	pid     string
	marked  bool
	created time.Time
}

// pageCheck reads a page of the newest datasets search shows, each with
// its otherId (read from the database) and creation time ("createdAt",
// IQSS/dataverse search/SolrSearchResult.java; sort=date, order=desc and
// per_page up to 1000 per doc/sphinx-guides/source/api/search.rst): one
// request settles what would take a read per dataset. The datasets the page does
// not show (not indexed yet, or never) are read one by one.
func (d *dv) pageCheck(marker string, since time.Time, ids []int64) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) {
			return d.get(d.api("search", url.Values{
				"q": {"*"}, "type": {"dataset"}, "subtree": {d.alias}, "sort": {"date"}, "order": {"desc"},
				"per_page": {strconv.Itoa(pageSize)}, "metadata_fields": {"citation:otherId"}, "show_entity_ids": {"true"},
			})), nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			var page struct {
				Data *struct {
					Items []struct {
						searchItem
						EntityID  int64  `json:"entity_id"`
						CreatedAt string `json:"createdAt"`
					} `json:"items"`
				} `json:"data"`
			}
			if json.Unmarshal(a.Body, &page) != nil || page.Data == nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the search answer is not a page of hits"}
			}
			shown := map[int64]pageHit{}
			for _, it := range page.Data.Items {
				created, err := time.Parse(time.RFC3339, it.CreatedAt)
				if err != nil {
					created = farFuture
				}
				shown[it.EntityID] = pageHit{pid: it.GlobalID, marked: hasMarker(it.MetadataBlocks.Citation.Fields, marker), created: created}
			}
			return d.walk(marker, since, ids, shown, 0)
		},
	}
}

// farFuture stands for a time an answer does not give: no dataset is
// taken as older than the look for want of it.
var farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// walk goes through ids, newest first, until the marker's dataset or one
// older than since: a dataset the page showed is judged from it, any
// other is read (read counts those, within the bound).
func (d *dv) walk(marker string, since time.Time, ids []int64, shown map[int64]pageHit, read int) driver.Finding {
	for ; len(ids) > 0; ids = ids[1:] {
		h, ok := shown[ids[0]]
		switch {
		case !ok:
			return d.readOne(marker, since, ids, shown, read)
		case h.marked:
			return driver.Finding{Kind: driver.Present, ID: h.pid}
		case h.created.Before(since):
			return driver.Finding{Kind: driver.Absent} // older than the look: none after can be ours
		}
	}
	return driver.Finding{Kind: driver.Absent}
}

// readOne reads ids[0], which the page did not show, then walks on.
func (d *dv) readOne(marker string, since time.Time, ids []int64, shown map[int64]pageHit, read int) driver.Finding {
	if read >= d.bound {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Terminal, Problem: fmt.Sprintf(
			"the marker %s was not found by search, nor in the datasets of collection %s created since this deposit was tried, of which %d search does not show were read: look for it by hand, or raise the list bound (Target.ListBound)",
			marker, d.alias, read)}
	}
	id := strconv.FormatInt(ids[0], 10)
	return driver.Finding{Kind: driver.Absent, Then: &driver.Check{
		Build: func([]string) (driver.Request, error) { return d.get(d.api("datasets/"+id, nil)), nil },
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err == nil && a.Status == http.StatusNotFound {
				return d.walk(marker, since, ids[1:], shown, read+1) // deleted since the listing
			}
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			ds, ok := readDataset(a.Body)
			switch {
			case !ok:
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the dataset answer cannot be read"}
			case hasMarker(ds.Data.LatestVersion.MetadataBlocks.Citation.Fields, marker):
				return driver.Finding{Kind: driver.Present, ID: ds.pid()}
			case ds.created().Before(since):
				return driver.Finding{Kind: driver.Absent}
			}
			return d.walk(marker, since, ids[1:], shown, read+1)
		},
	}}
}

// datasetAnswer is the part of GET /api/datasets/{id} the checks read.
type datasetAnswer struct {
	Data struct {
		Protocol      string `json:"protocol"`
		Authority     string `json:"authority"`
		Separator     string `json:"separator"`
		Identifier    string `json:"identifier"`
		LatestVersion struct {
			VersionState        string `json:"versionState"`
			CreateTime          string `json:"createTime"`
			DatasetPersistentID string `json:"datasetPersistentId"`
			MetadataBlocks      struct {
				Citation struct {
					Fields []citationField `json:"fields"`
				} `json:"citation"`
			} `json:"metadataBlocks"`
		} `json:"latestVersion"`
	} `json:"data"`
}

func readDataset(body []byte) (datasetAnswer, bool) {
	var ds datasetAnswer
	return ds, json.Unmarshal(body, &ds) == nil && ds.Data.Identifier != ""
}

// pid is the dataset's persistent identifier, "doi:10.5072/FK2/ABCDEF".
func (ds datasetAnswer) pid() string {
	if p := ds.Data.LatestVersion.DatasetPersistentID; p != "" {
		return p
	}
	return ds.Data.Protocol + ":" + ds.Data.Authority + cmp.Or(ds.Data.Separator, "/") + ds.Data.Identifier
}

// created is when the latest version was created ("createTime", in whole
// seconds: IQSS/dataverse util/json/JsonPrinter.java); far in the future
// when the answer does not say, so that no dataset is skipped for it.
func (ds datasetAnswer) created() time.Time {
	t, err := time.Parse(time.RFC3339, ds.Data.LatestVersion.CreateTime)
	if err != nil {
		return farFuture
	}
	return t
}

// publishCheck reads the dataset's locks, then its version state: any
// lock is a publication under way (or stuck), RELEASED without locks is
// done, a draft without locks was not published.
func (d *dv) publishCheck() *driver.Check {
	return &driver.Check{
		Settle: d.settle,
		Poll:   d.lockWait,
		Build: func(prior []string) (driver.Request, error) {
			return d.get(d.api("datasets/:persistentId/locks", url.Values{"persistentId": {prior[1]}})), nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			var locks struct {
				Data []struct {
					LockType string `json:"lockType"`
				} `json:"data"`
			}
			if json.Unmarshal(a.Body, &locks) != nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the locks answer is not a list"}
			}
			pid := pidOf(a.URL)
			if len(locks.Data) > 0 {
				var names []string
				for _, l := range locks.Data {
					names = append(names, l.LockType)
				}
				return driver.Finding{Kind: driver.Pending, Problem: fmt.Sprintf(
					"dataset %s is locked (%s): stuck, if this lasts; see it in Dataverse, or ask its administrators", pid, strings.Join(names, ", "))}
			}
			return driver.Finding{Kind: driver.Absent, Then: d.releasedCheck(pid)}
		},
	}
}

// releasedCheck reads the dataset's latest version state.
func (d *dv) releasedCheck(pid string) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) {
			return d.get(d.api("datasets/:persistentId/", url.Values{"persistentId": {pid}})), nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			if a.Err != nil || a.Status != http.StatusOK {
				return unknown(a)
			}
			ds, ok := readDataset(a.Body)
			switch {
			case !ok:
				return driver.Finding{Kind: driver.Unknown, Class: driver.Ambiguous, Problem: "the dataset answer cannot be read"}
			case ds.Data.LatestVersion.VersionState == "RELEASED":
				return driver.Finding{Kind: driver.Present, ID: ds.pid()}
			}
			return driver.Finding{Kind: driver.Absent}
		},
	}
}
