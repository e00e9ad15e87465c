package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// listTarget is a target of these tests only, shaped like a repository
// whose search never shows some records and whose listing carries no
// metadata (Dataverse's): POST /items creates a record under an id the
// server chooses, GET /search?marker=M finds nothing, GET /items lists the
// ids newest first, and GET /items/{id} reads one record with its marker.
// Its check is a chain: the search, then the listing, then each record.
type listTarget struct {
	endpoint string
	endless  bool // a chain that never ends: a driver's mistake
}

func (t listTarget) Driver() (driver.Driver, error) { return t, nil }
func (t listTarget) Name() string                   { return "test-list " + t.endpoint }
func (listTarget) StepTargets() []string            { return nil }
func (listTarget) SecretFingerprint() string        { return "" }
func (listTarget) Guards(string) bool               { return false }

func (t listTarget) Steps(k canonical.Keyed, _ string) ([]step, error) {
	return []step{{
		Target: t.Name(), Key: k.Key, Primary: true, Durable: true,
		Build: func([]string) (request, error) {
			return request{Method: http.MethodPost, URL: t.endpoint + "/items?marker=" + k.Key, Full: true}, nil
		},
		Judge: func(a answer) verdict {
			if a.Err == nil && a.Status == http.StatusCreated {
				return verdict{Class: driver.Created, ID: string(a.Body)}
			}
			return verdict{Class: driver.Classify(a)}
		},
		Check: t.search(k.Key),
	}}, nil
}

func (t listTarget) get(path string) func([]string) (request, error) {
	return func([]string) (request, error) {
		return request{Method: http.MethodGet, URL: t.endpoint + path, Full: true}, nil
	}
}

// search misses by design here; a miss proves nothing, so it looks on.
func (t listTarget) search(marker string) *check {
	return &check{Build: t.get("/search?marker=" + marker), Judge: func(a answer) finding {
		if a.Err != nil || a.Status != http.StatusOK {
			return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
		}
		if t.endless {
			return finding{Kind: driver.Absent, Then: t.search(marker)}
		}
		return finding{Kind: driver.Absent, Then: t.listing(marker)}
	}}
}

func (t listTarget) listing(marker string) *check {
	return &check{Build: t.get("/items"), Judge: func(a answer) finding {
		var ids []string
		if a.Err != nil || a.Status != http.StatusOK || json.Unmarshal(a.Body, &ids) != nil {
			return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
		}
		return t.record(marker, ids)
	}}
}

// record reads ids[0]: the marker's record, else the next id, else absent.
func (t listTarget) record(marker string, ids []string) finding {
	if len(ids) == 0 {
		return finding{Kind: driver.Absent}
	}
	return finding{Kind: driver.Absent, Then: &check{Build: t.get("/items/" + ids[0]), Judge: func(a answer) finding {
		if a.Err != nil || a.Status != http.StatusOK {
			return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
		}
		if string(a.Body) == marker {
			return finding{Kind: driver.Present, ID: ids[0]}
		}
		return t.record(marker, ids[1:])
	}}}
}

// listServer creates records; it answers the first `drop` creates 500
// after committing them, and the first `refuse` ones 500 before.
type listServer struct {
	*httptest.Server
	mu      sync.Mutex
	markers []string // by id - 1
	drop    int
	refuse  int
	// flaky answers each read 503 the first time it is asked.
	flaky   bool
	asked   map[string]bool
	creates atomic.Int64
	reads   atomic.Int64
}

func newListServer(t *testing.T, drop int, others ...string) *listServer {
	s := &listServer{drop: drop, markers: others}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *listServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodGet && s.flaky && !s.asked[r.URL.String()] {
		if s.asked == nil {
			s.asked = map[string]bool{}
		}
		s.asked[r.URL.String()] = true
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	switch {
	case r.Method == http.MethodPost:
		s.creates.Add(1)
		if s.refuse > 0 {
			s.refuse--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		s.markers = append(s.markers, r.URL.Query().Get("marker"))
		if s.drop > 0 {
			s.drop--
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, len(s.markers))
	case r.URL.Path == "/search":
		fmt.Fprint(w, "[]")
	case r.URL.Path == "/items":
		ids := make([]string, 0, len(s.markers))
		for i := len(s.markers); i > 0; i-- {
			ids = append(ids, strconv.Itoa(i))
		}
		body, _ := json.Marshal(ids) // a []string always marshals
		w.Write(body)
	default:
		s.reads.Add(1)
		id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/items/"))
		if err != nil || id < 1 || id > len(s.markers) {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, s.markers[id-1])
	}
}

// A create answered 500 after it was committed is found by a check of
// several requests: the search misses, the listing names three records,
// and the second one read carries the deposit's marker. It is not sent
// again, and the deposit takes the id the chain found.
func TestACheckOfSeveralRequestsFindsWhatAnAmbiguousCreateMade(t *testing.T) {
	s := newListServer(t, 1, "someone-else's", "another")
	c, err := New(Config{Target: listTarget{endpoint: s.URL}, Store: openStore(t), Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	res, err := c.Deposit(t.Context(), []byte(`{"title":"listed"}`))
	require.NoError(t, err)
	require.Equal(t, int64(1), s.creates.Load(), "found, not sent again")
	require.Equal(t, "3", res.Identifier)
	require.Equal(t, int64(1), s.reads.Load(), "the newest record was ours: one read")
	require.Equal(t, 4, res.Requests, "the create, the search, the listing, one record")
}

// When the chain finds nothing (the create was answered 500 before it took
// effect), the create is sent again, once, after the chain has read every
// listed record.
func TestACheckOfSeveralRequestsThatFindsNothingLetsTheCreateBeSentAgain(t *testing.T) {
	s := newListServer(t, 0, "someone-else's", "another")
	s.refuse = 1
	c, err := New(Config{Target: listTarget{endpoint: s.URL}, Store: openStore(t), Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	res, err := c.Deposit(t.Context(), []byte(`{"title":"listed"}`))
	require.NoError(t, err)
	require.Equal(t, int64(2), s.creates.Load(), "refused, looked for, sent again")
	require.Equal(t, "3", res.Identifier)
	require.Equal(t, int64(2), s.reads.Load(), "both listed records read")
}

// A chain that never ends is the driver's mistake: the engine stops it
// and leaves the deposit unresolved, never sending the create again.
func TestACheckChainThatNeverEndsLeavesTheDepositUnresolved(t *testing.T) {
	s := newListServer(t, 1)
	c, err := New(Config{Target: listTarget{endpoint: s.URL, endless: true}, Store: openStore(t), Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	_, err = c.Deposit(t.Context(), []byte(`{"title":"listed"}`))
	require.ErrorIs(t, err, ErrUnresolved)
	require.ErrorContains(t, err, "looked 1000 times")
	require.Equal(t, int64(1), s.creates.Load())
}

// Each request of a chain has the attempt limit of its own: five looks
// each answered 503 once (five failed attempts, more than the limit of
// four) still settle the check, and the write keeps its own attempts.
func TestEachLookOfACheckIsRetriedWithinItsOwnAttempts(t *testing.T) {
	s := newListServer(t, 0, "someone-else's", "another")
	s.refuse, s.flaky = 1, true
	c, err := New(Config{Target: listTarget{endpoint: s.URL}, Store: openStore(t), Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	res, err := c.Deposit(t.Context(), []byte(`{"title":"listed"}`))
	require.NoError(t, err)
	require.Equal(t, "3", res.Identifier)
	require.Equal(t, int64(2), s.creates.Load(), "refused, looked for through four 503s, sent again")
	require.Equal(t, 2+2*4, res.Requests, "two writes; search, listing and two reads, each twice")
}
