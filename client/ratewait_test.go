package client

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
)

// RateWait names the limit in force, the target's default included, and
// counts the time requests queued for it: deposits sent at once to a fast
// server under a rate of 4 a second wait 0.25 s, 0.5 s, ... for their turn.
func TestRateWaitCountsTheQueueForTheClientsOwnLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target Target
		rate   float64
		want   float64
	}{
		{"unlimited", put.Target{}, NoRateLimit, 0},
		{"put's default is unlimited", put.Target{}, 0, 0},
		{"--rate", put.Target{}, 10, 10},
		{"invenio's default", invenio.Target{}, 0, invenio.Rate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Target: withEndpoint(tc.target, "http://127.0.0.1:1"), Store: openStore(t), Rate: tc.rate})
			require.NoError(t, err)
			got, waited := c.RateWait()
			require.Equal(t, tc.want, got)
			require.Zero(t, waited, "nothing sent yet")
		})
	}

	srv, err := repotest.NewServer(repotest.Config{})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	c, err := New(Config{Target: targetFor(protocol.Put, srv.URL), Store: openStore(t), Rate: 4, HTTPClient: srv.Client()})
	require.NoError(t, err)
	const n = 5
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Deposit(context.Background(), fmt.Appendf(nil, `{"n":%d}`, i))
			errs <- err
		}()
	}
	for range n {
		require.NoError(t, <-errs)
	}
	_, waited := c.RateWait()
	// The limiter lets one request through at once and one every 0.25 s
	// after it: the last four together waited 0.25 + 0.5 + 0.75 + 1 s,
	// less the time between their arrivals (goroutines started at once).
	require.Greater(t, waited.Seconds(), 1.25, "the queue for the limit is counted")
}

// withEndpoint is target with its endpoint set.
func withEndpoint(target Target, endpoint string) Target {
	switch t := target.(type) {
	case put.Target:
		t.Endpoint = endpoint
		return t
	case invenio.Target:
		t.Endpoint = endpoint
		return t
	}
	panic(fmt.Sprintf("withEndpoint: %T", target))
}
