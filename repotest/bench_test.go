package repotest

import (
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func benchPut(b *testing.B, cfg Config, sameKey bool) {
	s := startServer(b, cfg)
	c := s.Client()
	if sameKey {
		if a := mustSend(b, c, "PUT", s.URL+"/k", `{"title":"bench"}`, inm, "*"); a.status != http.StatusCreated {
			b.Fatalf("status %d", a.status)
		}
	}
	want := http.StatusCreated
	if sameKey {
		want = http.StatusPreconditionFailed
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := "k"
			if !sameKey {
				key = fmt.Sprint("k", n.Add(1))
			}
			a, err := send(c, "PUT", s.URL+"/"+key, `{"title":"bench"}`, inm, "*")
			if err != nil || a.status != want {
				b.Errorf("status %d, err %v", a.status, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

func BenchmarkPutCreate(b *testing.B) { benchPut(b, Config{}, false) }

func BenchmarkPutCreateDurable(b *testing.B) {
	benchPut(b, Config{DBPath: filepath.Join(b.TempDir(), "serve.db")}, false)
}

func BenchmarkPutExisting412(b *testing.B) { benchPut(b, Config{}, true) }

func BenchmarkIdempotencyKeyHit(b *testing.B) {
	s := startServer(b, Config{Protocol: ProtocolIdempotencyKey})
	c := s.Client()
	mustSend(b, c, "POST", s.URL, `{"title":"bench"}`, ik, `"k"`)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a, err := send(c, "POST", s.URL, `{"title":"bench"}`, ik, `"k"`)
			if err != nil || a.header.Get("Idempotency-Key-Reply") != "hit" {
				b.Errorf("status %d, err %v", a.status, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
