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

// Articles is a target for a repository that arbitrates nothing and
// searches nothing: POST /articles creates an article every time and
// answers its numeric id; GET /articles?page=N lists the account's
// articles newest first, pageSize a page, with no total; POST
// /articles/{id}/publish publishes, and answers 400 {"code":
// "already_published"} to a second publish.
type Articles struct{ Endpoint string }

const pageSize = 2

func (t Articles) Driver() (driver.Driver, error) { return t, nil }
func (t Articles) Name() string                   { return driver.TargetName("articles", t.Endpoint) }
func (t Articles) publishTarget() string          { return driver.StepTarget(t.Name(), "publish") }
func (t Articles) StepTargets() []string          { return []string{t.publishTarget()} }
func (t Articles) SecretFingerprint() string      { return "" }
func (t Articles) Guards(string) bool             { return false }

func (t Articles) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	body, err := json.Marshal(map[string]any{"marker": k.Key, "metadata": json.RawMessage(k.Body)})
	create := driver.Step{Primary: true, Durable: true, Target: t.Name(), Key: k.Key,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: "POST", URL: t.Endpoint + "/articles", Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			id, _ := driver.StringAt(a.Body, []string{"/id"}) // {"id": 7} is "7"
			return driver.Verdict{Class: driver.Classify(a), ID: id}
		},
		Check: t.listing(k.Key, 1),
	}
	publish := driver.Step{Label: "publish", Durable: true, Target: t.publishTarget(), Key: k.Key,
		// The server refuses a second publish: arbitrated.
		Arbitrated: true,
		Build: func(prior []string) (driver.Request, error) {
			return driver.Request{Method: "POST", URL: t.Endpoint + "/articles/" + prior[0] + "/publish"}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			v := driver.Verdict{Class: driver.Classify(a)}
			if a.Status == http.StatusBadRequest && strings.Contains(driver.Problem(a.Header, a.Body), "already_published") {
				v.Class = driver.Exists // the state asked for holds
			}
			return v
		},
		// No answer names the published article: its URL, once the
		// create's id is known.
		FallbackFrom: func(prior []string) string { return t.Endpoint + "/articles/" + prior[0] },
	}
	return []driver.Step{create, publish}, err
}

// listing looks for the article carrying marker on page of the listing,
// then on the next (Finding.Then), down to the first article made before
// the create was first attempted (Answer.Since, less a minute for the
// skew between the store's clock and the server's).
func (t Articles) listing(marker string, page int) *driver.Check {
	return &driver.Check{
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: "GET", URL: t.Endpoint + "/articles?page=" + strconv.Itoa(page), Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Finding {
			var arts []struct {
				ID      int
				Marker  string
				Created time.Time
			}
			if a.Err != nil || a.Status != http.StatusOK || json.Unmarshal(a.Body, &arts) != nil {
				return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
			}
			for _, art := range arts {
				switch {
				case art.Marker == marker:
					return driver.Finding{Kind: driver.Present, ID: strconv.Itoa(art.ID)}
				case !a.Since.IsZero() && art.Created.Before(a.Since.Add(-time.Minute)):
					return driver.Finding{Kind: driver.Absent} // older than any attempt
				}
			}
			if len(arts) < pageSize {
				return driver.Finding{Kind: driver.Absent} // the last page
			}
			return driver.Finding{Then: t.listing(marker, page+1)}
		},
	}
}

// Deposit to a busy account: 6 articles of others from last year, and
// 3 more made just after the create, whose answer is lost (a 502). The
// check pages the listing to the article, without reading last year's; the
// publish's answer is lost too, and the publish sent again is refused as
// already done, which settles it.
func ExampleFinding_then() {
	type article struct {
		ID        int       `json:"id"`
		Marker    string    `json:"marker"`
		Created   time.Time `json:"created"`
		published bool
	}
	var mu sync.Mutex
	var arts []*article
	add := func(marker string, at time.Time) *article {
		a := &article{ID: len(arts) + 1, Marker: marker, Created: at}
		arts = append(arts, a)
		return a
	}
	for range 6 {
		add("another's", time.Now().AddDate(-1, 0, 0))
	}
	pages, publishes := 0, 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /articles", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Marker string }
		json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		defer mu.Unlock()
		add(in.Marker, time.Now())
		for range 3 {
			add("another's", time.Now())
		}
		w.WriteHeader(http.StatusBadGateway) // created, but the answer is lost
	})
	mux.HandleFunc("GET /articles", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		pages++
		page, _ := strconv.Atoi(r.FormValue("page"))
		out := []*article{}
		for i := len(arts) - 1 - (page-1)*pageSize; i >= 0 && len(out) < pageSize; i-- {
			out = append(out, arts[i])
		}
		json.NewEncoder(w).Encode(out)
	})
	mux.HandleFunc("POST /articles/{id}/publish", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		publishes++
		id, _ := strconv.Atoi(r.PathValue("id"))
		a := arts[id-1]
		if a.published {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"message":"the article is published","code":"already_published"}`)
			return
		}
		a.published = true
		w.WriteHeader(http.StatusBadGateway) // published, but the answer is lost
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

	tgt := Articles{Endpoint: srv.URL}
	c, err := client.New(client.Config{Target: tgt, Store: store})
	if err != nil {
		panic(err)
	}
	res, err := c.Deposit(context.Background(), []byte(`{"title":"Reef"}`))
	fmt.Println(res.Outcome, res.Identifier, err)
	rec, err := store.Lookup(context.Background(), tgt.publishTarget(), res.Key)
	fmt.Println("publish:", strings.TrimPrefix(rec.Identifier, srv.URL), rec.Outcome, err)
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("articles:", len(arts), "pages read:", pages, "publish requests:", publishes)
	// Output:
	// created 7 <nil>
	// publish: /articles/7 created <nil>
	// articles: 10 pages read: 2 publish requests: 2
}
