package drivertest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/drivertest"
)

// This file tests a target of its own end to end, as an author outside
// this module would: a repository that arbitrates nothing, a target for
// it written on package driver alone, and the kit.

// notebook is a repository that arbitrates nothing: POST /notes creates a
// note every time and answers {"id":N}; GET /notes?marker=M lists the ids
// of the notes carrying marker M, from a search index that lags the
// writes (drivertest.AsOf says by how much).
type notebook struct {
	mu    sync.Mutex
	notes []note
}

type note struct {
	Marker   string
	Metadata struct{ Title string }
	at       time.Time
}

func (nb *notebook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/notes":
		var n note
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil || n.Marker == "" {
			http.Error(w, "a note needs a marker", http.StatusBadRequest)
			return
		}
		n.at = time.Now()
		nb.notes = append(nb.notes, n)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"%d"}`, len(nb.notes))
	case r.Method == http.MethodGet && r.URL.Path == "/notes":
		asOf := drivertest.AsOf(r) // the index shows the notes written by then
		hits := []string{}
		for i, n := range nb.notes {
			if n.Marker == r.FormValue("marker") && !n.at.After(asOf) {
				hits = append(hits, strconv.Itoa(i+1))
			}
		}
		json.NewEncoder(w).Encode(map[string][]string{"hits": hits})
	default:
		http.NotFound(w, r)
	}
}

// titles counts the notes by title.
func (nb *notebook) titles() map[string]int {
	nb.mu.Lock()
	defer nb.mu.Unlock()
	out := map[string]int{}
	for _, n := range nb.notes {
		out[n.Metadata.Title]++
	}
	return out
}

// Notebook is the target: one step, a create the server does not
// arbitrate, so it is durable and has a check (a search by the marker the
// note carries, trusted only Settle after an ambiguous attempt).
type Notebook struct {
	Endpoint string
	Settle   time.Duration
}

func (nb Notebook) Driver() (driver.Driver, error) { return nb, nil }
func (nb Notebook) Name() string                   { return driver.TargetName("notebook", nb.Endpoint) }
func (Notebook) StepTargets() []string             { return nil }
func (Notebook) SecretFingerprint() string         { return "" }
func (Notebook) Guards(string) bool                { return false }

func (nb Notebook) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	body, err := json.Marshal(map[string]any{"marker": k.Key, "metadata": json.RawMessage(k.Body)})
	if err != nil {
		return nil, err
	}
	return []driver.Step{{
		Primary: true, Durable: true, Target: nb.Name(), Key: k.Key,
		Build: func([]string) (driver.Request, error) {
			return driver.Request{Method: http.MethodPost, URL: nb.Endpoint + "/notes", Body: body, Full: true}, nil
		},
		Judge: func(a driver.Answer) driver.Verdict {
			id, _ := driver.StringAt(a.Body, []string{"/id"})
			return driver.Verdict{Class: driver.Classify(a), ID: id}
		},
		Check: &driver.Check{
			Build: func([]string) (driver.Request, error) {
				return driver.Request{Method: http.MethodGet, URL: nb.Endpoint + "/notes?marker=" + k.Key, Full: true}, nil
			},
			Judge: func(a driver.Answer) driver.Finding {
				if a.Err != nil || a.Status != http.StatusOK {
					return driver.Finding{Kind: driver.Unknown, Class: driver.Classify(a)}
				}
				if id, ok := driver.StringAt(a.Body, []string{"/hits/0"}); ok {
					return driver.Finding{Kind: driver.Present, ID: id}
				}
				return driver.Finding{Kind: driver.Absent}
			},
			Settle: nb.Settle,
		},
	}}, nil
}

var _ driver.Driver = Notebook{}

// The Notebook target deposits each payload once through answers lost
// after the write (drop), refusals (503 with Retry-After, 500), a search
// that lags the writes by 20 ms, and two runs killed with SIGKILL at
// writes drawn from a seed, each at a write that took effect.
func TestNotebookTargetDepositsEachPayloadOnce(t *testing.T) {
	var payloads [][]byte
	for i := range 40 {
		payloads = append(payloads, fmt.Appendf(nil, `{"title":"note %d"}`, i))
	}
	payloads = append(payloads, payloads[3], payloads[7]) // repeats are one deposit

	d, err := Notebook{Endpoint: "http://127.0.0.1"}.Driver()
	require.NoError(t, err)
	require.NoError(t, drivertest.CheckDriver(d, payloads...), "the steps keep the engine's rules")

	nb := &notebook{}
	report := drivertest.Harness{
		Handler:  nb,
		Faults:   drivertest.Faults{Spec: "drop=0.1,503=0.1:retry-after=1,500=0.05", Seed: 3, Lag: 20 * time.Millisecond},
		Payloads: payloads,
		Client: func(c drivertest.Child) (client.Config, error) {
			return client.Config{Target: Notebook{Endpoint: c.Endpoint, Settle: 40 * time.Millisecond}}, nil
		},
		KillAt: drivertest.RandomKills(5, 2, 30),
		Check: func(payloads [][]byte) error {
			got := nb.titles()
			for _, p := range payloads {
				var doc struct{ Title string }
				if err := json.Unmarshal(p, &doc); err != nil {
					return err
				}
				if got[doc.Title] != 1 {
					return fmt.Errorf("%d notes of %q", got[doc.Title], doc.Title)
				}
			}
			if len(got) != 40 {
				return fmt.Errorf("%d titles on the server, want 40", len(got))
			}
			return nil
		},
	}.Run(t)
	require.Equal(t, 2, report.Kills, "both kills struck")
	require.NotZero(t, report.Stats.FaultsByKind["drop"], "answers were lost")
	t.Logf("%d runs, %d killed; server: %+v", report.Runs, report.Kills, report.Stats)
}

// brokenEnv runs TestABrokenTargetFailsTheHarness's inner test.
const brokenEnv = "DRIVERTEST_BROKEN_TARGET"

// liar is Notebook claiming what the server does not do: that it
// arbitrates the create, so an ambiguous answer is sent again unchecked.
type liar struct{ Notebook }

func (l liar) Driver() (driver.Driver, error) { return l, nil }
func (l liar) Steps(k canonical.Keyed, dir string) ([]driver.Step, error) {
	steps, err := l.Notebook.Steps(k, dir)
	for i := range steps {
		steps[i].Arbitrated = true
	}
	return steps, err
}

// The harness fails a test whose target writes twice: a Notebook that
// claims the server arbitrates its creates duplicates the notes whose
// answers were dropped, and Check says so.
func TestABrokenTargetFailsTheHarness(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		nb := &notebook{}
		drivertest.Harness{
			Handler:  nb,
			Faults:   drivertest.Faults{Spec: "drop=0.3", Seed: 3},
			Payloads: [][]byte{[]byte(`{"title":"a"}`), []byte(`{"title":"b"}`), []byte(`{"title":"c"}`), []byte(`{"title":"d"}`)},
			Client: func(c drivertest.Child) (client.Config, error) {
				return client.Config{Target: liar{Notebook{Endpoint: c.Endpoint}}}, nil
			},
			Check: func([][]byte) error {
				for title, n := range nb.titles() {
					if n != 1 {
						return fmt.Errorf("%d notes of %q", n, title)
					}
				}
				return nil
			},
		}.Run(t)
		return
	}
	out, code := runSelf(t, "^TestABrokenTargetFailsTheHarness$", brokenEnv+"=1")
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "Check says")
	require.Contains(t, out, "notes of")
}
