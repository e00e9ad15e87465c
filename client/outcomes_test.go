package client

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
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

// A confirmation the store cannot take (no identifier) leaves its own
// deposit unresolved, and only it: the rest of its group is recorded, and
// nothing stops the run.
func TestAnOutcomeWithoutIdentifierFailsAloneInItsGroup(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	c := &Client{store: store}
	c.log = slog.New(slog.DiscardHandler)
	outs := newOutcomes(store)
	require.NotNil(t, outs)
	keys := []string{"k1", "k2", "k3"}
	for _, k := range keys {
		_, err := store.Begin(ctx, "t", k, nil)
		require.NoError(t, err)
	}

	got := map[string]error{}
	for _, k := range keys {
		id := "id-" + k
		if k == "k2" {
			id = ""
		}
		e := &ending{c: c, ref: dedup.Ref{Target: "t", Key: k}, primary: true,
			conf: dedup.Confirmation{Outcome: dedup.OutcomeCreated, Identifier: id, Status: 202},
			res:  Result{Key: k, Identifier: id, Outcome: OutcomeCreated}}
		e.after(func(e *ending) { got[e.ref.Key] = e.err })
		outs.hand(e)
	}
	outs.wait()
	require.NoError(t, got["k1"])
	require.NoError(t, got["k3"])
	require.ErrorIs(t, got["k2"], ErrUnresolved)
	require.NotErrorIs(t, got["k2"], ErrStopRun)
	for _, k := range keys {
		rec, err := store.Lookup(ctx, "t", k)
		require.NoError(t, err)
		want := dedup.StateDone
		if k == "k2" {
			want = dedup.StatePending
		}
		require.Equal(t, want, rec.State, k)
	}
}

// A publish answer cut short (202 with a body that names no id) is
// ambiguous for its own deposit alone: the record is read back and found
// published; the five other deposits committed in the same group are done,
// and the run goes on.
func TestAPublishAnswerWithoutIdentifierIsAmbiguousForItsDepositAlone(t *testing.T) {
	s := startInvenioStub(t, repotest.InvenioConfig{})
	var publishes atomic.Int64
	target, err := url.Parse(s.URL)
	require.NoError(t, err)
	proxy := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: s.Client().Transport,
		ModifyResponse: func(resp *http.Response) error {
			if !strings.HasSuffix(resp.Request.URL.Path, "/actions/publish") || publishes.Add(1) != 3 {
				return nil
			}
			// The third publish answer: its first bytes only.
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body[:8]))
			resp.ContentLength = 8
			resp.Header.Del("Content-Length")
			return nil
		},
	})
	t.Cleanup(proxy.Close)

	c, err := New(Config{Target: invenio.Target{Endpoint: proxy.URL + "/api", SettleTime: invenioSettle, SearchRate: -1},
		Store: openStore(t), Retry: fastRetry, Rate: NoRateLimit,
		Header: http.Header{"Authorization": {"Bearer " + invenioTestToken}}})
	require.NoError(t, err)
	var its []Item
	for i := range 6 {
		its = append(its, Item{Line: int64(i + 1), Payload: invenioRecord(i)})
	}
	var results []ItemResult
	sum, err := c.Run(context.Background(), seqOf(its), BatchOptions{Concurrency: 6,
		OnResult: func(r ItemResult) { results = append(results, r) }})
	require.NoError(t, err)
	require.Equal(t, 6, sum.Created, "%+v", results)
	require.Equal(t, int64(6), s.Stats().Published)
	require.Equal(t, int64(6), s.Stats().Drafts)
	for _, r := range results {
		require.True(t, strings.HasPrefix(r.Identifier, "10.5072/"), "line %d: %q", r.Line, r.Identifier)
	}
}
