package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// Shelf is a target written outside package client, for a repository that
// arbitrates nothing: POST /records creates a record carrying a marker,
// POST /records/{id}/publish publishes it, GET /records?marker=M finds it
// (published=1: once published). Its search may lag its writes by up to
// Settle.
type Shelf struct {
	Endpoint string
	Settle   time.Duration
}

func (s Shelf) Driver() (driver.Driver, error) { return s, nil }
func (s Shelf) Name() string                   { return driver.TargetName("shelf", s.Endpoint) }
func (s Shelf) StepTargets() []string          { return []string{s.publishTarget()} }
func (s Shelf) publishTarget() string          { return driver.StepTarget(s.Name(), "publish") }
func (s Shelf) SecretFingerprint() string      { return "" }
func (s Shelf) Guards(string) bool             { return false }

func (s Shelf) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	body, err := json.Marshal(map[string]any{"marker": k.Key, "metadata": json.RawMessage(k.Body)})
	create := driver.Step{Primary: true, Durable: true, Target: s.Name(), Key: k.Key,
		Build: s.request("POST", "/records", body), Judge: judgeID,
		Check: &driver.Check{Build: s.request("GET", "/records?marker="+k.Key, nil), Judge: found,
			Settle: s.Settle}}
	publish := driver.Step{Label: "publish", Durable: true, Target: s.publishTarget(), Key: k.Key,
		Build: s.request("POST", "/records/{id}/publish", nil), Judge: judgeID,
		Check: &driver.Check{Build: s.request("GET", "/records?published=1&marker="+k.Key, nil), Judge: found,
			Settle: s.Settle}}
	return []driver.Step{create, publish}, err
}

// request builds a request to path, in which {id} stands for the record's
// id: the identifier of the first step.
func (s Shelf) request(method, path string, body []byte) func([]string) (driver.Request, error) {
	return func(prior []string) (driver.Request, error) {
		url := s.Endpoint + path
		if len(prior) > 0 {
			url = strings.ReplaceAll(url, "{id}", prior[0])
		}
		return driver.Request{Method: method, URL: url, Body: body, Full: true}, nil
	}
}

func judgeID(a driver.Answer) driver.Verdict {
	id, _ := driver.StringAt(a.Body, []string{"/id"})
	return driver.Verdict{Class: driver.Classify(a), ID: id}
}

// found judges a search: a page whose first hit names an id is present.
func found(a driver.Answer) driver.Finding {
	if a.Err != nil || a.Status != http.StatusOK {
		return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
	}
	if id, ok := driver.StringAt(a.Body, []string{"/hits/0"}); ok {
		return driver.Finding{Kind: driver.Present, ID: id}
	}
	return driver.Finding{Kind: driver.Absent}
}

// Deposit two payloads to a repository that loses its answers to the first
// create and the first publish after they took effect (a 502): the
// searches find both, nothing is sent twice, and a replay of both payloads
// is answered from the store.
func Example() {
	var mu sync.Mutex
	markers, published, publishes := []string{}, map[string]bool{}, 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", func(w http.ResponseWriter, r *http.Request) {
		var rec struct{ Marker string }
		if err := json.NewDecoder(r.Body).Decode(&rec); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		markers = append(markers, rec.Marker)
		if len(markers) == 1 {
			w.WriteHeader(http.StatusBadGateway) // created, but the answer is lost
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"%d"}`, len(markers))
	})
	mux.HandleFunc("GET /records", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		hits := []string{}
		for i, m := range markers {
			if m == r.FormValue("marker") && (r.FormValue("published") == "" || published[strconv.Itoa(i+1)]) {
				hits = append(hits, strconv.Itoa(i+1))
			}
		}
		json.NewEncoder(w).Encode(map[string][]string{"hits": hits})
	})
	mux.HandleFunc("POST /records/{id}/publish", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		published[r.PathValue("id")] = true
		if publishes++; publishes == 1 {
			w.WriteHeader(http.StatusBadGateway) // published, but the answer is lost
			return
		}
		fmt.Fprintf(w, `{"id":%q}`, r.PathValue("id"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	dir, err := os.MkdirTemp("", "driver-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	store, err := dedup.Open(filepath.Join(dir, "deposit.db"))
	if err != nil {
		panic(err)
	}
	defer store.Close()

	c, err := client.New(client.Config{Target: Shelf{Endpoint: srv.URL}, Store: store})
	if err != nil {
		panic(err)
	}
	for range 2 {
		for _, p := range []string{`{"title":"Reef"}`, `{"title":"Kelp"}`} {
			res, err := c.Deposit(context.Background(), []byte(p))
			fmt.Println(res.Outcome, res.Identifier, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("records:", len(markers), "published:", len(published), "publish requests:", publishes)
	// Output:
	// created 1 <nil>
	// created 2 <nil>
	// replayed 1 <nil>
	// replayed 2 <nil>
	// records: 2 published: 2 publish requests: 2
}
