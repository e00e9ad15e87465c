package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/put"
)

// Deposit one payload twice: the first call creates the record, the second
// is answered from the store with the same identifier and no request.
func ExampleClient_Deposit() {
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
	payload := []byte(`{"title":"Reef temperature","creators":["Vega, A."]}`)
	first, err := c.Deposit(context.Background(), payload)
	if err != nil {
		panic(err)
	}
	again, err := c.Deposit(context.Background(), payload)
	if err != nil {
		panic(err)
	}
	fmt.Println(first.Outcome, again.Outcome, first.Identifier == again.Identifier, again.Requests)
	fmt.Println("records on the server:", srv.Stats().Records)
	// Output:
	// created replayed true 0
	// records on the server: 1
}

// Errors say what to do with an item. A validation failure is terminal: it
// is recorded with the server's problem detail and not sent again.
func ExampleHTTPError() {
	srv, err := repotest.NewServer(repotest.Config{VerifyKey: true})
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

	// An ignored field makes the key differ from sha256(body), which this
	// server refuses with 422.
	c, err := client.New(client.Config{Target: put.Target{Endpoint: srv.URL}, Store: store, Ignore: []string{"/note"}})
	if err != nil {
		panic(err)
	}
	_, err = c.Deposit(context.Background(), []byte(`{"title":"Kelp cover","note":"draft"}`))
	var herr *client.HTTPError
	fmt.Println(errors.Is(err, client.ErrTerminal), errors.As(err, &herr) && herr.StatusCode == 422)
	fmt.Println(client.OutcomeOf(err))
	// Output:
	// true true
	// failed
}
