package client

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// deadOwnerEnv makes TestDeadOwnerHelperProcess claim a key and wait.
const deadOwnerEnv = "CLIENT_DEAD_OWNER_DB"

// deadOwnerPayload is the payload whose key the helper claims.
var deadOwnerPayload = []byte(`{"title":"claimed by a process killed"}`)

// TestDeadOwnerHelperProcess is not a test: it is the child process of
// TestADepositTakesOverAKilledProcesssKeyAtOnce. It claims the key of
// deadOwnerPayload for the put target at CLIENT_DEAD_OWNER_URL with a
// lease of 10 minutes, prints "claimed", and waits to be killed.
func TestDeadOwnerHelperProcess(t *testing.T) {
	db := os.Getenv(deadOwnerEnv)
	if db == "" {
		return // run as a normal test: nothing to do
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	store, err := dedup.Open(db)
	if err != nil {
		fail(err)
	}
	c, err := New(Config{Target: Put{Endpoint: os.Getenv("CLIENT_DEAD_OWNER_URL")}, Store: store})
	if err != nil {
		fail(err)
	}
	k, err := c.Key(deadOwnerPayload)
	if err != nil {
		fail(err)
	}
	lease := dedup.Lease{Owner: "a process about to be killed", TTL: 10 * time.Minute}
	if _, err := store.Claim(context.Background(), c.StoreTarget(), k.Key, k.Body, lease); err != nil {
		fail(err)
	}
	fmt.Println("claimed")
	select {}
}

// A single deposit looks its key up before it claims it, and parks a key
// whose lease is far from its end without asking the store. A key whose
// holder was killed is not parked: the store proves the holder dead, the
// claim takes the key over at once and the deposit settles it, recovered,
// without waiting for 10 minutes' lease.
func TestADepositTakesOverAKilledProcesssKeyAtOnce(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	db := filepath.Join(t.TempDir(), "deposit.db")

	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadOwnerHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), deadOwnerEnv+"="+db, "CLIENT_DEAD_OWNER_URL="+srv.URL)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "the child claimed its key")
	require.Equal(t, "claimed", lines.Text())
	require.NoError(t, cmd.Process.Kill()) // SIGKILL
	require.Error(t, cmd.Wait())

	store, err := dedup.Open(db)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan LeaseWaitEvent, 1)
	c, err := New(Config{Target: Put{Endpoint: srv.URL}, Store: store, Lease: 10 * time.Minute,
		Hooks: Hooks{OnLeaseWait: func(e LeaseWaitEvent) {
			if !e.Done {
				select {
				case waited <- e:
				default:
				}
				cancel() // a wait would last 10 minutes: fail now
			}
		}}})
	require.NoError(t, err)
	res, err := c.Deposit(ctx, deadOwnerPayload)
	select {
	case e := <-waited:
		t.Fatalf("the deposit waited for the killed process's lease until %s", e.Until)
	default:
	}
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	require.True(t, res.Recovered, "the killed process may have sent it")
	require.EqualValues(t, 1, srv.Stats().Records)
}
