package canonical_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/depositkit/deposit/canonical"
)

// Two texts of one payload, spelled differently, share one key.
func ExampleJCS() {
	a, err := canonical.JCS([]byte(`{"title": "Ice cores", "year": 2024, "size": 1.50}`))
	if err != nil {
		log.Fatal(err)
	}
	b, err := canonical.JCS([]byte(`{"size":15e-1,"year":2024,"title":"Ice \u0063ores"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(a))
	fmt.Println(canonical.Key(a))
	fmt.Println(canonical.Key(a) == canonical.Key(b))
	// Output:
	// {"size":1.5,"title":"Ice cores","year":2024}
	// e93318289fec24a44561660b3a5660ee2e24b06e4792656d9c7633860e0eca5b
	// true
}

// The Python form writes what Python's json.dumps(json.loads(text),
// sort_keys=True, separators=(",", ":")) writes, so a Go worker and a Python
// worker derive the same key.
func ExamplePython() {
	out, err := canonical.Python([]byte(`{"n": 1e5, "i": 12345678901234567890123, "t": "Zürich"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
	fmt.Println(canonical.Key(out))
	// Output:
	// {"i":12345678901234567890123,"n":100000.0,"t":"Z\u00fcrich"}
	// f515a80efdaef73fd93bdb8310badf693c9336a143af3a773e0c6c6e8b90d798
}

// A Keyer leaves volatile fields out of the key but keeps them in the body.
func ExampleKeyer_Key() {
	k, err := canonical.NewKeyer(canonical.FormJCS, []string{"/submitted_at"})
	if err != nil {
		log.Fatal(err)
	}
	first, err := k.Key([]byte(`{"title":"Ice cores","submitted_at":"2024-05-01T10:00:00Z"}`))
	if err != nil {
		log.Fatal(err)
	}
	retry, err := k.Key([]byte(`{"submitted_at":"2024-05-01T10:05:00Z","title":"Ice cores"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Key)
	fmt.Println(first.Key == retry.Key)
	fmt.Println(string(first.Body))
	// Output:
	// 7d48ad93f426c7658c91cdb8c5f88a9639fdf125f1ccdb7e57a023cad7873b2c
	// true
	// {"submitted_at":"2024-05-01T10:00:00Z","title":"Ice cores"}
}

// A dataset key covers the bytes of its files.
func ExampleKeyer_DatasetKey() {
	dir, err := os.MkdirTemp("", "dataset")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "cores.csv"), []byte("depth,age\n1,100\n"), 0o644); err != nil {
		log.Fatal(err)
	}
	k, err := canonical.NewKeyer(canonical.FormJCS, nil)
	if err != nil {
		log.Fatal(err)
	}
	ds, err := k.DatasetKey(dir, []byte(`{"title":"Ice cores"}`), []string{"./cores.csv"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(ds.Body))
	fmt.Println(ds.Key)
	// Output:
	// {"dataset":[{"path":"cores.csv","sha256":"bf3a57f28c42868494caf189a31c66c27cc88def5738f6b45da0ad8bb7b6332a","size":16}],"metadata":{"title":"Ice cores"}}
	// ea236fd0b0ccba1bd4102481526f3dc16c8e9166e27266fc791bba1fe2788e9a
}

// Errors name the byte offset and what is wrong.
func ExampleSyntaxError() {
	_, err := canonical.JCS([]byte(`{"doi":"10.5072/x","doi":"10.5072/y"}`))
	fmt.Println(err)
	// Output:
	// canonical: offset 19: duplicate member name "doi"
}
