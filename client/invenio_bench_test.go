package client

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
)

// BenchmarkInvenio deposits b.N distinct payloads (records, or datasets of
// two files) into the InvenioRDM stub at concurrency 8, with and without
// faults at every step, unlimited or under a rate limit the client keeps
// to, and reports deposits/s and the requests per deposit (searches apart).
func BenchmarkInvenio(b *testing.B) {
	retry := backoff.Policy{Base: time.Millisecond, Cap: 50 * time.Millisecond, MaxAttempts: 10, MaxElapsed: time.Minute}
	for _, bc := range []struct {
		name   string
		files  int
		faults string
		rate   float64 // the client's; the stub allows 1.2 times as much
		// latency delays each of the stub's writes, as a remote server's
		// round trip does, under which a durable commit's sync may hide.
		latency time.Duration
	}{
		{"record/unlimited", 0, "", -1, 0},
		{"record/latency=20ms", 0, "", -1, 20 * time.Millisecond},
		{"record/faults", 0, "drop=0.1,504=0.05,500=0.05,429=0.05", -1, 0},
		{"record/rate=200", 0, "", 200, 0},
		{"dataset2/unlimited", 2, "", -1, 0},
		{"dataset2/latency=20ms", 2, "", -1, 20 * time.Millisecond},
		{"dataset2/faults", 2, "drop=0.1,504=0.05,500=0.05,429=0.05", -1, 0},
		{"dataset2/rate=200", 2, "", 200, 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := repotest.InvenioConfig{Token: invenioTestToken, Faults: bc.faults, Seed: 11, IndexLag: 5 * time.Millisecond, Latency: bc.latency}
			if bc.rate > 0 {
				cfg.Limit, cfg.SearchLimit, cfg.Window = int(bc.rate*1.2), int(bc.rate*1.2), time.Second
			}
			s, err := repotest.NewInvenioServer(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			dir := b.TempDir()
			its := make([]Item, b.N)
			for i := range its {
				its[i] = Item{Line: int64(i + 1), Payload: invenioRecord(i)}
				if bc.files > 0 {
					var names []string
					for j := range bc.files {
						name := fmt.Sprintf("%d-%d.csv", i, j)
						if err := os.WriteFile(filepath.Join(dir, name), fmt.Appendf(nil, "%d,%d\n", i, j), 0o600); err != nil {
							b.Fatal(err)
						}
						names = append(names, name)
					}
					its[i] = Item{Line: int64(i + 1), Dataset: &Dataset{Dir: dir, Metadata: invenioRecord(i), Files: names}}
				}
			}
			store := openStoreAt(b, filepath.Join(b.TempDir(), "deposit.db"))
			c, err := New(Config{Target: invenio.Target{Endpoint: s.API, SettleTime: 40 * time.Millisecond, SearchRate: -1},
				Store: store, Retry: retry, Rate: bc.rate, HTTPClient: s.Client(),
				Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			done := 0
			for round := 0; done < b.N && round < 10; round++ {
				sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 8})
				if err != nil {
					b.Fatal(err)
				}
				done = sum.Created + sum.Existing + sum.Replayed
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if done < b.N {
				b.Fatalf("%d of %d deposits unresolved after 10 rounds", b.N-done, b.N)
			}
			st := s.Stats()
			if st.Published != int64(b.N) || st.Drafts != int64(b.N) {
				b.Fatalf("%d drafts, %d published for %d deposits", st.Drafts, st.Published, b.N)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "deposits/s")
			b.ReportMetric(float64(st.Requests)/float64(b.N), "req/deposit")
			b.ReportMetric(float64(st.Searches)/float64(b.N), "searches/deposit")
			b.ReportMetric(float64(st.RateLimited), "429s")
		})
	}
}

// BenchmarkInvenioRecoveryScan measures what recovering a lost store
// costs: an account of 1,000 published records of realistic size (a
// description of about 1,000 characters) is scanned by a deposit on a new
// store, with no settle time and no client rate, so the figures are the
// scan's own: requests and milliseconds per 1,000 records, and the bytes
// read. Under invenio.SearchRate (0.45 searches/s) the scan's pages alone
// take 10/0.45 = 22 s per 1,000 records, plus SettleTime.
func BenchmarkInvenioRecoveryScan(b *testing.B) {
	const records = 1000
	s := startInvenioStub(b, repotest.InvenioConfig{})
	its := make([]Item, records)
	for i := range its {
		its[i] = Item{Line: int64(i + 1), Payload: largeRecord(i)}
	}
	seed := invenioClient(b, s, openStoreAt(b, filepath.Join(b.TempDir(), "seed.db")), invenio.Target{}, fastRetry)
	if _, err := seed.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 8}); err != nil {
		b.Fatal(err)
	}
	var requests int
	for n := 0; b.Loop(); n++ {
		c := invenioClient(b, s, openStoreAt(b, filepath.Join(b.TempDir(), fmt.Sprintf("lost%d.db", n))), invenio.Target{SettleTime: time.Nanosecond}, fastRetry)
		res, err := c.Deposit(context.Background(), its[0].Payload)
		if err != nil || res.Outcome != OutcomeReplayed {
			b.Fatalf("%v %s", err, res.Outcome)
		}
		requests += res.Requests
	}
	b.ReportMetric(float64(requests)/float64(b.N), "requests/1000records")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/1000records")
}
