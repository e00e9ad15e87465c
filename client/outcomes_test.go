package client

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
)

// An outcome that loses to an earlier confirmation ends its deposit with
// the first identifier; the others in its group end as confirmed, and every
// row is done.
func TestTheOutcomeWriterKeepsTheFirstIdentifier(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	_, err := store.Complete(ctx, "t", "k1", dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "first", Status: 201})
	require.NoError(t, err)
	c := &Client{store: store}
	c.log = slog.New(slog.DiscardHandler)
	outs := newOutcomes(store)
	require.NotNil(t, outs)

	// The endings end on the writer's goroutine: what they end with is
	// checked here, once all have ended.
	got, errs := map[string]Result{}, map[string]error{}
	for _, k := range []string{"k1", "k2", "k3"} {
		e := &ending{c: c, ref: dedup.Ref{Target: "t", Key: k}, primary: true,
			conf: dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: "id-" + k, Status: 201},
			res:  Result{Key: k, Identifier: "id-" + k, Outcome: OutcomeCreated}}
		e.after(func(e *ending) {
			got[e.ref.Key], errs[e.ref.Key] = e.res, e.err
		})
		outs.hand(e)
	}
	outs.wait()
	require.Equal(t, map[string]error{"k1": nil, "k2": nil, "k3": nil}, errs)
	require.Equal(t, "first", got["k1"].Identifier)
	require.Equal(t, "id-k2", got["k2"].Identifier)
	require.Equal(t, "id-k3", got["k3"].Identifier)
	for _, k := range []string{"k1", "k2", "k3"} {
		rec, err := store.Lookup(ctx, "t", k)
		require.NoError(t, err)
		require.Equal(t, dedup.StateDone, rec.State, k)
		require.Equal(t, got[k].Identifier, rec.Identifier, k)
	}
}
