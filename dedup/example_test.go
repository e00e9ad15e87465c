package dedup_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/depositkit/deposit/dedup"
)

// A deposit records its intent, then the server's answer; a replay finds the
// answer in the store and sends nothing.
func Example() {
	dir, err := os.MkdirTemp("", "dedup-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	ctx := context.Background()
	const target, key = "https://repo.example/records put", "5f2b9a"

	// Before the request: record the intent and the exact body.
	r, err := store.Begin(ctx, target, key, []byte(`{"title":"A"}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(r.State, r.Attempts)

	// The server answered 201 with an identifier.
	r, err = store.Complete(ctx, target, key, dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "10.5072/abc", Status: 201})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.State, r.Identifier)

	// A replay: the key is done, no request is needed.
	r, err = store.Lookup(ctx, target, key)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.State, r.Outcome, r.Identifier)

	// A later confirmation with another identifier never replaces the first.
	r, err = store.Complete(ctx, target, key, dedup.Confirmation{Outcome: dedup.OutcomeExisting, Identifier: "10.5072/xyz", Status: 200})
	fmt.Println(errors.Is(err, dedup.ErrConflict), r.Identifier)

	counts, err := store.Count(ctx, target)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", counts)
	// Output:
	// pending 1
	// done 10.5072/abc
	// done created 10.5072/abc
	// true 10.5072/abc
	// {Pending:0 Done:1 Failed:0}
}

// Open refuses a file that is not a deposit store and leaves it as it was.
func ExampleOpen_notAStore() {
	dir, err := os.MkdirTemp("", "dedup-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(path, []byte("my notes\n"), 0o644); err != nil {
		panic(err)
	}

	_, err = dedup.Open(path)
	fmt.Println(errors.Is(err, dedup.ErrNotDepositStore))
	b, _ := os.ReadFile(path)
	fmt.Printf("%q\n", b)
	// Output:
	// true
	// "my notes\n"
}
