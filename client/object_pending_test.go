package client

import (
	"bytes"
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
)

// A process updating an object to one version dies after the server
// applied it and before its store learnt so; another process, with
// another version of the object, takes the object's lease. Its update must
// not replace the dead one's intent unread: the server's copy is then a
// version of this store's own, settled as such, not another writer's
// change. Found by the two-process chaos test of cmd/deposit
// (TestTwoProcessesWithV2AndV3EndAtV3), where one of the two ended failed.
func TestAnUpdateSettlesTheUpdateADeadProcessLeftInFlight(t *testing.T) {
	v1, v2, v3 := `{"id":"a","v":1}`, `{"id":"a","v":2}`, `{"id":"a","v":3}`
	for _, tc := range []struct {
		name          string
		killed, later string
		outcome       Outcome
		updates       int64
	}{
		// v3 took effect: v2 is older by the version pointer.
		{"a later version in flight", v3, v2, OutcomeStale, 1},
		// v2 took effect: v3 updates it, on its ETag.
		{"an earlier version in flight", v2, v3, OutcomeUpdated, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, srv := objectServer(t, repotest.Config{})
			store := openStore(t)
			c := objectClient(t, srv.URL, store, Config{VersionPointer: "/v"})
			first := deposit(t, c, v1)
			obj, err := store.LookupObject(context.Background(), c.target.Name(), first.Object)
			require.NoError(t, err)

			// The dead process's update: its intent, then the PUT the
			// server applied, whose answer nobody read.
			killed, err := c.keyPayload([]byte(tc.killed))
			require.NoError(t, err)
			_, err = store.BeginUpdate(context.Background(), c.target.Name(), first.Object, killed.Key, killed.Order)
			require.NoError(t, err)
			req, err := http.NewRequest(http.MethodPut, srv.URL+"/"+first.Object, bytes.NewReader([]byte(tc.killed)))
			require.NoError(t, err)
			req.Header.Set("If-Match", obj.Tag)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)

			res, err := c.Deposit(context.Background(), []byte(tc.later))
			require.NoError(t, err, "the server holds a version of this store's, not another writer's")
			require.Equal(t, tc.outcome, res.Outcome)
			held := map[Outcome]string{OutcomeStale: tc.killed, OutcomeUpdated: tc.later}[tc.outcome]
			require.JSONEq(t, held, recordBody(t, h))
			st := h.Stats()
			require.Equal(t, tc.updates, st.Updates)
			require.Zero(t, st.Mismatches, "the record is read before an update is sent on an ETag it may no longer have")

			now, err := store.LookupObject(context.Background(), c.target.Name(), first.Object)
			require.NoError(t, err)
			require.Empty(t, now.Pending, "no update left in flight")
			v, err := store.LookupVersion(context.Background(), c.target.Name(), first.Object, killed.Key)
			require.NoError(t, err)
			require.Equal(t, dedup.StateDone, v.State, "the dead process's version is in the history")
		})
	}
}
