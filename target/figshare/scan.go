package figshare

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// A lost store is recovered from a scan of the account (driver.ChainSeeder).
// The search cannot do it: it lags by an undocumented time, and its hits,
// like the listing's, are the short form of an article, without tags. So
// the scan pages the account's private articles (GET /account/articles,
// from the database) and reads each article (GET /account/articles/{id})
// for its tags, one request each.

var _ driver.ChainSeeder = (*fs)(nil)

// The listing's pages: Figshare answers offsets up to 1000 only
// (docs/api/index.md, Pagination), so an account listing that many
// articles cannot be scanned whole, and the run stops.
const (
	scanPageSize = 100
	scanWindow   = 1000
)

func (d *fs) Marker(k canonical.Keyed) string { return Marker(k.Key) }

// ScanTarget names the scan of the account in the store.
func (d *fs) ScanTarget() string { return d.target("scan") }

// ScanSettle is the settle time: an article whose create was still
// running when the store was lost commits later.
func (d *fs) ScanSettle() time.Duration { return d.settle }

// ScanProblem is the problem of an answer a look could not use.
func (d *fs) ScanProblem(a driver.Answer) string {
	if v := judge(a, false); v.Problem != "" {
		return v.Problem
	}
	return message(a.Body)
}

// ScanStart lists the first page of the account's articles.
func (d *fs) ScanStart() *driver.ScanLook { return d.scanList(1, nil) }

// scanList reads page of the listing, after the ids of the pages before.
func (d *fs) scanList(page int, ids []string) *driver.ScanLook {
	q := url.Values{"page": {strconv.Itoa(page)}, "page_size": {strconv.Itoa(scanPageSize)}}
	return &driver.ScanLook{
		Request: d.get(d.api("account/articles") + "?" + q.Encode()),
		Read: func(a driver.Answer) ([]driver.Found, *driver.ScanLook, bool, error) {
			if a.Err != nil || a.Status != http.StatusOK {
				return nil, nil, false, nil
			}
			var list []struct {
				ID json.Number `json:"id"`
			}
			if json.Unmarshal(a.Body, &list) != nil || list == nil {
				return nil, nil, false, nil
			}
			all := slices.Clone(ids)
			for _, it := range list {
				if id := it.ID.String(); id != "" && !slices.Contains(all, id) {
					all = append(all, id)
				}
			}
			switch {
			case len(list) == scanPageSize && page*scanPageSize >= scanWindow:
				return nil, nil, true, fmt.Errorf("figshare: the account lists %d articles or more, and Figshare's listing shows the first %d only: the scan for earlier deposits cannot see them all", scanWindow, scanWindow)
			case len(list) == scanPageSize:
				return nil, d.scanList(page+1, all), true, nil
			}
			return nil, d.scanRead(all), true, nil
		},
	}
}

// scanRead reads ids[0], then the rest.
func (d *fs) scanRead(ids []string) *driver.ScanLook {
	if len(ids) == 0 {
		return nil
	}
	return &driver.ScanLook{
		Request: d.get(d.articleURL(ids[0], "")),
		Read: func(a driver.Answer) ([]driver.Found, *driver.ScanLook, bool, error) {
			next := d.scanRead(ids[1:])
			switch {
			case a.Err == nil && a.Status == http.StatusNotFound && message(a.Body) != "":
				return nil, next, true, nil // deleted since the listing
			case a.Err != nil || a.Status != http.StatusOK:
				return nil, nil, false, nil
			}
			art, ok := readArticle(a.Body)
			if !ok {
				return nil, nil, false, nil
			}
			var found []driver.Found
			for _, m := range art.markers() {
				f := driver.Found{Marker: m, ID: art.ID.String(), Published: art.public()}
				if f.Published {
					f.PID = art.DOI
				}
				found = append(found, f)
			}
			return found, next, true, nil
		},
	}
}

// SeedRows seeds a deposit whose article the scan found: the article step
// done with it; published with a DOI, the publish done too; else every
// later durable step pending, so that each looks before it is sent. Found
// in two articles or more, the article step fails, naming them.
func (d *fs) SeedRows(k canonical.Keyed, steps []driver.Step, found []driver.Found) []driver.SeedRow {
	var ids []string
	for _, f := range found {
		if !slices.Contains(ids, f.ID) {
			ids = append(ids, f.ID)
		}
	}
	if len(ids) > 1 {
		return []driver.SeedRow{{Step: 0, Conflict: fmt.Sprintf(
			"the scan of the account found %d articles with the marker %s: %s; keep one and delete the others, then run again on a new store",
			len(ids), Marker(k.Key), strings.Join(ids, ", "))}}
	}
	f := found[0]
	rows := []driver.SeedRow{{Step: 0, ID: f.ID, Done: true}}
	last := len(steps) - 1
	if f.Published && f.PID != "" && steps[last].Primary {
		return append(rows, driver.SeedRow{Step: last, ID: f.PID, Done: true})
	}
	for i, s := range steps[1:] {
		if s.Durable {
			rows = append(rows, driver.SeedRow{Step: i + 1})
		}
	}
	return rows
}
