package client

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/repotest"
)

// chaosLines builds n payload lines: about 10% repeat an earlier line, half
// of those differing only in the ignored /created field and member order.
func chaosLines(n int) (lines [][]byte, distinct int) {
	for i := range n {
		switch {
		case i > 0 && i%20 == 0: // an exact repeat
			lines = append(lines, lines[i/2])
		case i > 0 && i%20 == 10: // the same deposit, regenerated later
			j := i - 1
			lines = append(lines, fmt.Appendf(nil, `{"size":%d.5, "created":"2026-11-30T10:%02d:00Z","creators":["Vega, A.","n%d"],"title":"Series %d \u00e9\ud83d\ude00"}`, j, i%60, j, j))
		default:
			distinct++
			lines = append(lines, fmt.Appendf(nil, `{"title":"Series %d \u00e9\ud83d\ude00","creators":["Vega, A.","n%d"],"created":"2026-11-30T09:00:00Z","size":%d.5}`, i, i, i))
		}
	}
	return lines, distinct
}

func items(lines [][]byte) iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for i, l := range lines {
			if !yield(Item{Line: int64(i + 1), Payload: l}) {
				return
			}
		}
	}
}

// TestChaos runs 3000 payloads through a repository that drops 15% of
// creates after committing them and answers 503 (10%), 429 (5%) and 500
// (5%), at concurrency 8, with at most 4 attempts per request and the default
// retry budget of 500 tokens. The batch is run again while items are
// unresolved, as a user would (at most 10 rounds). The server must end with
// exactly one record per distinct payload and every identifier must be the
// server's.
func TestChaos(t *testing.T) {
	for _, proto := range []string{protocol.Put, protocol.IdempotencyKey} {
		t.Run(proto, func(t *testing.T) {
			lines, distinct := chaosLines(3000)
			srv, err := repotest.NewServer(repotest.Config{
				Protocol:        repotest.Protocol(proto),
				Faults:          "drop=0.15,503=0.1:retry-after=1,429=0.05:retry-after=1,500=0.05",
				Seed:            7,
				DuplicateIgnore: []string{"created"},
			})
			require.NoError(t, err)
			defer srv.Close()
			store := openStore(t)
			newClient := func() *Client {
				c, err := New(Config{
					Target: targetFor(proto, srv.URL), Store: store, Ignore: []string{"/created"},
					Retry:      backoff.Policy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxAttempts: 4},
					HTTPClient: srv.Client(),
				})
				require.NoError(t, err)
				return c
			}

			final := map[int64]ItemResult{}
			rounds := 0
			for ; rounds < 10; rounds++ {
				c := newClient() // a new process, as a user re-running would start
				unresolved := 0
				sum, err := c.Run(context.Background(), items(lines), BatchOptions{Concurrency: 8, OnResult: func(r ItemResult) {
					final[r.Line] = r
					if r.Outcome == OutcomeUnresolved {
						unresolved++
					}
				}})
				require.NoError(t, err)
				require.Equal(t, len(lines), sum.Total)
				require.Equal(t, 0, sum.Failed+sum.Invalid)
				if unresolved == 0 {
					break
				}
			}
			require.Less(t, rounds, 10, "still unresolved after 10 rounds")

			st := srv.Stats()
			require.Equal(t, int64(distinct), st.Records, "one record per distinct payload")
			require.Equal(t, int64(0), st.Duplicates)
			require.Positive(t, st.FaultsByKind["drop"], "faults were injected")

			byKey := map[string]string{}
			for _, r := range srv.Records() {
				byKey[r.Key] = r.Identifier
			}
			c := newClient()
			for line, r := range final {
				require.NoError(t, r.Err, "line %d", line)
				serverKey := r.Key
				if proto == protocol.IdempotencyKey {
					serverKey = strings.Trim(driver.IdempotencyKey(mustEndpoint(srv.URL), r.Key, nil), `"`)
				}
				require.Equal(t, byKey[serverKey], r.Identifier, "line %d", line)
				require.True(t, strings.HasPrefix(r.Identifier, "10.5072/"), r.Identifier)
			}
			counts, err := store.Count(context.Background(), "")
			require.NoError(t, err)
			require.Equal(t, dedup.Counts{Done: distinct}, counts)

			// A replay of the finished batch sends nothing.
			before := srv.Stats().Requests
			sum, err := c.Run(context.Background(), items(lines), BatchOptions{Concurrency: 8})
			require.NoError(t, err)
			require.Equal(t, len(lines), sum.Replayed)
			require.Equal(t, 0, sum.Requests)
			require.Equal(t, before, srv.Stats().Requests)
			t.Logf("%s: %d rounds, server stats %+v", proto, rounds+1, st)
		})
	}
}
