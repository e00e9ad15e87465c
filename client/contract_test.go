package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// articleServer is a repository that arbitrates nothing, as issue 40's
// outside developer met it: POST /articles creates an article every time
// and answers its numeric id; GET /articles?page=N lists them newest
// first, pageSize a page, with no total; POST /articles/{id}/publish
// publishes, and answers 400 "already published" the second time.
type articleServer struct {
	*httptest.Server
	mu       sync.Mutex
	articles []article
	// creates counts the creates; those in lost502 answer 502 after the
	// article is made, those in refused502 502 before, those in
	// conflict409 409 before.
	creates                          int
	lost502, refused502, conflict409 map[int]bool
	// garbageLists answers that many list requests 200 with a login page.
	garbageLists int
	// listings counts the list requests, publishes the publish requests.
	listings, publishes int
	// publishEmpty answers the first publish 201 with no body.
	publishEmpty bool
	// lostPublish answers the first publish 502 after publishing.
	lostPublish bool
}

type article struct {
	ID        int       `json:"id"`
	Marker    string    `json:"marker"`
	Created   time.Time `json:"created"`
	Published bool      `json:"-"`
}

const articlePageSize = 5

func newArticleServer(t *testing.T) *articleServer {
	s := &articleServer{lost502: map[int]bool{}, refused502: map[int]bool{}, conflict409: map[int]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /articles", func(w http.ResponseWriter, r *http.Request) {
		var a article
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.creates++
		switch {
		case s.refused502[s.creates]:
			w.WriteHeader(http.StatusBadGateway)
			return
		case s.conflict409[s.creates]:
			w.WriteHeader(http.StatusConflict)
			return
		}
		a.ID, a.Created = len(s.articles)+1, time.Now()
		s.articles = append(s.articles, a)
		if s.lost502[s.creates] {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, a.ID)
	})
	mux.HandleFunc("GET /articles", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.listings++
		if s.garbageLists > 0 {
			s.garbageLists--
			fmt.Fprint(w, "<html>sign in</html>")
			return
		}
		page, _ := strconv.Atoi(r.FormValue("page"))
		out := []article{}
		for i := len(s.articles) - 1 - (page-1)*articlePageSize; i >= 0 && len(out) < articlePageSize; i-- {
			out = append(out, s.articles[i])
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /articles/{id}/publish", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.publishes++
		id, _ := strconv.Atoi(r.PathValue("id"))
		if id < 1 || id > len(s.articles) {
			http.NotFound(w, r)
			return
		}
		if s.articles[id-1].Published {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"message":"already published","code":"E_PUBLISHED"}`)
			return
		}
		s.articles[id-1].Published = true
		switch {
		case s.lostPublish && s.publishes == 1:
			w.WriteHeader(http.StatusBadGateway)
		case s.publishEmpty && s.publishes == 1:
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"location":"%s/articles/%d"}`, "http://"+r.Host, id)
		}
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// addOlder adds n articles of another client, made an hour ago.
func (s *articleServer) addOlder(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.articles = append(s.articles, article{ID: len(s.articles) + 1, Marker: "other", Created: time.Now().Add(-time.Hour)})
	}
}

// articleTarget deposits to articleServer: the create, looked for by
// paging the listing (Finding.Then) down to the first article older than
// the step's first attempt (Answer.Since); then the publish, arbitrated by
// the server's refusal of a second one, whose identifier is the article's
// URL (Step.FallbackFrom). Each check answer's Since is sent on sinces.
type articleTarget struct {
	endpoint string
	sinces   chan<- time.Time
}

func (t articleTarget) Driver() (driver.Driver, error) { return t, nil }
func (t articleTarget) Name() string                   { return driver.TargetName("articles", t.endpoint) }
func (t articleTarget) StepTargets() []string          { return []string{t.Name() + " publish"} }
func (articleTarget) SecretFingerprint() string        { return "" }
func (articleTarget) Guards(string) bool               { return false }

func (t articleTarget) Steps(k canonical.Keyed, _ string) ([]step, error) {
	body, _ := json.Marshal(map[string]string{"marker": k.Key})
	create := step{Primary: true, Durable: true, Target: t.Name(), Key: k.Key,
		Build: func([]string) (request, error) {
			return request{Method: http.MethodPost, URL: t.endpoint + "/articles", Body: body, Full: true}, nil
		},
		Judge: func(a answer) verdict {
			v := verdict{Class: driver.Classify(a)}
			if a.Err == nil && a.Status == http.StatusConflict {
				v.Class = driver.Conflict
			}
			v.ID, _ = driver.StringAt(a.Body, []string{"/id"})
			return v
		},
		Check: t.listing(k.Key, 1),
	}
	publish := step{Label: "publish", Durable: true, Arbitrated: true, Target: t.Name() + " publish", Key: k.Key,
		Build: func(prior []string) (request, error) {
			return request{Method: http.MethodPost, URL: t.endpoint + "/articles/" + prior[0] + "/publish", Full: true}, nil
		},
		Judge: func(a answer) verdict {
			v := verdict{Class: driver.Classify(a)}
			var p struct{ Code, Location string }
			_ = json.Unmarshal(a.Body, &p)
			if a.Err == nil && a.Status == http.StatusBadRequest && p.Code == "E_PUBLISHED" {
				v.Class = driver.Exists // the state asked for holds
			}
			v.ID = p.Location
			return v
		},
		FallbackFrom: func(prior []string) string { return t.endpoint + "/articles/" + prior[0] },
	}
	return []step{create, publish}, nil
}

// listing looks for marker from page on, newest first.
func (t articleTarget) listing(marker string, page int) *check {
	return &check{
		Build: func([]string) (request, error) {
			return request{Method: http.MethodGet, URL: fmt.Sprintf("%s/articles?page=%d", t.endpoint, page), Full: true}, nil
		},
		Judge: func(a answer) finding {
			if t.sinces != nil {
				t.sinces <- a.Since
			}
			var arts []article
			if a.Err != nil || a.Status != http.StatusOK || json.Unmarshal(a.Body, &arts) != nil {
				// A 200 that is no page is Created to Classify: the
				// engine looks again.
				return finding{Kind: driver.Unknown, Class: driver.Classify(a), Problem: "not a page of articles"}
			}
			for _, art := range arts {
				if art.Marker == marker {
					return finding{Kind: driver.Present, ID: strconv.Itoa(art.ID)}
				}
				if !a.Since.IsZero() && art.Created.Before(a.Since) {
					return finding{Kind: driver.Absent} // older than the first attempt
				}
			}
			if len(arts) < articlePageSize {
				return finding{Kind: driver.Absent}
			}
			return finding{Then: t.listing(marker, page+1)}
		},
	}
}

func articleClient(t *testing.T, s *articleServer, store Store, tgt articleTarget, attempts int) *Client {
	t.Helper()
	tgt.endpoint = s.URL
	c, err := New(Config{Target: tgt, Store: store, Rate: -1,
		Retry: backoff.Policy{Base: time.Millisecond, Cap: 5 * time.Millisecond, MaxAttempts: attempts}})
	require.NoError(t, err)
	return c
}

// A publish whose answer names nothing falls back on the article the
// create made, an identifier no step has when the steps are built; so does
// the "already published" a publish sent again after a lost answer gets,
// which is the server refusing a second effect: arbitrated, and Exists.
func TestFallbackFromNamesWhatAnEarlierStepMade(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(*articleServer)
	}{
		{"an empty answer", func(s *articleServer) { s.publishEmpty = true }},
		{"already published after a lost answer", func(s *articleServer) { s.lostPublish = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newArticleServer(t)
			c.setup(s)
			store := openStore(t)
			cl := articleClient(t, s, store, articleTarget{}, 4)
			res, err := cl.Deposit(t.Context(), []byte(`{"title":"a"}`))
			require.NoError(t, err)
			require.Equal(t, "1", res.Identifier, "a numeric id is the article's identifier")
			key := res.Key
			rec, err := store.Lookup(t.Context(), articleTarget{endpoint: s.URL}.Name()+" publish", key)
			require.NoError(t, err)
			require.Equal(t, s.URL+"/articles/1", rec.Identifier)
			s.mu.Lock()
			defer s.mu.Unlock()
			require.Len(t, s.articles, 1)
			require.True(t, s.articles[0].Published)
		})
	}
}

// A check's answers carry when the step was first attempted: the intent's
// time as the store journaled it, in the run that sent the step and in a
// later one, so a listing newest first stops at the first older article
// instead of paging through every one. After a conflict, what the check
// looks for may be older: Since is zero, and the listing is paged through.
func TestCheckAnswersCarryTheStepsFirstAttempt(t *testing.T) {
	s := newArticleServer(t)
	s.addOlder(4 * articlePageSize)
	s.refused502[1] = true // the create took no effect, but may have
	store := openStore(t)
	sinces := make(chan time.Time, 100)
	tgt := articleTarget{sinces: sinces}

	// One attempt: the 502, then a look, then no attempt is left.
	cl := articleClient(t, s, store, tgt, 1)
	res, err := cl.Deposit(t.Context(), []byte(`{"title":"a"}`))
	require.ErrorIs(t, err, ErrUnresolved)
	require.NotEmpty(t, res.Key)
	rec, err := store.Lookup(t.Context(), articleTarget{endpoint: s.URL}.Name(), res.Key)
	require.NoError(t, err)
	require.False(t, rec.CreatedAt.IsZero())
	require.Equal(t, rec.CreatedAt, <-sinces, "the look after the 502 is told the intent's time")
	s.mu.Lock()
	require.Equal(t, 1, s.listings, "one page: its first article is older than the attempt")
	s.listings = 0
	s.mu.Unlock()

	// A later run looks before sending again: Since is still the intent's.
	cl = articleClient(t, s, store, tgt, 4)
	res, err = cl.Deposit(t.Context(), []byte(`{"title":"a"}`))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, rec.CreatedAt, <-sinces, "a later run's look is told the first run's intent")
	s.mu.Lock()
	require.Equal(t, 1, s.listings)
	require.Len(t, s.articles, 4*articlePageSize+1)
	s.listings = 0
	s.conflict409[s.creates+1] = true
	s.mu.Unlock()

	// A conflict: the check must look at everything.
	res, err = cl.Deposit(t.Context(), []byte(`{"title":"b"}`))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.True(t, (<-sinces).IsZero(), "after a conflict what the check looks for may be older than the intent")
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, 5, s.listings, "the whole listing, to its short last page")
	require.Len(t, s.articles, 4*articlePageSize+2)
}

// A 200 that is not the page a check reads (a login page, a body cut
// short) is Created to Classify, a class no look can have: the engine
// takes it as ambiguous and looks again, rather than leaving the deposit
// unresolved at once.
func TestALookAnswered200WithNoPageIsLookedAtAgain(t *testing.T) {
	s := newArticleServer(t)
	s.lost502[1] = true
	s.garbageLists = 1
	cl := articleClient(t, s, openStore(t), articleTarget{}, 4)
	res, err := cl.Deposit(t.Context(), []byte(`{"title":"a"}`))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, "1", res.Identifier)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Len(t, s.articles, 1)
	require.Equal(t, 2, s.listings, "the login page, then the page")
}
