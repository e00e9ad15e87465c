package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/put"
)

// Another client's request holds an Idempotency-Key in flight on the
// server (IRI's lock, held 2 s) past this client's time budget: every
// answer this client gets is 409 "in flight", and it gives up. None of
// its requests ran, so its store keeps no intent, and once the other's
// record exists the next run reports it existing, as a fresh store does;
// before, the row stayed pending and the next run said created and
// recovered.
func TestAKeyAnsweredOnlyInFlightLeavesNoAttemptBehind(t *testing.T) {
	srv, err := repotest.NewServer(repotest.Config{Protocol: repotest.ProtocolIdempotencyKey, LockHold: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	body := []byte(`{"title":"held by another client"}`)

	other, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: openStore(t)})
	require.NoError(t, err)
	otherDone := make(chan error, 1)
	go func() {
		_, err := other.Deposit(context.Background(), body)
		otherDone <- err
	}()
	for srv.Stats().Requests < 1 {
		time.Sleep(time.Millisecond) // its request holds the key's lock from its arrival
	}

	store := openStore(t)
	var mu sync.Mutex
	var statuses []int
	c, err := New(Config{
		Target: idempotencykey.Target{Endpoint: srv.URL, InFlightWait: 10 * time.Millisecond},
		Store:  store,
		Retry:  backoff.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxElapsed: 100 * time.Millisecond},
		Hooks: Hooks{OnRequest: func(e RequestEvent) {
			mu.Lock()
			defer mu.Unlock()
			statuses = append(statuses, e.Status)
		}},
	})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), body)
	require.ErrorIs(t, err, ErrUnresolved)
	mu.Lock()
	require.NotEmpty(t, statuses)
	for _, s := range statuses {
		require.Equal(t, http.StatusConflict, s, "every answer said the other's request is in flight: %v", statuses)
	}
	mu.Unlock()
	_, err = store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.ErrorIs(t, err, dedup.ErrNotFound, "no request of this store's ran: no intent stays")

	require.NoError(t, <-otherDone)
	res, err = c.Deposit(context.Background(), body)
	require.NoError(t, err)
	require.Equal(t, OutcomeExisting, res.Outcome, "the other client made it")
	require.False(t, res.Recovered)

	fresh, err := New(Config{Target: idempotencykey.Target{Endpoint: srv.URL}, Store: openStore(t)})
	require.NoError(t, err)
	fres, err := fresh.Deposit(context.Background(), body)
	require.NoError(t, err)
	require.Equal(t, fres.Outcome, res.Outcome, "a fresh store says the same")
	require.Equal(t, int64(1), srv.Stats().Records)
}

// An endpoint whose TLS handshake fails (an https:// URL to a server that
// speaks plain HTTP, a certificate the client does not trust, a server
// that never answers the handshake) never received a request: before any
// answer the batch stops at once, as for a refused connection, without a
// retry, and keeps no intent. Before, each handshake error was retried as
// an ambiguous answer (516 retries) and left every row pending.
func TestATLSHandshakeThatFailsStopsTheRunAndLeavesNoIntent(t *testing.T) {
	plain, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(plain.Close)
	h, err := repotest.NewHandler(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { h.Close() })
	untrusted := httptest.NewUnstartedServer(h)
	untrusted.Config.ErrorLog = log.New(io.Discard, "", 0) // each handshake refused is logged
	untrusted.StartTLS()
	t.Cleanup(untrusted.Close)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn // accepted, never answered
		for {
			conn, err := silent.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, conn)
		}
	}()
	slowHandshake := http.DefaultTransport.(*http.Transport).Clone()
	slowHandshake.TLSHandshakeTimeout = 100 * time.Millisecond

	tests := []struct {
		name     string
		endpoint string
		http     *http.Client
	}{
		{name: "a server that speaks plain HTTP", endpoint: "https" + strings.TrimPrefix(plain.URL, "http")},
		{name: "a certificate not trusted", endpoint: untrusted.URL},
		{name: "a handshake that times out", endpoint: "https://" + silent.Addr().String(), http: &http.Client{Transport: slowHandshake}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := openStore(t)
			c, err := New(Config{Target: put.Target{Endpoint: tt.endpoint}, Store: store, HTTPClient: tt.http})
			require.NoError(t, err)
			sum, err := c.Run(context.Background(), items(chaosPayloads(200)), BatchOptions{})
			require.ErrorIs(t, err, ErrUnreachable)
			require.Equal(t, 0, sum.Retries, "no handshake is tried twice")
			n, err := store.Count(context.Background(), "")
			require.NoError(t, err)
			require.Equal(t, dedup.Counts{}, n, "no request reached the server: no intent stays")
		})
	}
}

// chaosPayloads returns n distinct payloads.
func chaosPayloads(n int) [][]byte {
	lines := make([][]byte, n)
	for i := range lines {
		lines[i] = fmt.Appendf(nil, `{"title":"record %d"}`, i)
	}
	return lines
}

// A request written to a kept-alive connection that the server closes
// unanswered is sent again by net/http on a new connection; when that
// dial is refused, the error says only that no connection was made, but
// the first write may have run. The intent stays pending: the attempt is
// uncertain. Before, the dial error alone took the intent back.
func TestARequestWrittenThenADialRefusedStaysUncertain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	served := make(chan struct{})
	go func() {
		defer close(served)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(r)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if i == 1 {
				// The second request was read whole, and may have run:
				// the server goes away without answering it.
				ln.Close()
				return
			}
			fmt.Fprintf(conn, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"id\":\"rec1\"}")
		}
	}()
	store := openStore(t)
	c, err := New(Config{Target: idempotencykey.Target{Endpoint: "http://" + ln.Addr().String()}, Store: store,
		Retry: fastRetry, EndpointOutage: -1})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), []byte(`{"n":1}`))
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(`{"n":2}`))
	<-served
	require.ErrorIs(t, err, ErrUnresolved)
	rec, err := store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.NoError(t, err, "the request written may have run: its intent stays")
	require.Equal(t, dedup.StatePending, rec.State)
}
