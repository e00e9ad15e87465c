package repotest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// race has `clients` goroutines deposit the same keys, each in its own order,
// retrying every key until it settles, and returns the identifier each client
// ended with for each key.
func race(t *testing.T, s *Server, protocol Protocol, keys []string, clients int) []map[string]string {
	t.Helper()
	got := make([]map[string]string, clients)
	var wg sync.WaitGroup
	for c := range clients {
		got[c] = map[string]string{}
		order := rand.New(rand.NewPCG(uint64(c), 1)).Perm(len(keys))
		wg.Go(func() {
			for _, i := range order {
				k := keys[i]
				body := `{"title":"` + k + `"}`
				for attempt := 0; attempt < 200; attempt++ {
					if protocol == ProtocolPut {
						a, err := send(s.Client(), "PUT", s.URL+"/"+k, body, inm, "*")
						if err == nil && a.status == http.StatusCreated {
							got[c][k] = fieldOf(t, a.body, "identifier")
							break
						}
						if err == nil && a.status == http.StatusPreconditionFailed {
							r, err := send(s.Client(), "GET", s.URL+"/"+k, "")
							if err == nil && r.status == http.StatusOK {
								got[c][k] = fieldOf(t, r.body, "identifier")
								break
							}
						}
					} else {
						a, err := send(s.Client(), "POST", s.URL, body, ik, `"`+k+`"`)
						if err == nil && a.status == http.StatusCreated {
							got[c][k] = fieldOf(t, a.body, "id")
							break
						}
						if err == nil && a.status == http.StatusConflict {
							time.Sleep(time.Millisecond)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	return got
}

func TestRacingClientsCreateExactlyOneRecordPerKey(t *testing.T) {
	keys := make([]string, 25)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
	}
	for _, tt := range []struct {
		name     string
		protocol Protocol
		durable  bool
	}{
		{"put", ProtocolPut, false},
		{"put durable", ProtocolPut, true},
		{"idempotency-key", ProtocolIdempotencyKey, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Protocol: tt.protocol, Faults: "drop=0.1,503=0.1,409=0.05,latency=1ms", Seed: 11}
			if tt.durable {
				cfg.DBPath = filepath.Join(t.TempDir(), "serve.db")
			}
			s := startServer(t, cfg)
			got := race(t, s, tt.protocol, keys, 16)

			st := s.Stats()
			require.Equal(t, int64(len(keys)), st.Records)
			require.Equal(t, int64(len(keys)), st.Creates)
			require.Equal(t, int64(0), st.Duplicates)
			ids := map[string]string{}
			for _, r := range s.Records() {
				ids[r.Key] = r.Identifier
			}
			for c := range got {
				require.Equal(t, ids, got[c], "client %d", c)
			}
			if tt.protocol == ProtocolIdempotencyKey {
				require.Positive(t, st.Conflicts+st.Replays)
			}
		})
	}
}
