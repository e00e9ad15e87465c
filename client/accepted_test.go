package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// queueTarget is a target of these tests only, shaped like a repository
// that queues a deposit and settles it later (Crossref's deposit, a
// Dataverse publication): POST /deposits/{key} is answered 202 Accepted,
// and GET /status/{key} says pending, absent (404), done with the record's
// identifier, or failed. It sends no Idempotency-Key and no condition: a
// second POST would be a second deposit.
type queueTarget struct {
	endpoint string
	poll     *atomic.Int64 // the check's poll budget, as a time.Duration
	// undeclared leaves Accepts unset: a driver's mistake.
	undeclared bool
}

func (t queueTarget) Driver() (driver.Driver, error) { return t, nil }
func (t queueTarget) Name() string                   { return "test-queue " + t.endpoint }
func (queueTarget) StepTargets() []string            { return nil }
func (queueTarget) SecretFingerprint() string        { return "" }
func (queueTarget) Guards(string) bool               { return false }

func (t queueTarget) Steps(k canonical.Keyed, _ string) ([]step, error) {
	deposit := step{
		Target: t.Name(), Key: k.Key, Primary: true, Durable: true, Accepts: !t.undeclared,
		Build: func([]string) (request, error) {
			return request{Method: http.MethodPost, URL: t.endpoint + "/deposits/" + k.Key, Body: k.Body}, nil
		},
		Judge: func(a answer) verdict {
			if a.Err == nil && a.Status == http.StatusAccepted {
				return verdict{Class: driver.Accepted}
			}
			return verdict{Class: driver.Classify(a)}
		},
		Check: &check{
			Poll: time.Duration(t.poll.Load()),
			Build: func([]string) (request, error) {
				return request{Method: http.MethodGet, URL: t.endpoint + "/status/" + k.Key, Full: true}, nil
			},
			Judge: func(a answer) finding {
				if a.Err != nil {
					return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
				}
				switch body := string(a.Body); {
				case a.Status == http.StatusNotFound:
					return finding{Kind: driver.Absent}
				case a.Status != http.StatusOK:
					return finding{Kind: driver.Unknown, Class: driver.Classify(a)}
				case body == "pending":
					return finding{Kind: driver.Pending, Problem: "queued"}
				case body == "failed":
					return finding{Kind: driver.Foreign, Problem: "the queued deposit failed"}
				default:
					return finding{Kind: driver.Present, ID: body}
				}
			},
		},
	}
	return []step{deposit}, nil
}

// queueServer answers every deposit 202 Accepted and each status poll by
// its script: the next of its answers ("pending", "absent", "failed", or
// "done"), the last one repeated once the script is spent. polled, when
// set, hears of every poll before it is answered.
type queueServer struct {
	*httptest.Server
	mu     sync.Mutex
	script []string
	writes atomic.Int64
	polls  atomic.Int64
	polled chan struct{}
}

func newQueueServer(t *testing.T, script ...string) *queueServer {
	s := &queueServer{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			s.writes.Add(1)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		s.polls.Add(1)
		a, polled := s.next()
		if polled != nil {
			polled <- struct{}{}
		}
		switch a {
		case "absent":
			w.WriteHeader(http.StatusNotFound)
		case "done":
			fmt.Fprint(w, "doi:10.5072/queued-1")
		default:
			fmt.Fprint(w, a)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// next takes the script's next answer, and who hears of the poll.
func (s *queueServer) next() (string, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.script[0]
	if len(s.script) > 1 {
		s.script = s.script[1:]
	}
	return a, s.polled
}

// then replaces the script (the server's queue has moved on), and who
// hears of each poll.
func (s *queueServer) then(polled chan struct{}, script ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.polled, s.script = polled, script
}

func queueClient(t *testing.T, s *queueServer, store Store, poll time.Duration) (*Client, *atomic.Int64) {
	t.Helper()
	budget := new(atomic.Int64)
	budget.Store(int64(poll))
	c, err := New(Config{Target: queueTarget{endpoint: s.URL, poll: budget}, Store: store, Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	return c, budget
}

const queuedPayload = `{"title":"queued"}`

// A deposit answered 202 Accepted is settled by polling its check: two
// "pending" and an "absent" (not visible yet) settle nothing and send
// nothing again; "done" confirms it as created, with the identifier the
// poll found.
func TestAnAcceptedStepIsPolledUntilItSettlesAndNeverSentAgain(t *testing.T) {
	s := newQueueServer(t, "pending", "absent", "pending", "done")
	store := openStore(t)
	c, _ := queueClient(t, s, store, 0)
	res, err := c.Deposit(t.Context(), []byte(queuedPayload))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, "doi:10.5072/queued-1", res.Identifier)
	require.Equal(t, http.StatusAccepted, res.Status)
	require.Equal(t, int64(1), s.writes.Load(), "the accepted request is sent once")
	require.Equal(t, int64(4), s.polls.Load(), "polled until done")
	require.Equal(t, 5, res.Requests, "the write and every poll")
	rec, err := store.Lookup(t.Context(), c.StoreTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, rec.State)
	require.Equal(t, "doi:10.5072/queued-1", rec.Identifier)
}

// When the poll budget ends while the server still says pending, the
// deposit is unresolved and its intent stays pending; the next run polls
// before anything else and never sends the request again, and settles
// once the server has.
func TestAnAcceptedStepPastItsPollBudgetIsPolledByTheNextRunNotResent(t *testing.T) {
	s := newQueueServer(t, "pending")
	store := openStore(t)
	c, budget := queueClient(t, s, store, 50*time.Millisecond)
	res, err := c.Deposit(t.Context(), []byte(queuedPayload))
	require.ErrorIs(t, err, ErrUnresolved)
	require.NotErrorIs(t, err, ErrInterrupted)
	require.ErrorContains(t, err, "accepted, not yet settled")
	require.ErrorContains(t, err, "queued", "the last finding's problem")
	var notSettled *NotSettledError
	require.ErrorAs(t, err, &notSettled)
	require.Equal(t, "queued", notSettled.Last)
	require.GreaterOrEqual(t, notSettled.Polls, 1)
	require.Equal(t, int64(1), s.writes.Load())
	require.GreaterOrEqual(t, s.polls.Load(), int64(1), "polled within the budget")
	rec, err := store.Lookup(t.Context(), c.StoreTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State, "accepted is not done")

	// The next run: still pending at its first look and the next, then done.
	polled := s.polls.Load()
	s.then(nil, "pending", "pending", "done")
	budget.Store(0) // the retry policy's MaxElapsed
	res, err = c.Deposit(t.Context(), []byte(queuedPayload))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome, "the accepted request was this deposit's own")
	require.Equal(t, "doi:10.5072/queued-1", res.Identifier)
	require.Equal(t, int64(1), s.writes.Load(), "never sent again")
	require.Equal(t, polled+3, s.polls.Load())
	require.Equal(t, 3, res.Requests, "polls alone")
}

// A process stopped while it polls leaves the intent pending; a new client
// on the same store file polls the pending row first and confirms it with
// no write of its own.
func TestAnAcceptedStepIsSettledAfterARestartWithoutAWrite(t *testing.T) {
	s := newQueueServer(t)
	polled := make(chan struct{})
	s.then(polled, "pending")
	path := filepath.Join(t.TempDir(), "deposit.db")
	store, err := dedup.Open(path)
	require.NoError(t, err)
	c, _ := queueClient(t, s, store, 0)
	ctx, stop := context.WithCancel(t.Context())
	go func() {
		<-polled // the first poll: the request was accepted
		stop()
	}()
	res, err := c.Deposit(ctx, []byte(queuedPayload))
	require.ErrorIs(t, err, ErrInterrupted)
	require.Equal(t, int64(1), s.writes.Load())
	require.NoError(t, store.Close())

	s.then(nil, "pending", "done")
	store = openStoreAt(t, path)
	rec, err := store.Lookup(t.Context(), "test-queue "+s.URL, res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StatePending, rec.State)
	before := s.polls.Load()
	c, _ = queueClient(t, s, store, 0)
	res, err = c.Deposit(t.Context(), []byte(queuedPayload))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.Equal(t, "doi:10.5072/queued-1", res.Identifier)
	require.True(t, res.Recovered, "an earlier process's pending row")
	require.Equal(t, int64(1), s.writes.Load(), "no write after the restart")
	require.Equal(t, before+2, s.polls.Load())
}

// A poll that finds the queued deposit failed ends polling: the deposit
// is failed, recorded, and the request is not sent again.
func TestAnAcceptedStepFoundFailedWhilePolledIsTerminal(t *testing.T) {
	s := newQueueServer(t, "pending", "failed")
	store := openStore(t)
	c, _ := queueClient(t, s, store, 0)
	res, err := c.Deposit(t.Context(), []byte(queuedPayload))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "the queued deposit failed")
	require.Equal(t, int64(1), s.writes.Load())
	require.Equal(t, int64(2), s.polls.Load())
	rec, err := store.Lookup(t.Context(), c.StoreTarget(), res.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateFailed, rec.State)
}

// A judge that answers Accepted for a step that does not declare it stops
// the run: a later run would not know to poll before sending again.
func TestAnAcceptedAnswerToAStepThatDoesNotDeclareItStopsTheRun(t *testing.T) {
	s := newQueueServer(t, "done")
	c, err := New(Config{Target: queueTarget{endpoint: s.URL, poll: new(atomic.Int64), undeclared: true},
		Store: openStore(t), Retry: fastRetry, Rate: -1})
	require.NoError(t, err)
	_, err = c.Deposit(t.Context(), []byte(queuedPayload))
	require.ErrorIs(t, err, ErrStopRun)
	require.ErrorContains(t, err, "does not declare")
	require.Equal(t, int64(1), s.writes.Load())
	require.Zero(t, s.polls.Load(), "nothing is polled for a step that does not declare it")
}
