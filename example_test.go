package deposit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// Deposit a small batch against a repository that drops a third of the
// creates after committing them and answers 503 to others, then run the same
// batch again: the server holds one record per distinct payload, and the
// replay sends no request at all.
func Example() {
	srv, err := repotest.NewServer(repotest.Config{Faults: "drop=0.3,503=0.2:retry-after=1", Seed: 1})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

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
		Target: put.Target{Endpoint: srv.URL},
		Store:  store,
		Ignore: []string{"/submitted"}, // volatile: not part of the key
		Retry:  backoff.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxAttempts: 10},
	})
	if err != nil {
		panic(err)
	}
	batch := [][]byte{
		[]byte(`{"title":"Reef temperature","submitted":"09:00"}`),
		[]byte(`{"title":"Kelp cover","submitted":"09:00"}`),
		[]byte(`{"title":"Reef temperature","submitted":"09:05"}`), // same deposit, regenerated
		[]byte(`{"title":"Seagrass density","submitted":"09:00"}`),
	}
	run := func() client.Summary {
		sum, err := c.Run(context.Background(), slices.Values(items(batch)), client.BatchOptions{})
		if err != nil {
			panic(err)
		}
		return sum
	}
	first := run()
	fmt.Println("first run: unresolved", first.Unresolved, "failed", first.Failed)

	requests := srv.Stats().Requests
	replay := run()
	fmt.Println("replay: replayed", replay.Replayed, "of", replay.Total)
	fmt.Println("requests during the replay:", srv.Stats().Requests-requests)
	fmt.Println("records:", srv.Stats().Records, "duplicates:", srv.Stats().Duplicates)
	// Output:
	// first run: unresolved 0 failed 0
	// replay: replayed 4 of 4
	// requests during the replay: 0
	// records: 3 duplicates: 0
}

func items(lines [][]byte) []client.Item {
	out := make([]client.Item, len(lines))
	for i, l := range lines {
		out[i] = client.Item{Line: int64(i + 1), Payload: l}
	}
	return out
}
