package dataverse_test

import (
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/dataverse"
)

// BenchmarkDataverse deposits b.N datasets of two files each (one in a
// folder) to the Dataverse stub on 127.0.0.1, through the engine with a
// SQLite store, at concurrency 8: datasets/s, and the requests per dataset
// the stub received (looks, checks and polls included), without faults and
// with answers lost after commit, 500s, 503s, 429s and 504s after a
// publish (the batch is run again until every dataset is done).
func BenchmarkDataverse(b *testing.B) {
	for _, bc := range []struct{ name, faults string }{
		{"no faults", ""},
		{"faults", "drop=0.05,500=0.03,503=0.03,429=0.03,504=0.03"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv, err := repotest.NewDataverseServer(repotest.DataverseConfig{Token: token, Faults: bc.faults, Seed: 11})
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			dir := b.TempDir()
			items := benchItems(b, dir, b.N)
			store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			c, err := client.New(client.Config{
				Target: dataverse.Target{Endpoint: srv.URL, Collection: "root", Token: token, SettleTime: 10 * time.Millisecond},
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
			s := srv.Stats()
			if s.Datasets != int64(b.N) || s.Released != int64(b.N) || s.Files != int64(2*b.N) || s.DuplicateMarkers != 0 {
				b.Fatalf("%d datasets, %d released, %d files for %d payloads", s.Datasets, s.Released, s.Files, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "datasets/s")
			b.ReportMetric(float64(s.Requests)/float64(b.N), "requests/dataset")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchItems writes n datasets of two files each under dir.
func benchItems(b *testing.B, dir string, n int) iter.Seq[client.Item] {
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprint(i), "sub")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for name, p := range map[string]string{"a.csv": filepath.Join(dir, fmt.Sprint(i), "a.csv"), "b.txt": filepath.Join(sub, "b.txt")} {
			if err := os.WriteFile(p, fmt.Appendf(nil, "%s of dataset %d\n", name, i), 0o600); err != nil {
				b.Fatal(err)
			}
		}
	}
	return func(yield func(client.Item) bool) {
		for i := range n {
			ds := &client.Dataset{Dir: filepath.Join(dir, fmt.Sprint(i)), Metadata: metadata(fmt.Sprint("Bench ", i)), Files: []string{"a.csv", "sub/b.txt"}}
			if !yield(client.Item{Line: int64(i + 1), Dataset: ds}) {
				return
			}
		}
	}
}

// BenchmarkDataverseScan measures what the scan of the collection costs a
// new store: against the stub holding 1,000 datasets of which search never
// shows 13%, each round deposits one new dataset on a store that has
// scanned already and one on a fresh store (which scans first: the
// contents, one search page, a read of each dataset search does not
// show), the two alternated in order; it reports the medians of each, and
// the scan's requests and milliseconds per 1,000 datasets of the
// collection (the difference of the two). Each round adds two datasets.
func BenchmarkDataverseScan(b *testing.B) {
	const datasets = 1000
	srv, err := repotest.NewDataverseServer(repotest.DataverseConfig{Token: token, Unindexed: 0.13, Seed: 13})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	dir := b.TempDir()
	newClient := func(db string) (*client.Client, func()) {
		store, err := dedup.Open(filepath.Join(dir, db))
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.New(client.Config{
			Target: dataverse.Target{Endpoint: srv.URL, Collection: "root", Token: token, SettleTime: time.Millisecond},
			Store:  store, Rate: -1,
			Retry: backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 10, MaxElapsed: 30 * time.Second},
		})
		if err != nil {
			b.Fatal(err)
		}
		return c, func() { store.Close() }
	}
	seed, closeSeed := newClient("seed.db")
	items := func(yield func(client.Item) bool) {
		for i := range datasets {
			if !yield(client.Item{Line: int64(i + 1), Payload: metadata(fmt.Sprint("Held ", i))}) {
				return
			}
		}
	}
	if sum, err := seed.Run(b.Context(), items, client.BatchOptions{Concurrency: 8}); err != nil || sum.Created != datasets {
		b.Fatalf("%v %+v", err, sum)
	}
	closeSeed()
	scanned, closeScanned := newClient("scanned.db")
	defer closeScanned()
	if _, err := scanned.Deposit(b.Context(), metadata("Scanned before")); err != nil {
		b.Fatal(err)
	}
	type run struct {
		took     time.Duration
		requests int
	}
	var onScanned, onFresh []run
	deposit := func(c *client.Client, title string) run {
		start := time.Now()
		res, err := c.Deposit(b.Context(), metadata(title))
		if err != nil || res.Outcome != client.OutcomeCreated {
			b.Fatalf("%v %s", err, res.Outcome)
		}
		return run{time.Since(start), res.Requests}
	}
	for n := 0; b.Loop(); n++ {
		fresh, closeFresh := newClient(fmt.Sprintf("fresh%d.db", n))
		for turn := range 2 {
			if (n+turn)%2 == 0 {
				onScanned = append(onScanned, deposit(scanned, fmt.Sprint("Scanned ", n)))
			} else {
				onFresh = append(onFresh, deposit(fresh, fmt.Sprint("Fresh ", n)))
			}
		}
		closeFresh()
	}
	if s := srv.Stats(); s.DuplicateMarkers != 0 {
		b.Fatalf("%d duplicate markers", s.DuplicateMarkers)
	}
	median := func(rs []run, f func(run) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	ms := func(r run) float64 { return float64(r.took.Microseconds()) / 1000 }
	reqs := func(r run) float64 { return float64(r.requests) }
	b.ReportMetric(median(onScanned, ms), "ms/scanned-deposit")
	b.ReportMetric(median(onFresh, ms), "ms/fresh-deposit")
	b.ReportMetric(median(onScanned, reqs), "requests/scanned-deposit")
	b.ReportMetric(median(onFresh, reqs), "requests/fresh-deposit")
	b.ReportMetric((median(onFresh, reqs)-median(onScanned, reqs))/datasets*1000, "scan-requests/1000datasets")
	b.ReportMetric((median(onFresh, ms)-median(onScanned, ms))/datasets*1000, "scan-ms/1000datasets")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDataverseUpdates compares, on the stub at concurrency 8 with a
// SQLite store, creates of 50 datasets named by an identity (two files
// each) with their updates: a metadata correction (a minor version) and a
// change of one file (replaced: a major version). Each iteration is one
// round of the three batches, in that order, on a fresh server and store,
// so the kinds alternate; the metrics are the medians over the rounds
// (run with -benchtime=5x): datasets/s and requests per dataset.
func BenchmarkDataverseUpdates(b *testing.B) {
	const n = 50
	kinds := []string{"create", "minor", "major"}
	rates := map[string][]float64{}
	requests := map[string][]float64{}
	for range b.N {
		srv, err := repotest.NewDataverseServer(repotest.DataverseConfig{Token: token})
		if err != nil {
			b.Fatal(err)
		}
		dir := b.TempDir()
		store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.New(client.Config{
			Target: dataverse.Target{Endpoint: srv.URL, Collection: "root", Token: token, SettleTime: 10 * time.Millisecond},
			Store:  store, Rate: -1, Identity: []string{labID},
			Retry: backoff.Policy{Base: time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 10, MaxElapsed: 30 * time.Second},
		})
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range kinds {
			items := objectItems(b, dir, n, kind)
			before := srv.Stats().Requests
			start := time.Now()
			sum, err := c.Run(b.Context(), items, client.BatchOptions{Concurrency: 8})
			elapsed := time.Since(start)
			if err != nil || sum.Failed+sum.Unresolved > 0 {
				b.Fatalf("%s: %+v, %v", kind, sum, err)
			}
			rates[kind] = append(rates[kind], n/elapsed.Seconds())
			requests[kind] = append(requests[kind], float64(srv.Stats().Requests-before)/n)
		}
		if s := srv.Stats(); s.Minor != n || s.Major != n {
			b.Fatalf("%d minor, %d major versions for %d datasets", s.Minor, s.Major, n)
		}
		store.Close()
		srv.Close()
	}
	for _, kind := range kinds {
		b.ReportMetric(median(rates[kind]), kind+"-datasets/s")
		b.ReportMetric(median(requests[kind]), kind+"-requests/dataset")
	}
	b.ReportMetric(0, "ns/op")
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}

// objectItems writes n datasets named LAB-i under dir as the batch kind
// gives them: "create" and "minor" (a new title) with the same files,
// "major" with a.txt changed.
func objectItems(b *testing.B, dir string, n int, kind string) iter.Seq[client.Item] {
	var items []client.Item
	for i := range n {
		for name, content := range map[string]string{"a.txt": "a", "sub/b.txt": "b"} {
			if kind == "major" && name == "a.txt" {
				content = "a, measured again"
			}
			p := filepath.Join(dir, fmt.Sprint(i), filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(fmt.Sprintf("%s of %d\n", content, i)), 0o600); err != nil {
				b.Fatal(err)
			}
		}
		title := fmt.Sprintf("Survey %d", i)
		if kind != "create" {
			title += ", corrected"
		}
		items = append(items, client.Item{Line: int64(i + 1), Dataset: &client.Dataset{Dir: dir,
			Metadata: objMetadata(fmt.Sprintf("LAB-%d", i), title), Files: []string{fmt.Sprintf("%d/a.txt", i), fmt.Sprintf("%d/sub/b.txt", i)}}})
	}
	return slices.Values(items)
}
