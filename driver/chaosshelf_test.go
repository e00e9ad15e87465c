package driver_test

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// chaosShelf is a Shelf repository (see Shelf) with faults at both steps:
// a write refused before it takes effect (500, 503), a write whose answer
// is lost after it took effect (a 502, a connection dropped), a search
// that lags writes by lag, and a process killed on a request of its own
// once the server holds a given number of records or publications. It
// counts what reached it: records per marker, publish requests per record.
type chaosShelf struct {
	mu      sync.Mutex
	rnd     *rand.Rand
	faults  shelfFaults
	lag     time.Duration
	records []*shelfRecord // record id i+1 is records[i]
	counts  shelfCounts
	kills   []shelfKill
	// kill SIGKILLs the process of a worker, named by its request's
	// X-Shelf-Worker header; it returns once the signal is sent.
	kill func(worker string)
}

// shelfFaults are the shares of writes answered each way: refused before
// commit (500, 503) or answered wrongly after commit (502, dropped).
type shelfFaults struct{ refuse500, refuse503, lose502, drop float64 }

// shelfRecord is one record on the server and what its publish requests met.
type shelfRecord struct {
	marker, title string
	created       time.Time
	published     time.Time // zero until published
	// publishes counts publish requests that published it; refused those
	// refused before commit; again those sent once it was published.
	publishes, refused, again int
}

// shelfCounts are the requests the server answered, by kind.
type shelfCounts struct {
	Requests, Creates, Publishes, Searches int
	Lost, Dropped, Refused                 int // writes by fault
}

// shelfKill kills worker's process on its request of step ("create" or
// "publish") once that step's effects on the server reach at.
type shelfKill struct {
	worker, step string
	at           int
	done         bool
}

func newChaosShelf(seed uint64, faults shelfFaults, lag time.Duration, kills []shelfKill, kill func(string)) *chaosShelf {
	return &chaosShelf{rnd: rand.New(rand.NewPCG(seed, 11)), faults: faults, lag: lag, kills: kills, kill: kill}
}

func (s *chaosShelf) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /records", s.create)
	mux.HandleFunc("POST /records/{id}/publish", s.publish)
	mux.HandleFunc("GET /records", s.search)
	return mux
}

// fault is the fault for one write: "500" or "503" before commit, "502"
// or "drop" after it, "" for none. Called with mu held.
func (s *chaosShelf) fault() string {
	u, f := s.rnd.Float64(), s.faults
	switch {
	case u < f.refuse500:
		return "500"
	case u < f.refuse500+f.refuse503:
		return "503"
	case u < f.refuse500+f.refuse503+f.lose502:
		return "502"
	case u < f.refuse500+f.refuse503+f.lose502+f.drop:
		return "drop"
	}
	return ""
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
	fault := s.fault()
	if fault == "500" || fault == "503" {
		s.counts.Refused++
		s.mu.Unlock()
		s.refuse(w, fault)
		return
	}
	s.records = append(s.records, &shelfRecord{marker: rec.Marker, title: rec.Metadata.Title, created: time.Now()})
	id := strconv.Itoa(len(s.records))
	killed := s.killDue(r, "create", len(s.records))
	s.mu.Unlock()
	s.answer(w, r, killed, fault, id)
}

func (s *chaosShelf) publish(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.Requests++
	s.counts.Publishes++
	n, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || n < 1 || n > len(s.records) {
		s.mu.Unlock()
		http.Error(w, "no such record", http.StatusNotFound)
		return
	}
	rec := s.records[n-1]
	if !rec.published.IsZero() {
		// Shelf arbitrates nothing: a second publish is answered as the
		// first was, and counted against the client.
		rec.again++
		s.mu.Unlock()
		s.answer(w, r, false, "", r.PathValue("id"))
		return
	}
	fault := s.fault()
	if fault == "500" || fault == "503" {
		rec.refused++
		s.counts.Refused++
		s.mu.Unlock()
		s.refuse(w, fault)
		return
	}
	rec.published, rec.publishes = time.Now(), rec.publishes+1
	killed := s.killDue(r, "publish", s.publishedLocked())
	s.mu.Unlock()
	s.answer(w, r, killed, fault, r.PathValue("id"))
}

// refuse answers a write refused before it took effect: 500, or 503
// with Retry-After.
func (s *chaosShelf) refuse(w http.ResponseWriter, fault string) {
	if fault == "503" {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusInternalServerError)
}

// killDue kills the requesting worker's process when a kill of step is
// due at count effects; called with mu held, after the write took effect.
func (s *chaosShelf) killDue(r *http.Request, step string, count int) bool {
	worker := r.Header.Get("X-Shelf-Worker")
	for i := range s.kills {
		k := &s.kills[i]
		if !k.done && k.worker == worker && k.step == step && count >= k.at {
			k.done = true
			s.kill(worker)
			return true
		}
	}
	return false
}

// answer answers a write that took effect: not at all to a killed
// process (its connection ends with it), else as fault says.
func (s *chaosShelf) answer(w http.ResponseWriter, r *http.Request, killed bool, fault, id string) {
	switch {
	case killed:
		<-r.Context().Done()
	case fault == "502":
		s.note(func(c *shelfCounts) { c.Lost++ })
		w.WriteHeader(http.StatusBadGateway)
	case fault == "drop":
		s.note(func(c *shelfCounts) { c.Dropped++ })
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	default:
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(map[string]string{"id": id})
	}
}

func (s *chaosShelf) note(f func(*shelfCounts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.counts)
}

// search finds the records of a marker (published=1: the published ones)
// that are older than the lag: the index shows nothing younger.
func (s *chaosShelf) search(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.counts.Requests++
	s.counts.Searches++
	seen := time.Now().Add(-s.lag)
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

// publishedLocked counts the published records; called with mu held.
func (s *chaosShelf) publishedLocked() int {
	n := 0
	for _, rec := range s.records {
		if !rec.published.IsZero() {
			n++
		}
	}
	return n
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
