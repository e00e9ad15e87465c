package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// clockTarget is a target of these tests only whose payloads carry a clock
// inside a string, out of an ignore pointer's reach: {"doc":"title@clock"}.
// It keys the title alone (driver.Payloader), wraps the body it sends as
// {"sent":doc}, and keeps the payload first deposited (KeepBody), the way
// Crossref's target keeps a file's own timestamp.
type clockTarget struct{ endpoint string }

func (t clockTarget) Driver() (driver.Driver, error) { return t, nil }
func (t clockTarget) Name() string                   { return "test-clock " + t.endpoint }
func (clockTarget) StepTargets() []string            { return nil }
func (clockTarget) SecretFingerprint() string        { return "" }
func (clockTarget) Guards(string) bool               { return false }

func (clockTarget) Payload(body []byte) ([]byte, []byte, error) {
	var p struct{ Doc string }
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, nil, err
	}
	title := p.Doc
	if i := strings.LastIndex(title, "@"); i >= 0 {
		title = title[:i]
	}
	keyText, err := json.Marshal(map[string]string{"doc": title})
	return body, keyText, err
}

func (t clockTarget) Steps(k canonical.Keyed, _ string) ([]step, error) {
	sent, err := json.Marshal(map[string]json.RawMessage{"sent": k.Body})
	return []step{{
		Target: t.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true, KeepBody: true,
		Build: func([]string) (request, error) {
			return request{Method: http.MethodPost, URL: t.endpoint, Body: sent}, nil
		},
		Judge:    func(a answer) verdict { return verdict{Class: driver.Classify(a)} },
		Fallback: t.endpoint + "/" + k.Key,
	}}, err
}

// A payloader's key leaves out what it says, and a deposit resumed with a
// payload that keys the same but differs (a new clock) sends the bytes of
// the payload first deposited, built again by the target, not the new one.
func TestAPayloaderKeysItsOwnTextAndAResumedDepositSendsThePayloadFirstKept(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, string(b))
		if fail {
			w.WriteHeader(http.StatusBadGateway) // taken, perhaps; the answer is lost
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	store, err := dedup.Open(filepath.Join(t.TempDir(), "deposit.db"))
	require.NoError(t, err)
	defer store.Close()
	c, err := New(Config{Target: clockTarget{endpoint: srv.URL}, Store: store,
		Retry: backoff.Policy{MaxAttempts: 1, Base: 1}})
	require.NoError(t, err)

	first, err := c.Key([]byte(`{"doc":"Reef@1"}`))
	require.NoError(t, err)
	again, err := c.Key([]byte(`{"doc": "Reef@2"}`))
	require.NoError(t, err)
	require.Equal(t, first.Key, again.Key, "the clock is left out of the key")
	require.JSONEq(t, `{"doc":"Reef@2"}`, string(again.Body), "the body is the payload's")
	other, err := c.Key([]byte(`{"doc":"Kelp@1"}`))
	require.NoError(t, err)
	require.NotEqual(t, first.Key, other.Key)

	_, err = c.Deposit(context.Background(), []byte(`{"doc":"Reef@1"}`))
	require.ErrorIs(t, err, ErrUnresolved)
	mu.Lock()
	fail = false
	mu.Unlock()
	res, err := c.Deposit(context.Background(), []byte(`{"doc":"Reef@2"}`))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, res.Outcome)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{`{"sent":{"doc":"Reef@1"}}`, `{"sent":{"doc":"Reef@1"}}`}, bodies)
}
