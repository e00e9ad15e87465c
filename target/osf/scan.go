package osf

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// A lost store is recovered from a scan of the user's nodes
// (driver.Seeder): GET /v2/users/me/nodes/, read from OSF's database
// (osf.io api/users/views.py, UserNodes), sorted by date_created so that
// a node created during the scan joins the last page rather than shifting
// the others (its default order, -last_logged, moves a node at every
// upload), 100 a page (MAX_PAGE_SIZE in api/base/settings/defaults.py).
// The tags filter matches a whole tag only (api/base/filters.py turns it
// into tags__name iexact), so the scan lists every node and reads their
// tags.

var _ driver.Seeder = (*osf)(nil)

// scanPageSize is the largest page OSF answers.
const scanPageSize = 100

func (d *osf) Marker(k canonical.Keyed) string { return Marker(k.Key) }

// ScanTarget names the scan of the account in the store.
func (d *osf) ScanTarget() string { return d.target("scan") }

// ScanSettle is the settle time: a create still running on the server
// when the store was lost commits later.
func (d *osf) ScanSettle() time.Duration { return d.settle }

// ScanWindow: the listing has no window.
func (d *osf) ScanWindow() int { return math.MaxInt }

// ScanPage lists the user's nodes, oldest first.
func (d *osf) ScanPage(page int) driver.Request {
	return d.get(d.api + "/users/me/nodes/?" + url.Values{"sort": {"date_created"},
		"page[size]": {strconv.Itoa(scanPageSize)}, "page": {strconv.Itoa(page)}}.Encode())
}

// ReadScan reads one page: a finding per marker tag.
func (d *osf) ReadScan(a driver.Answer) ([]driver.Found, int, int, bool) {
	if a.Err != nil || a.Status != http.StatusOK {
		return nil, 0, 0, false
	}
	nodes, total, ok := nodeList(a.Body)
	if !ok {
		return nil, 0, 0, false
	}
	if total < 0 { // no count: pages until a short one
		total = 0
		if len(nodes) == scanPageSize {
			total = math.MaxInt
		}
	}
	var found []driver.Found
	for _, n := range nodes {
		for _, t := range n.Attributes.Tags {
			if strings.HasPrefix(strings.ToLower(t), markerPrefix) {
				found = append(found, driver.Found{Marker: strings.ToLower(t), ID: n.ID, Published: n.Attributes.Public})
			}
		}
	}
	return found, len(nodes), total, true
}

// ScanProblem is the error of a scan page in one line.
func (d *osf) ScanProblem(body []byte) string { return detail(body) }

// SeedRows seeds the node step of a deposit whose node the scan found:
// done, so that its files are uploaded by name (a 409 names those already
// there) and its publication and DOI asked for again (neither has a
// second effect). Found in two nodes or more, the node step fails,
// naming them.
func (d *osf) SeedRows(k canonical.Keyed, steps []driver.Step, found []driver.Found) []driver.SeedRow {
	at := slices.IndexFunc(steps, func(s driver.Step) bool { return s.Label == "node" })
	if at < 0 {
		return nil
	}
	var ids []string
	for _, f := range found {
		if !slices.Contains(ids, f.ID) {
			ids = append(ids, f.ID)
		}
	}
	if len(ids) > 1 {
		return []driver.SeedRow{{Step: at, Conflict: fmt.Sprintf(
			"the scan of the account found %d nodes tagged %s: %s; keep one and delete the others, then run again on a new store",
			len(ids), Marker(k.Key), strings.Join(ids, ", "))}}
	}
	return []driver.SeedRow{{Step: at, ID: ids[0], Done: true}}
}
