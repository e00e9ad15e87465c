package canonical

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// record writes one research-metadata record the way people send them:
// indented, members in no particular order, some non-ASCII, numbers of
// every kind. creators and keywords set its size.
func record(i, creators, keywords int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{\n  \"title\": \"Measurements of sample %d, Zürich campaign\",\n  \"publication_year\": %d,\n", i, 2000+i%25)
	b.WriteString("  \"creators\": [")
	for c := range creators {
		if c > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "\n    {\"name\": \"Müller-%d, Anna\", \"orcid\": \"0000-0002-1825-%04d\", \"affiliation\": \"Université de Genève\"}", c, c)
	}
	b.WriteString("\n  ],\n  \"keywords\": [")
	for k := range keywords {
		if k > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "\"keyword %d\"", k)
	}
	fmt.Fprintf(&b, "],\n  \"size_gb\": %g,\n  \"open_access\": true,\n  \"embargo\": null,\n  \"checksum_ok\": false,\n  \"temperature_k\": [%g, %g, 1e-7]\n}", float64(i)*1.25, 273.15+float64(i), -0.5*float64(i))
	return b.String()
}

// benchPayloads are JSON texts of about 200 B, 2 KB and 200 KB.
func benchPayloads() []struct {
	name string
	data []byte
} {
	small := `{"title":"Sample 1","year":2024,"creators":["Müller, Anna"],"size_gb":12.5,"open":true,"doi":"10.5072/zenodo.12345","embargo":null,"keywords":["ice","core"],"n":[1,2,3]}`
	medium := record(1, 8, 20)
	var big strings.Builder
	big.WriteString("[")
	for i := 0; big.Len() < 200<<10; i++ {
		if i > 0 {
			big.WriteString(",\n")
		}
		big.WriteString(record(i, 8, 20))
	}
	big.WriteString("]")
	return []struct {
		name string
		data []byte
	}{
		{fmt.Sprintf("200B(%d)", len(small)), []byte(small)},
		{fmt.Sprintf("2KB(%d)", len(medium)), []byte(medium)},
		{fmt.Sprintf("200KB(%d)", big.Len()), []byte(big.String())},
	}
}

// BenchmarkCanonicalize compares both forms with an encoding/json
// Unmarshal+Marshal round trip of the same bytes (which sorts map keys but
// is neither canonical form).
func BenchmarkCanonicalize(b *testing.B) {
	for _, p := range benchPayloads() {
		b.Run("jcs/"+p.name, func(b *testing.B) {
			b.SetBytes(int64(len(p.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := JCS(p.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("python/"+p.name, func(b *testing.B) {
			b.SetBytes(int64(len(p.data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Python(p.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("encoding-json-roundtrip/"+p.name, func(b *testing.B) {
			b.SetBytes(int64(len(p.data)))
			b.ReportAllocs()
			for b.Loop() {
				var v any
				if err := json.Unmarshal(p.data, &v); err != nil {
					b.Fatal(err)
				}
				if _, err := json.Marshal(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKeyerKey measures key and body derivation with an ignore
// pointer that matches (two emissions and a SHA-256).
func BenchmarkKeyerKey(b *testing.B) {
	k, err := NewKeyer(FormJCS, []string{"/publication_year"})
	if err != nil {
		b.Fatal(err)
	}
	data := []byte(record(1, 8, 20))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Key(data); err != nil {
			b.Fatal(err)
		}
	}
}

// writeRandomFile writes size pseudo-random bytes to path.
func writeRandomFile(tb testing.TB, path string, size int64) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 1<<20)
	x := uint64(0x9e3779b97f4a7c15)
	for i := range block {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		block[i] = byte(x)
	}
	for written := int64(0); written < size; {
		n := min(int64(len(block)), size-written)
		if _, err := f.Write(block[:n]); err != nil {
			tb.Fatal(err)
		}
		block[0]++
		written += n
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkDatasetKey hashes a dataset of four 16 MiB files.
func BenchmarkDatasetKey(b *testing.B) {
	dir := b.TempDir()
	var files []string
	for i := range 4 {
		name := fmt.Sprintf("part-%d.bin", i)
		writeRandomFile(b, filepath.Join(dir, name), 16<<20)
		files = append(files, name)
	}
	k, err := NewKeyer(FormJCS, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4 * 16 << 20)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.DatasetKey(dir, []byte(`{"title":"x"}`), files); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDatasetKeyLargeFile hashes one file beside the machine's
// sha256sum reading the same file. The file is 64 MiB; set
// DEPOSIT_BENCH_BIG=1 to make it 1 GiB (it is written to the temporary
// folder first). B/op shows that memory does not grow with the file.
func BenchmarkDatasetKeyLargeFile(b *testing.B) {
	size := int64(64 << 20)
	if os.Getenv("DEPOSIT_BENCH_BIG") == "1" {
		size = 1 << 30
	}
	dir := b.TempDir()
	writeRandomFile(b, filepath.Join(dir, "big.bin"), size)
	k, err := NewKeyer(FormJCS, nil)
	if err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("%dMiB", size>>20)
	b.Run("DatasetKey/"+name, func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := k.DatasetKey(dir, []byte(`{}`), []string{"big.bin"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	sum, err := exec.LookPath("sha256sum")
	if err != nil {
		b.Logf("sha256sum not on PATH, no reference figure: %v", err)
		return
	}
	b.Run("sha256sum/"+name, func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			cmd := exec.Command(sum, filepath.Join(dir, "big.bin"))
			cmd.Stdout = io.Discard
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
