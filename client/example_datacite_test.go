package client_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/datacite"
)

// Mint DOIs for a small batch through a DataCite stub that drops a third of
// the answers after committing, publish each, and replay the batch: every
// line keeps its DOI and none is minted twice. Lines 2 and 3 are creates
// whose answers were dropped: the retry found the DOI taken, read it back
// and found this deposit's key in it, so they are created, not existing
// (another client's).
func Example_dataCite() {
	stub, err := repotest.NewDataCiteServer(repotest.DataCiteConfig{Faults: "drop=0.35,503=0.1", Seed: 1})
	if err != nil {
		panic(err)
	}
	defer stub.Close()
	dir, err := os.MkdirTemp("", "deposit-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	c, err := client.New(client.Config{
		Target: datacite.Target{
			Endpoint: stub.URL, // default: the DataCite test system
			Prefix:   "10.5072",
			Event:    "publish",
		},
		Store:      store,
		HTTPClient: stub.Client(),
		Rate:       -1, // default: DataCite's 2.5 requests per second
		Retry:      backoff.Policy{Base: time.Millisecond, Cap: 5 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	lines := []string{
		`{"titles":[{"title":"Reef temperature 2024"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/reef/2024"}`,
		`{"titles":[{"title":"Reef temperature 2025"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/reef/2025"}`,
		`{"titles":[{"title":"Reef salinity 2025"}],"creators":[{"name":"Ng, B."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/salinity/2025"}`,
	}
	lines = append(lines, lines[0]) // the same metadata again: the same DOI
	batch := func(yield func(client.Item) bool) {
		for i, l := range lines {
			if !yield(client.Item{Line: int64(i + 1), Payload: []byte(l)}) {
				return
			}
		}
	}
	for _, run := range []string{"first run", "replay"} {
		fmt.Println(run + ":")
		sum, err := c.Run(context.Background(), batch, client.BatchOptions{Concurrency: 1, Waiting: -1, OnResult: func(r client.ItemResult) {
			fmt.Println(" ", r.Line, r.Outcome, r.Identifier)
		}})
		if err != nil {
			panic(err)
		}
		fmt.Println("  requests:", sum.Requests)
	}
	st := stub.Stats()
	fmt.Println("DOIs minted:", st.Minted, "published:", st.Events, "dropped answers:", st.FaultsByKind["drop"])
	// Output:
	// first run:
	//   1 created 10.5072/dk-fejz-kpta-dez4-l73l
	//   2 created 10.5072/dk-jg6c-56ql-oqhx-tzim
	//   3 created 10.5072/dk-dlhu-ofhe-w4na-ny22
	//   4 replayed 10.5072/dk-fejz-kpta-dez4-l73l
	//   requests: 14
	// replay:
	//   1 replayed 10.5072/dk-fejz-kpta-dez4-l73l
	//   2 replayed 10.5072/dk-jg6c-56ql-oqhx-tzim
	//   3 replayed 10.5072/dk-dlhu-ofhe-w4na-ny22
	//   4 replayed 10.5072/dk-fejz-kpta-dez4-l73l
	//   requests: 0
	// DOIs minted: 3 published: 3 dropped answers: 4
}
