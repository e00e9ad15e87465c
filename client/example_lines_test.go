package client_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// Deposit a JSON Lines file as the command line does: blank lines are
// skipped but counted, a line over the limit is reported invalid by its
// number, and so is a line that is not JSON; the others are deposited.
func ExampleLineReader() {
	srv, err := repotest.NewServer(repotest.Config{})
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
	c, err := client.New(client.Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	if err != nil {
		panic(err)
	}

	input := strings.NewReader(`{"title":"Reef temperature"}

{"title":"Kelp cover, with a title far too long for this reader's limit"}
not json
{"title":"Seagrass"}
`)
	lines := client.NewLineReader(input, 40)
	var results []client.ItemResult // in completion order
	sum, err := c.Run(context.Background(), lines.Items(), client.BatchOptions{
		OnResult: func(r client.ItemResult) { results = append(results, r) },
	})
	if err != nil {
		panic(err)
	}
	if err := lines.Err(); err != nil {
		panic(err) // the input could not be read to its end
	}
	slices.SortFunc(results, func(a, b client.ItemResult) int { return cmp.Compare(a.Line, b.Line) })
	for _, r := range results {
		if errors.Is(r.Err, client.ErrLineTooLong) {
			fmt.Printf("line %d: %s: too long\n", r.Line, r.Outcome)
			continue
		}
		fmt.Printf("line %d: %s\n", r.Line, r.Outcome)
	}
	fmt.Println(sum.Total, "items,", sum.Created, "created,", sum.Invalid, "invalid")
	// Output:
	// line 1: created
	// line 3: invalid: too long
	// line 4: invalid
	// line 5: created
	// 4 items, 2 created, 2 invalid
}
