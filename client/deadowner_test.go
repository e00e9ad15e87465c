package client

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
)

// deadOwnerEnv makes TestDeadOwnerHelperProcess claim a row and wait.
const deadOwnerEnv = "CLIENT_DEAD_OWNER_DB"

// TestDeadOwnerHelperProcess is not a test: it is the child process of the
// tests below. In the store CLIENT_DEAD_OWNER_DB it claims the key
// CLIENT_DEAD_OWNER_KEY under the target CLIENT_DEAD_OWNER_TARGET with a
// lease of 2 hours, as a deposit claims its primary step, then records the
// intent of the step under CLIENT_DEAD_OWNER_BEGIN, if set, as a deposit
// does before it sends that step. Its store's clock is an hour behind (the
// rows' stamps are an hour old, the lease has an hour to run). It prints
// "claimed" and waits to be killed.
func TestDeadOwnerHelperProcess(t *testing.T) {
	db := os.Getenv(deadOwnerEnv)
	if db == "" {
		return // run as a normal test: nothing to do
	}
	store, err := dedup.Open(db, dedup.WithClock(func() time.Time { return time.Now().Add(-time.Hour) }))
	if err == nil {
		lease := dedup.Lease{Owner: "a process about to be killed", TTL: 2 * time.Hour}
		key := os.Getenv("CLIENT_DEAD_OWNER_KEY")
		_, err = store.Claim(context.Background(), os.Getenv("CLIENT_DEAD_OWNER_TARGET"), key, nil, lease)
		if begin := os.Getenv("CLIENT_DEAD_OWNER_BEGIN"); err == nil && begin != "" {
			_, err = store.Begin(dedup.WithDurableCommit(context.Background()), begin, key, nil)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	fmt.Println("claimed")
	select {}
}

// claimAndDie has a child process claim key under target in the store at
// db (and begin the step under begin, if not ""), and kills it with
// SIGKILL once it has.
func claimAndDie(t *testing.T, db, target, begin, key string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadOwnerHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), deadOwnerEnv+"="+db, "CLIENT_DEAD_OWNER_TARGET="+target,
		"CLIENT_DEAD_OWNER_BEGIN="+begin, "CLIENT_DEAD_OWNER_KEY="+key)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "the child claimed its row")
	require.Equal(t, "claimed", lines.Text())
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	require.Error(t, cmd.Wait())
}

// failOnLeaseWait makes c end its deposits as soon as one starts waiting
// for another process's lease, which would last an hour here; the returned
// function fails the test if one did.
func failOnLeaseWait(t *testing.T, c *Client) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	waited := make(chan LeaseWaitEvent, 1)
	c.hooks.OnLeaseWait = func(e LeaseWaitEvent) {
		if !e.Done {
			select {
			case waited <- e:
			default:
			}
			cancel()
		}
	}
	return ctx, func() {
		t.Helper()
		select {
		case e := <-waited:
			t.Fatalf("the deposit waited for the killed process's lease until %s", e.Until)
		default:
		}
	}
}

// A single deposit looks its key up before it claims it, and parks a key
// whose lease is far from its end without asking the store. A key whose
// holder was killed is not parked: the store proves the holder dead, the
// claim takes the key over at once and the deposit settles it, recovered.
func TestADepositTakesOverAKilledProcesssKeyAtOnce(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	db := filepath.Join(t.TempDir(), "deposit.db")
	store := openStoreAt(t, db)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	payload := []byte(`{"title":"claimed by a process killed"}`)
	k, err := c.Key(payload)
	require.NoError(t, err)
	claimAndDie(t, db, c.StoreTarget(), "", k.Key)

	ctx, noWait := failOnLeaseWait(t, c)
	res, err := c.Deposit(ctx, payload)
	noWait()
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.True(t, res.Recovered, "the killed process may have sent it")
	require.EqualValues(t, 1, srv.Stats().Records)
}

// InvenioRDM arbitrates nothing. A process killed just after its draft
// request left may have that request processed by the server after another
// process took its key over. The settle time before "not found" is
// trusted is counted from the taker's first search, not from the row's
// stamp (an hour old here): a draft the server creates just after that
// search is found by the next, and adopted, not created twice.
func TestInvenioTakeoverFindsADraftCreatedAfterIt(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{IndexLag: 10 * time.Millisecond})
	db := filepath.Join(t.TempDir(), "deposit.db")
	store := openStoreAt(t, db)
	c := invenioClient(t, s, store, invenio.Target{SettleTime: 300 * time.Millisecond}, fastRetry)
	payload := invenioRecord(7)
	k, err := c.Key(payload)
	require.NoError(t, err)
	steps, err := c.stepsOf(k, source{})
	require.NoError(t, err)
	draft, err := steps[0].Build(nil)
	require.NoError(t, err)
	require.Equal(t, http.MethodPost, draft.Method)
	primary := steps[len(steps)-1]
	require.True(t, primary.Primary, "the publish is the deposit's primary step")
	// The killed process held the key (its primary step's row) and had
	// recorded the draft's intent before sending it.
	claimAndDie(t, db, primary.Target, steps[0].Target, k.Key)

	// The killed process's draft request, processed by the server only
	// once the taker's first search has found nothing.
	var late error
	gets := 0
	c.hooks.OnRequest = func(e RequestEvent) {
		if e.Method != http.MethodGet || e.Key != k.Key { // the marker search, not the store's scan
			return
		}
		if gets++; gets == 1 {
			late = postAsTheKilledProcess(s, draft)
		}
	}
	ctx, noWait := failOnLeaseWait(t, c)
	res, err := c.Deposit(ctx, payload)
	noWait()
	require.NoError(t, late)
	require.NoError(t, err)
	require.True(t, res.Recovered)
	require.Positive(t, gets, "the taker searched for the draft")
	require.Equal(t, int64(1), s.Stats().Drafts, "the late draft was adopted, not created twice")
	require.Equal(t, int64(1), s.Stats().Published)
}

// postAsTheKilledProcess sends req, a draft create, to the stub as the
// killed process would have.
func postAsTheKilledProcess(s *repotest.InvenioServer, req request) error {
	r, err := http.NewRequest(req.Method, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		return err
	}
	r.Header = req.Header.Clone()
	r.Header.Set("Authorization", "Bearer "+invenioTestToken)
	resp, err := s.Client().Do(r)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("the late draft got %s", resp.Status)
	}
	return nil
}

// The look-ahead takes over a killed process's key at once, and its claim
// may then not stand for the deposit's own (here another line of the key
// began first, and spoiled it). The deposit claims again and finds this
// process the row's last claimer; it still learns that the killed process
// claimed it before, and so reports it recovered.
func TestAKeyClaimedAheadFromAKilledProcessStaysRecovered(t *testing.T) {
	db := filepath.Join(t.TempDir(), "deposit.db")
	store := openStoreAt(t, db)
	c, err := New(Config{Target: put.Target{Endpoint: "http://127.0.0.1:1"}, Store: store})
	require.NoError(t, err)
	k := c.mustKey(t, `{"n":"claimed by a process killed"}`)
	claimAndDie(t, db, c.StoreTarget(), "", k.Key)

	var on atomic.Bool
	on.Store(true)
	b := newClaimsAhead(c, &on)
	jobs := []job{{k: &k}}
	b.claim(context.Background(), jobs)
	require.NotNil(t, jobs[0].ahead)
	require.False(t, jobs[0].ahead.got.Leased, "the killed process's lease was taken over ahead")
	const killed = "a process about to be killed"
	require.Equal(t, killed, jobs[0].ahead.got.PriorOwner)

	other := ahead{b: b} // another line of the key, with no claim made ahead
	other.began(k.Key)
	got, err := c.claim(context.Background(), dedup.Ref{Target: c.StoreTarget(), Key: k.Key}, nil, other, false)
	require.NoError(t, err)
	require.Equal(t, killed, got.PriorOwner, "the row's last claimer before this process")
	_, ok := ahead{b: b, e: jobs[0].ahead}.take()
	require.False(t, ok, "the spoiled claim made ahead is not used")
}
