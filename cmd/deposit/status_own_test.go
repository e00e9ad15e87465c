package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
)

// notebook is a target of one's own, as a library user writes it: a
// create, then a publish whose store rows are named by the contract's
// rule for steps (driver.StepTarget).
type notebook struct{ endpoint string }

func (n notebook) Driver() (driver.Driver, error) { return n, nil }
func (n notebook) Name() string                   { return driver.TargetName("notebook", n.endpoint) }
func (n notebook) publishTarget() string          { return driver.StepTarget(n.Name(), "publish") }
func (n notebook) StepTargets() []string          { return []string{n.publishTarget()} }
func (notebook) SecretFingerprint() string        { return "" }
func (notebook) Guards(string) bool               { return false }

func (n notebook) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	judge := func(a driver.Answer) driver.Verdict {
		id, _ := driver.StringAt(a.Body, []string{"/id"})
		return driver.Verdict{Class: driver.Classify(a), ID: id}
	}
	post := func(path string) func([]string) (driver.Request, error) {
		return func(prior []string) (driver.Request, error) {
			if len(prior) > 0 {
				path = strings.ReplaceAll(path, "{id}", prior[0])
			}
			return driver.Request{Method: http.MethodPut, URL: n.endpoint + path, Full: true}, nil
		}
	}
	return []driver.Step{
		{Primary: true, Durable: true, Arbitrated: true, Target: n.Name(), Key: k.Key, Build: post("/pages/" + k.Key), Judge: judge},
		{Label: "publish", Durable: true, Arbitrated: true, Target: n.publishTarget(), Key: k.Key, Build: post("/pages/{id}/published"), Judge: judge},
	}, nil
}

// `deposit status` of a store an own target's deposits filled counts one
// deposit per payload, its publish rows as the steps they are: it counted
// every target the built-in protocols do not name as deposits ("6
// deposits" for 3).
func TestStatusCountsAnOwnTargetsDepositsNotItsSteps(t *testing.T) {
	var mu sync.Mutex
	ids := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := ids[r.URL.Path]; !ok {
			ids[r.URL.Path] = len(ids) + 1
		}
		fmt.Fprintf(w, `{"id":%d}`, ids[r.URL.Path])
	}))
	defer srv.Close()
	db := filepath.Join(t.TempDir(), "deposit.db")
	store, err := dedup.Open(db)
	require.NoError(t, err)
	c, err := client.New(client.Config{Target: notebook{endpoint: srv.URL}, Store: store})
	require.NoError(t, err)
	const n = 3
	for i := range n {
		_, err := c.Deposit(t.Context(), fmt.Appendf(nil, `{"title":"page %d"}`, i))
		require.NoError(t, err)
	}
	require.NoError(t, store.Close())

	r := deposit(t, nil, "status", "--db", db)
	require.Equal(t, exitDone, r.code, r.stderr)
	t.Logf("deposit status:\n%s", r.stdout)
	require.Contains(t, r.stdout, fmt.Sprintf("deposit.db: %d deposits: %d done, 0 failed, 0 pending\n", n, n))
	require.Contains(t, r.stdout, fmt.Sprintf("    step publish: %d done, 0 failed, 0 pending\n", n))

	r = deposit(t, nil, "status", "--db", db, "--json")
	require.Equal(t, exitDone, r.code, r.stderr)
	var got statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got), r.stdout)
	require.Equal(t, n, got.Total, "deposits")
	require.Equal(t, n, got.Steps.Total, "step rows")
	require.Len(t, got.Targets, 2)
	require.Equal(t, "deposit", got.Targets[0].Kind)
	require.Equal(t, "step", got.Targets[1].Kind)
	require.Equal(t, "publish", got.Targets[1].Step)
	require.Equal(t, got.Targets[0].Target, got.Targets[1].Of)
}
