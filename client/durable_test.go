package client

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
)

// durabilityStore is a SQLite store that notes, for each write, whether it
// was asked to commit durably (dedup.WithDurableCommit).
type durabilityStore struct {
	*dedup.SQLite
	mu     sync.Mutex
	writes map[string][2]int // method -> [plain, durable] calls
}

func newDurabilityStore(t *testing.T) *durabilityStore {
	return &durabilityStore{SQLite: openStore(t), writes: map[string][2]int{}}
}

func (s *durabilityStore) note(ctx context.Context, method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.writes[method]
	if dedup.DurableCommit(ctx) {
		n[1]++
	} else {
		n[0]++
	}
	s.writes[method] = n
}

func (s *durabilityStore) counts() map[string][2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][2]int{}
	for k, v := range s.writes {
		out[k] = v
	}
	return out
}

func (s *durabilityStore) Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error) {
	s.note(ctx, "Begin")
	return s.SQLite.Begin(ctx, target, key, body)
}

func (s *durabilityStore) Claim(ctx context.Context, target, key string, body []byte, lease dedup.Lease) (dedup.Record, error) {
	s.note(ctx, "Claim")
	return s.SQLite.Claim(ctx, target, key, body, lease)
}

func (s *durabilityStore) ClaimMany(ctx context.Context, lease dedup.Lease, intents []dedup.Intent) ([]dedup.Claimed, error) {
	s.note(ctx, "ClaimMany")
	return s.SQLite.ClaimMany(ctx, lease, intents)
}

func (s *durabilityStore) Complete(ctx context.Context, target, key string, c dedup.Confirmation) (dedup.Record, error) {
	s.note(ctx, "Complete")
	return s.SQLite.Complete(ctx, target, key, c)
}

func (s *durabilityStore) ConfirmMany(ctx context.Context, target string, items map[string]dedup.Confirmation) (map[string]string, error) {
	s.note(ctx, "ConfirmMany")
	return s.SQLite.ConfirmMany(ctx, target, items)
}

// The intent of every InvenioRDM step (draft, file upload, publish: none is
// arbitrated by the server) is committed durably, in a batch and in a
// single deposit; confirmations are not.
func TestInvenioIntentsAreDurable(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	store := newDurabilityStore(t)
	c := invenioClient(t, s, store, invenio.Target{}, fastRetry)
	its, sums := invenioDatasets(t, t.TempDir(), 4, 2)
	sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 4})
	require.NoError(t, err)
	require.Equal(t, len(its), sum.Created)
	requireOnePublishedEach(t, s, its, sums)
	_, err = c.Deposit(context.Background(), invenioRecord(100))
	require.NoError(t, err)

	got := store.counts()
	t.Logf("writes [plain, durable]: %v", got)
	require.Zero(t, got["Begin"][0], "a step's intent committed without durability")
	require.Positive(t, got["Begin"][1])
	require.Zero(t, got["ClaimMany"][0]+got["Claim"][0], "a deposit's claim committed without durability")
	require.Positive(t, got["ClaimMany"][1]+got["Claim"][1])
	require.Zero(t, got["Complete"][1]+got["ConfirmMany"][1], "a confirmation need not be durable")
}

// A target whose server arbitrates every request (conditional PUT) commits
// nothing durably: a lost intent costs a request answered "exists".
func TestArbitratedTargetCommitsNothingDurably(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	store := newDurabilityStore(t)
	c, err := New(Config{Target: put.Target{Endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	its := []Item{{Line: 1, Payload: []byte(`{"n":1}`)}, {Line: 2, Payload: []byte(`{"n":2}`)}, {Line: 3, Payload: []byte(`{"n":3}`)}}
	sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, 3, sum.Created)
	_, err = c.Deposit(context.Background(), []byte(`{"n":4}`))
	require.NoError(t, err)

	got := store.counts()
	t.Logf("writes [plain, durable]: %v", got)
	total := 0
	for method, n := range got {
		require.Zero(t, n[1], "%s committed durably", method)
		total += n[0]
	}
	require.Positive(t, total)
}
