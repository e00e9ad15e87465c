package crossref_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/crossref"
)

// BenchmarkDeposit deposits batches of 100 new works through the Crossref
// stub on 127.0.0.1, with a SQLite store, concurrency 8, and reports DOIs
// per second and requests per DOI (uploads, result downloads, queries):
// results at once without faults; with uploads dropped after they were
// queued, 503s and 500s after queuing, downloads faulted too; and with
// each upload queued 20ms, then 20ms in process, polled meanwhile.
func BenchmarkDeposit(b *testing.B) {
	for _, bc := range []struct {
		name, faults string
		queue        time.Duration
	}{
		{"faults=none", "", 0},
		{"faults=drop,503,500", "drop=0.1,503=0.1,500=0.1,reads", 0},
		{"queue=20ms+20ms", "", 20 * time.Millisecond},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv, err := repotest.NewCrossrefServer(repotest.CrossrefConfig{Login: login, Password: password, Faults: bc.faults, Seed: 3,
				QueueDelay: bc.queue, ProcessDelay: bc.queue})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			store, err := dedup.Open(filepath.Join(b.TempDir(), "deposit.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			c, err := client.New(client.Config{Store: store,
				Target: crossref.Target{Endpoint: srv.URL + "/servlet/deposit", Login: login, Password: password, Settle: 5 * time.Millisecond},
				Retry:  backoff.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxAttempts: 10}})
			if err != nil {
				b.Fatal(err)
			}
			const perBatch = 100
			dois := 0
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				items := func(yield func(client.Item) bool) {
					for j := range perBatch {
						doi := fmt.Sprintf("10.5555/b%d-%d", i, j)
						if !yield(client.Item{Line: int64(j + 1), Payload: line(doi, "Bench "+doi, 20260101000000000, "bench")}) {
							return
						}
					}
				}
				sum, err := c.Run(context.Background(), items, client.BatchOptions{Concurrency: 8})
				if err != nil || sum.Created != perBatch {
					b.Fatalf("batch %d: %+v, %v", i, sum, err)
				}
				dois += perBatch
			}
			b.StopTimer()
			st := srv.Stats()
			b.ReportMetric(float64(dois)/b.Elapsed().Seconds(), "DOIs/s")
			b.ReportMetric(float64(st.Requests)/float64(dois), "requests/DOI")
			b.ReportMetric(float64(st.Resent), "resent")
		})
	}
}
