package driver_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/depositkit/deposit/drivertest"
)

// chaosShelf is a Shelf repository (see Shelf) that counts what reached
// it: records per marker, publish requests per record. Its faults are
// drivertest's middleware's; its search answers as of drivertest.AsOf, so
// it lags the writes by the middleware's Lag.
type chaosShelf struct {
	mu      sync.Mutex
	records []*shelfRecord // record id i+1 is records[i]
	counts  shelfCounts
}

// shelfRecord is one record on the server and what its publish requests met.
type shelfRecord struct {
	marker, title string
	created       time.Time
	published     time.Time // zero until published
	// publishes counts publish requests that published it; again those
	// sent once it was published.
	publishes, again int
}

// shelfCounts are the requests the handler answered, by kind.
type shelfCounts struct {
	Requests, Creates, Publishes, Searches int
}

func (s *chaosShelf) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", s.create)
	mux.HandleFunc("POST /records/{id}/publish", s.publish)
	mux.HandleFunc("GET /records", s.search)
	return mux
}

func (s *chaosShelf) create(w http.ResponseWriter, r *http.Request) {
	var rec struct {
		Marker   string
		Metadata struct{ Title string }
	}
	if err := json.NewDecoder(r.Body).Decode(&rec); err != nil || rec.Marker == "" {
		http.Error(w, "a record needs a marker and metadata", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.counts.Requests++
	s.counts.Creates++
	s.records = append(s.records, &shelfRecord{marker: rec.Marker, title: rec.Metadata.Title, created: time.Now()})
	id := strconv.Itoa(len(s.records))
	s.mu.Unlock()
	answerID(w, id)
}

func (s *chaosShelf) publish(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts.Requests++
	s.counts.Publishes++
	n, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || n < 1 || n > len(s.records) {
		http.Error(w, "no such record", http.StatusNotFound)
		return
	}
	rec := s.records[n-1]
	if !rec.published.IsZero() {
		// Shelf arbitrates nothing: a second publish is answered as the
		// first was, and counted against the client.
		rec.again++
	} else {
		rec.published, rec.publishes = time.Now(), rec.publishes+1
	}
	answerID(w, r.PathValue("id"))
}

func answerID(w http.ResponseWriter, id string) {
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]string{"id": id})
}

// search finds the records of a marker (published=1: the published ones)
// as of drivertest.AsOf: the index shows nothing younger.
func (s *chaosShelf) search(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.Requests++
	s.counts.Searches++
	seen := drivertest.AsOf(r)
	hits := []string{}
	for i, rec := range s.records {
		if rec.marker != r.FormValue("marker") || rec.created.After(seen) {
			continue
		}
		if r.FormValue("published") != "" && (rec.published.IsZero() || rec.published.After(seen)) {
			continue
		}
		hits = append(hits, strconv.Itoa(i+1))
	}
	s.mu.Unlock()
	json.NewEncoder(w).Encode(map[string][]string{"hits": hits})
}

// snapshot returns copies of the records and the counts.
func (s *chaosShelf) snapshot() ([]shelfRecord, shelfCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]shelfRecord, len(s.records))
	for i, rec := range s.records {
		out[i] = *rec
	}
	return out, s.counts
}
