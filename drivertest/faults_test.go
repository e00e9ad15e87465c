package drivertest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/repotest"
)

// ledger is a handler that arbitrates nothing: every POST adds a record,
// GET lists the records committed as of drivertest.AsOf.
type ledger struct {
	mu      sync.Mutex
	bodies  []string
	commits []time.Time
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Method == http.MethodPost {
		body, _ := io.ReadAll(r.Body)
		l.bodies = append(l.bodies, string(body))
		l.commits = append(l.commits, time.Now())
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"%d"}`, len(l.bodies))
		return
	}
	asOf := drivertest.AsOf(r)
	var seen []string
	for i, at := range l.commits {
		if !at.After(asOf) {
			seen = append(seen, l.bodies[i])
		}
	}
	fmt.Fprint(w, strings.Join(seen, ","))
}

func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bodies)
}

func serve(t *testing.T, f drivertest.Faults, h http.Handler) (*drivertest.Middleware, *httptest.Server) {
	t.Helper()
	m, err := f.Wrap(h)
	require.NoError(t, err)
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

func post(srv *httptest.Server, body string) (*http.Response, string, error) {
	resp, err := srv.Client().Post(srv.URL+"/records", "application/json", strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// A drop runs the handler, so the write takes effect, and loses its
// answer; the retry is the request's second attempt, answered.
func TestDropLosesTheAnswerOfAWriteThatTookEffect(t *testing.T) {
	l := &ledger{}
	m, srv := serve(t, drivertest.Faults{Spec: "nth=1:drop"}, l)
	_, _, err := post(srv, `{"title":"a"}`)
	require.Error(t, err, "the connection closes unanswered")
	require.Equal(t, 1, l.count(), "the write took effect")
	resp, body, err := post(srv, `{"title":"a"}`)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.JSONEq(t, `{"id":"2"}`, body, "the handler arbitrates nothing: a second record")
	_, _, err = post(srv, `{"title":"b"}`)
	require.Error(t, err, "another body is another request: its first attempt")
	st := m.Stats()
	require.Equal(t, int64(3), st.Writes)
	require.Equal(t, map[string]int64{"drop": 2}, st.FaultsByKind)
}

// A status fault answers before the handler runs: nothing took effect,
// and 429 and 503 say when to come back.
func TestStatusFaultsAnswerBeforeTheHandlerRuns(t *testing.T) {
	for spec, want := range map[string]struct {
		status     int
		retryAfter string
	}{
		"nth=1:503:retry-after=2": {http.StatusServiceUnavailable, "2"},
		"nth=1:429:retry-after=7": {http.StatusTooManyRequests, "7"},
		"nth=1:500":               {http.StatusInternalServerError, ""},
		"nth=1:reset":             {0, ""},
	} {
		t.Run(spec, func(t *testing.T) {
			l := &ledger{}
			m, srv := serve(t, drivertest.Faults{Spec: spec}, l)
			resp, body, err := post(srv, `{"title":"a"}`)
			if want.status == 0 {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				require.Equal(t, want.status, resp.StatusCode)
				require.Equal(t, want.retryAfter, resp.Header.Get("Retry-After"))
				require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
				require.Contains(t, body, "injected fault")
			}
			require.Zero(t, l.count(), "nothing took effect")
			require.Zero(t, m.Stats().Writes)
			resp, _, err = post(srv, `{"title":"a"}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
		})
	}
}

// The same seed gives each request the same fault whatever the
// concurrency: a fault is drawn from the request, not from arrival order.
func TestFaultsDependOnTheRequestNotOnArrivalOrder(t *testing.T) {
	outcomes := func(concurrency int) map[string]string {
		_, srv := serve(t, drivertest.Faults{Spec: "drop=0.3,503=0.2,500=0.1", Seed: 9}, &ledger{})
		got := map[string]string{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, concurrency)
		for i := range 200 {
			body := fmt.Sprintf(`{"n":%d}`, i)
			sem <- struct{}{}
			wg.Go(func() { // a request's attempts in order, requests at once
				defer func() { <-sem }()
				for attempt := range 2 {
					out := "dropped"
					if resp, _, err := post(srv, body); err == nil {
						out = fmt.Sprint(resp.StatusCode)
					}
					mu.Lock()
					got[fmt.Sprint(body, attempt)] = out
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return got
	}
	one := outcomes(1)
	require.Equal(t, one, outcomes(16))
	kinds := map[string]bool{}
	for _, out := range one {
		kinds[out] = true
	}
	require.Equal(t, map[string]bool{"dropped": true, "503": true, "500": true, "201": true}, kinds)
}

// A read sees the writes committed Lag before it, through AsOf; a write
// is no read, and without the middleware AsOf is now.
func TestAReadSeesTheWritesAsOfTheLag(t *testing.T) {
	l := &ledger{}
	for lag, want := range map[time.Duration]string{time.Hour: "", 0: `{"title":"a"}`} {
		_, srv := serve(t, drivertest.Faults{Lag: lag}, l)
		if l.count() == 0 {
			resp, _, err := post(srv, `{"title":"a"}`)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
		}
		resp, err := srv.Client().Get(srv.URL + "/records")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, want, string(body), "lag %v", lag)
	}
	require.WithinDuration(t, time.Now(), drivertest.AsOf(httptest.NewRequest("GET", "/", nil)), time.Hour)
}

// Faults reach reads only with the reads rule, and Read picks what reads:
// here a search sent as POST.
func TestReadsMeetFaultsOnlyWithTheReadsRule(t *testing.T) {
	isSearch := func(r *http.Request) bool { return r.URL.Path == "/search" }
	for spec, want := range map[string]int{"nth=1:503": http.StatusOK, "nth=1:503,reads": http.StatusServiceUnavailable} {
		_, srv := serve(t, drivertest.Faults{Spec: spec, Read: isSearch}, &ledger{})
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/search", nil)
		require.NoError(t, err)
		req.Method = http.MethodGet // the ledger lists on anything but POST
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, spec)
	}
}

func TestABadSpecIsRefused(t *testing.T) {
	_, err := drivertest.Faults{Spec: "drop=2"}.Wrap(&ledger{})
	require.ErrorIs(t, err, repotest.ErrFaultSpec)
}
