package client

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

// BenchmarkInvenioVersions deposits b.N new versions of b.N published
// records, or b.N records submitted to a community, into the InvenioRDM
// stub at concurrency 4 (re-run while any is unresolved), without a rate limit, and reports the deposits/s
// and the requests each (searches included). The first versions are
// published before the timer starts.
func BenchmarkInvenioVersions(b *testing.B) {
	for _, bc := range []struct {
		name   string
		faults string
	}{
		{"new-version/unlimited", ""},
		{"new-version/faults", "drop=0.1,504=0.05,500=0.05,429=0.05"},
		{"review/unlimited", ""},
		{"review/faults", "drop=0.1,504=0.05,500=0.05,429=0.05"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := startInvenioStub(b, repotest.InvenioConfig{Seed: 7, IndexLag: 5 * time.Millisecond, Faults: bc.faults})
			its := make([]Item, b.N)
			if strings.HasPrefix(bc.name, "review") {
				for i := range its {
					its[i] = Item{Line: int64(i + 1), Payload: invenioSubmission(i, "reef-lab")}
				}
			} else {
				first := make([]Item, b.N)
				for i := range first {
					first[i] = Item{Line: int64(i + 1), Payload: invenioRecord(i)}
				}
				c := invenioClient(b, s, openStoreAt(b, filepath.Join(b.TempDir(), "deposit.db")), invenio.Target{}, fastRetry)
				published := runUntilSettled(b, c, first, 10)
				for i := range its {
					its[i] = Item{Line: int64(b.N + i + 1), Payload: invenioNewVersion(i, published[int64(i+1)].RecordID)}
				}
			}
			c := invenioClient(b, s, openStoreAt(b, filepath.Join(b.TempDir(), "deposit.db")), invenio.Target{}, fastRetry)
			before := s.Stats().Requests
			b.ResetTimer()
			start := time.Now()
			got := runUntilSettled(b, c, its, 10)
			elapsed := time.Since(start)
			b.StopTimer()
			if len(got) != b.N {
				b.Fatalf("%d of %d settled", len(got), b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deposits/s")
			b.ReportMetric(float64(s.Stats().Requests-before)/float64(b.N), "req/deposit")
		})
	}
}
