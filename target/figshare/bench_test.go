package figshare_test

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
	"github.com/depositkit/deposit/target/figshare"
)

// BenchmarkFigshare deposits b.N articles of two files each (the first in
// three parts, the second in one) to the Figshare stub on 127.0.0.1,
// through the engine with a SQLite store, at concurrency 8 and no rate
// limit: articles/s, and the requests per article the stub received (the
// scan, looks, part reads and checks included), without faults and with
// answers lost after commit, 500s, 503s and 429s (the batch is run again
// until every article is done).
func BenchmarkFigshare(b *testing.B) {
	const part = 64 << 10
	for _, bc := range []struct{ name, faults string }{
		{"no faults", ""},
		{"faults", "drop=0.05,500=0.03,503=0.03,429=0.03"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			stub, err := repotest.NewFigshare(repotest.FigshareConfig{Faults: bc.faults, Seed: 11, PartSize: part, IndexLag: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer stub.Close()
			srv := httptest.NewServer(stub)
			defer srv.Close()
			dir := b.TempDir()
			items := benchArticles(b, dir, b.N, part)
			store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			c, err := client.New(client.Config{
				Target: figshare.Target{Endpoint: srv.URL + "/v2", SettleTime: 10 * time.Millisecond, MinPartSize: part},
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
			if s.Articles != int64(b.N) || s.Publishes != int64(b.N) || s.Completed != int64(2*b.N) || s.DuplicateMarkers != 0 || s.DuplicateFiles != 0 {
				b.Fatalf("%d articles, %d published, %d files completed for %d payloads", s.Articles, s.Publishes, s.Completed, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "articles/s")
			b.ReportMetric(float64(s.Requests)/float64(b.N), "requests/article")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchArticles writes n articles of two files each under dir: one of
// three parts of size part (the last shorter), one of a single part.
func benchArticles(b *testing.B, dir string, n int, part int) iter.Seq[client.Item] {
	big := make([]byte, 2*part+part/2)
	for i := range n {
		p := filepath.Join(dir, fmt.Sprint(i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			b.Fatal(err)
		}
		copy(big, fmt.Sprintf("article %d\n", i))
		if err := os.WriteFile(filepath.Join(p, "data.bin"), big, 0o600); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "readme.txt"), fmt.Appendf(nil, "readme of article %d\n", i), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return func(yield func(client.Item) bool) {
		for i := range n {
			ds := &client.Dataset{Dir: filepath.Join(dir, fmt.Sprint(i)), Metadata: fmt.Appendf(nil, `{"title":"Bench %d","defined_type":"dataset"}`, i), Files: []string{"data.bin", "readme.txt"}}
			if !yield(client.Item{Line: int64(i + 1), Dataset: ds}) {
				return
			}
		}
	}
}
