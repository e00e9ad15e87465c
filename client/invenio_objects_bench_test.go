package client

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

// BenchmarkInvenioObjects runs b.N objects (records without files) against
// the InvenioRDM stub at concurrency 4, with no rate limit: "create"
// creates them (with --identity: the draft, the publish); "edit" and
// "version" apply one change to each of b.N objects created before the
// timer starts (the read, then the edit's open, save and publish, or the
// new version's open, re-mark and publish). It reports the objects/s and
// the requests each.
func BenchmarkInvenioObjects(b *testing.B) {
	for _, mode := range []string{"create", "edit", "version"} {
		b.Run(mode, func(b *testing.B) {
			s := startInvenioStub(b, repotest.InvenioConfig{Seed: 7, IndexLag: 5 * time.Millisecond})
			tgt := invenio.Target{Endpoint: s.API, SettleTime: invenioSettle, SearchRate: -1}
			if mode == "version" {
				tgt.OnChange = invenio.OnChangeVersion
			}
			c, err := New(Config{Target: tgt, Store: openStoreAt(b, filepath.Join(b.TempDir(), "deposit.db")), Retry: fastRetry, Rate: -1,
				HTTPClient: s.Client(), Identity: []string{"/metadata/identifiers/0/identifier"},
				Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}})
			require.NoError(b, err)
			line := func(i int, title string) []byte {
				return fmt.Appendf(nil, `{"metadata":{"title":%q,"identifiers":[{"identifier":"series-%d","scheme":"other"}],"creators":[{"person_or_org":{"type":"personal","family_name":"Vega"}}],"publication_date":"2026-11-30","resource_type":{"id":"dataset"}}}`, title, i)
			}
			its := make([]Item, b.N)
			for i := range its {
				its[i] = Item{Line: int64(i + 1), Payload: line(i, fmt.Sprintf("Series %d", i))}
			}
			if mode != "create" {
				runUntilSettled(b, c, its, 10)
				for i := range its {
					its[i] = Item{Line: int64(i + 1), Payload: line(i, fmt.Sprintf("Series %d, corrected", i))}
				}
			}
			before := s.Stats().Requests
			b.ResetTimer()
			start := time.Now()
			got := runUntilSettled(b, c, its, 10)
			elapsed := time.Since(start)
			b.StopTimer()
			if len(got) != b.N {
				b.Fatalf("%d of %d settled", len(got), b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "objects/s")
			b.ReportMetric(float64(s.Stats().Requests-before)/float64(b.N), "req/object")
		})
	}
}
