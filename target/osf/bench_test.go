package osf_test

import (
	"fmt"
	"iter"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/osf"
)

// BenchmarkOSF deposits b.N projects of two files each to the OSF stub
// (API v2 and WaterButler) on 127.0.0.1, through the engine with a SQLite
// store, at concurrency 8: projects/s, and the requests per project the
// stub received (the scan, looks and checks included), without faults and
// with answers lost after commit, 500s, 503s and 429s (the batch is run
// again until every project is done).
func BenchmarkOSF(b *testing.B) {
	for _, bc := range []struct{ name, faults string }{
		{"no faults", ""},
		{"faults", "drop=0.05,500=0.03,503=0.03,429=0.03"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stub, err := repotest.NewOSF(repotest.OSFConfig{Faults: bc.faults, Seed: 11})
			if err != nil {
				b.Fatal(err)
			}
			defer stub.Close()
			srv := httptest.NewServer(stub)
			defer srv.Close()
			dir := b.TempDir()
			items := benchProjects(b, dir, b.N)
			store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			c, err := client.New(client.Config{
				Target: osf.Target{Endpoint: srv.URL + "/v2", SettleTime: 10 * time.Millisecond},
				Store:  store, Rate: -1,
				Retry: backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 10, MaxElapsed: 30 * time.Second},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for round := 0; ; round++ {
				if round == 10 {
					b.Fatal("the batch never finished")
				}
				sum, err := c.Run(b.Context(), items, client.BatchOptions{Concurrency: 8})
				if err != nil {
					b.Fatal(err)
				}
				if sum.Unresolved == 0 && sum.Failed == 0 {
					break
				}
			}
			b.StopTimer()
			s := stub.Stats()
			if s.Nodes != int64(b.N) || s.Files != int64(2*b.N) || s.DuplicateMarkers != 0 || s.Versions != 0 {
				b.Fatalf("%d nodes, %d files, %d versions for %d payloads", s.Nodes, s.Files, s.Versions, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "projects/s")
			b.ReportMetric(float64(s.Requests)/float64(b.N), "requests/project")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchProjects writes n projects of two files each under dir.
func benchProjects(b *testing.B, dir string, n int) iter.Seq[client.Item] {
	for i := range n {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			b.Fatal(err)
		}
		for _, name := range []string{"a.csv", "b.txt"} {
			if err := os.WriteFile(filepath.Join(p, name), fmt.Appendf(nil, "%s of project %d\n", name, i), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	return func(yield func(client.Item) bool) {
		for i := range n {
			ds := &client.Dataset{Dir: filepath.Join(dir, fmt.Sprint(i)), Metadata: fmt.Appendf(nil, `{"title":"Bench %d"}`, i), Files: []string{"a.csv", "b.txt"}}
			if !yield(client.Item{Line: int64(i + 1), Dataset: ds}) {
				return
			}
		}
	}
}
