package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/target/s3"
	"github.com/depositkit/deposit/target/webdav"
)

// storage is a tiny storage server for the examples: it keeps what it is
// given and refuses a second create of a name with 412, as a WebDAV server
// or an S3 bucket does. S3's 200 stands in for its create status when
// status200 is set.
func storage(status200 bool) *httptest.Server {
	var mu sync.Mutex
	stored := map[string]bool{}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPut && stored[r.URL.Path]:
			w.WriteHeader(http.StatusPreconditionFailed)
		case r.Method == http.MethodPut && status200:
			stored[r.URL.Path] = true
		case r.Method == http.MethodPut:
			stored[r.URL.Path] = true
			w.WriteHeader(http.StatusCreated)
		case r.Method == http.MethodDelete:
			delete(stored, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		}
	}))
}

// Before a batch, check that the endpoint refuses a second create: the
// probe writes a record named deposit-probe-<random hex> twice, then
// deletes it.
func ExampleNewProbe() {
	srv := storage(false)
	defer srv.Close()

	p, err := client.NewProbe(client.Config{Target: webdav.Target{Endpoint: srv.URL + "/records"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.HasPrefix(p.URL, srv.URL+"/records/deposit-probe-"))
	rep, err := p.Run(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Verdict, rep.First, rep.Second, rep.Deleted)
	// Output:
	// true
	// honoured 201 412 true
}

// Deposit into an S3 bucket: the endpoint is the bucket URL, requests are
// signed with the credentials in s3.Target.AWS (the command line reads them
// from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and
// AWS_REGION). The identifier is the object's URL.
func Example_s3() {
	srv := storage(true)
	defer srv.Close()
	dir, err := os.MkdirTemp("", "deposit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	c, err := client.New(client.Config{
		Target: s3.Target{
			Endpoint: srv.URL + "/bucket",
			AWS:      s3.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", Region: "us-east-1"},
		},
		Store: store,
	})
	if err != nil {
		log.Fatal(err)
	}
	payload := []byte(`{"title":"Reef Temperature Series"}`)
	for range 2 {
		res, err := c.Deposit(context.Background(), payload)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Outcome, res.Status, res.Identifier == srv.URL+"/bucket/"+res.Key)
	}
	// Output:
	// created 200 true
	// replayed 200 true
}
