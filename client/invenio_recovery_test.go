package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// errCrashed is what a crashedStore answers once it has crashed.
var errCrashed = errors.New("store crashed")

// crashedStore is the real store that crashes right after the commit of a
// confirmation of a target whose name starts with after: that commit is
// durable, and nothing is written after it, as when the process is killed
// between two commits.
type crashedStore struct {
	*dedup.SQLite
	after   string
	crashed atomic.Bool
}

func (s *crashedStore) Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error) {
	if s.crashed.Load() {
		return dedup.Record{}, errCrashed
	}
	return s.SQLite.Begin(ctx, target, key, body)
}

func (s *crashedStore) Complete(ctx context.Context, target, key string, c dedup.Confirmation) (dedup.Record, error) {
	if s.crashed.Load() {
		return dedup.Record{}, errCrashed
	}
	rec, err := s.SQLite.Complete(ctx, target, key, c)
	if err == nil && strings.HasPrefix(target, s.after) {
		s.crashed.Store(true)
		return dedup.Record{}, errCrashed
	}
	return rec, err
}

// refreshIndex makes every write the stub holds searchable, as InvenioRDM
// does when a draft is deleted: it creates a draft and deletes it.
func refreshIndex(t *testing.T, s *repotest.InvenioServer) {
	t.Helper()
	do := func(method, url, body string) (*http.Response, error) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+invenioTestToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := s.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	before := len(s.Records())
	// The create may meet a drop fault, which commits it all the same.
	_, _ = do(http.MethodPost, s.API+"/records", `{"metadata":{"title":"to delete"}}`)
	recs := s.Records()
	require.Len(t, recs, before+1)
	var id string
	for _, r := range recs {
		if len(r.Identifiers) == 0 && !r.Published {
			id = r.ID
		}
	}
	require.NotEmpty(t, id)
	resp, err := do(http.MethodDelete, s.API+"/records/"+id+"/draft", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

// A draft created after its search found nothing (the index lagged past
// the settle time) is noted for a later search before its confirmation is
// committed: a process killed between the two commits still leaves the
// note, and the next run reports the duplicate the index hid.
func TestInvenioRecheckNoteIsDurableBeforeTheConfirmation(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{Faults: "nth=1:drop", IndexLag: time.Hour})
	store := openStore(t)
	tgt := Invenio{SettleTime: time.Millisecond}
	drv := Invenio{Endpoint: s.API}.mustDriver(t)
	crashing := &crashedStore{SQLite: store, after: drv.draftTarget()}
	c := invenioClient(t, s, crashing, tgt, fastRetry)
	ctx := context.Background()

	_, err := c.Deposit(ctx, invenioRecord(5))
	require.ErrorIs(t, err, errCrashed)
	require.True(t, crashing.crashed.Load(), "the run reached the crash point")
	require.Equal(t, int64(2), s.Stats().Drafts, "the dropped create and the one after the miss")

	key, err := c.Key(invenioRecord(5))
	require.NoError(t, err)
	draft, err := store.Lookup(ctx, drv.draftTarget(), key.Key)
	require.NoError(t, err)
	require.Equal(t, dedup.StateDone, draft.State, "the confirmation was committed")
	note, err := store.Lookup(ctx, drv.recheckTarget(), key.Key)
	require.NoError(t, err, "the note to search again is in the store")
	require.Equal(t, dedup.StatePending, note.State)

	refreshIndex(t, s)
	_, err = invenioClient(t, s, store, tgt, fastRetry).Deposit(ctx, invenioRecord(5))
	require.ErrorIs(t, err, ErrTerminal)
	require.ErrorContains(t, err, "2 records carry the marker")
}
