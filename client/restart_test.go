package client

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/target/idempotencykey"
)

// A line regenerated after a crash (its ignored field changed) must not turn
// the retry of an uncertain Idempotency-Key request into a 422: the body
// first sent is re-sent byte for byte.
func TestIdempotencyKeyResendsTheFirstBodyAfterARestart(t *testing.T) {
	srv := newScripted(t, reply{}, reply{status: 500}, reply{status: 500}, reply{status: 201, body: `{"id":"job-1"}`})
	path := filepath.Join(t.TempDir(), "deposit.db")
	store, err := dedup.Open(path)
	require.NoError(t, err)
	once := backoff.Policy{MaxAttempts: 1}
	c, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: store, Ignore: []string{"/at"}, Retry: once})
	require.NoError(t, err)
	first, err := c.Deposit(context.Background(), []byte(`{"title":"x","at":"09:00"}`))
	require.ErrorIs(t, err, ErrUnresolved)
	require.NoError(t, store.Close())

	// A new process, the same store, the line regenerated at 09:05.
	store, err = dedup.Open(path)
	require.NoError(t, err)
	defer store.Close()
	c, err = New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: store, Ignore: []string{"/at"}, Retry: fastRetry})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(`{"at":"09:05","title":"x"}`))
	require.NoError(t, err)
	require.Equal(t, first.Key, res.Key)
	require.True(t, res.Recovered)
	require.Equal(t, "job-1", res.Identifier)

	require.Equal(t, 3, srv.writeCount())
	for i, body := range srv.bodies {
		require.Equal(t, `{"at":"09:00","title":"x"}`, string(body), "request %d", i+1)
		require.Equal(t, srv.writes[0].Header.Get("Idempotency-Key"), srv.writes[i].Header.Get("Idempotency-Key"), "request %d", i+1)
	}
}

// Resuming an uncertain item older than the server's key retention warns,
// naming the item: the server may have forgotten its Idempotency-Key.
func TestResumingPastTheRetentionWarns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deposit.db")
	twoDaysAgo := func() time.Time { return time.Now().Add(-48 * time.Hour) }
	srv := newScripted(t, reply{}, reply{status: 201, body: `{"id":"job-1"}`})

	old, err := dedup.Open(path, dedup.WithClock(twoDaysAgo))
	require.NoError(t, err)
	c, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: old})
	require.NoError(t, err)
	k, err := c.Key([]byte(payload))
	require.NoError(t, err)
	_, err = old.Begin(context.Background(), c.StoreTarget(), k.Key, k.Body)
	require.NoError(t, err)
	require.NoError(t, old.Close())

	store, err := dedup.Open(path)
	require.NoError(t, err)
	defer store.Close()
	var logs bytes.Buffer
	c, err = New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: store,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(payload))
	require.NoError(t, err)
	require.True(t, res.Recovered)
	require.Contains(t, logs.String(), "older than the server's key retention")
	require.Contains(t, logs.String(), k.Key)

	t.Run("a longer configured retention does not", func(t *testing.T) {
		// Another pending row two days old, resumed by a client told the
		// server keeps keys three days.
		logs.Reset()
		c, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL, Retention: 72 * time.Hour}, Store: store,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		other := []byte(`{"title":"another"}`)
		k2, err := c.Key(other)
		require.NoError(t, err)
		require.NoError(t, store.Close())
		old, err := dedup.Open(path, dedup.WithClock(twoDaysAgo))
		require.NoError(t, err)
		_, err = old.Begin(context.Background(), c.StoreTarget(), k2.Key, k2.Body)
		require.NoError(t, err)
		require.NoError(t, old.Close())

		store, err := dedup.Open(path)
		require.NoError(t, err)
		defer store.Close()
		c, err = New(Config{Target: idempotencykey.Target{Endpoint: srv.URL, Retention: 72 * time.Hour}, Store: store,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		require.NoError(t, err)
		res, err := c.Deposit(context.Background(), other)
		require.NoError(t, err)
		require.True(t, res.Recovered)
		require.NotContains(t, logs.String(), "retention")
	})
}
