package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/invenio"
)

// validSteps is a two-step deposit that keeps every rule: a draft the
// server does not arbitrate (checked), then the primary publish.
func validSteps() []step {
	build := func([]string) (request, error) {
		return request{Method: http.MethodPost, URL: "http://127.0.0.1/x"}, nil
	}
	judge := func(answer) verdict { return verdict{Class: driver.Created} }
	found := &check{Build: build, Judge: func(answer) finding { return finding{Kind: driver.Absent} }}
	return []step{
		{Label: "draft", Target: "t-draft", Key: "k", Durable: true, RecordID: true, Check: found, Recheck: "t-recheck", Build: build, Judge: judge},
		{Target: "t", Key: "k", Primary: true, Durable: true, Arbitrated: true, KeepBody: true, Build: build, Judge: judge},
	}
}

func TestCheckStepsNamesTheRuleABrokenListBreaks(t *testing.T) {
	require.NoError(t, checkSteps(validSteps()))
	accepting := validSteps()
	accepting[0].Accepts = true
	require.NoError(t, checkSteps(accepting), "a durable step with a check may be accepted")
	tests := []struct {
		name   string
		mutate func([]step) []step
		rule   string
	}{
		{"no steps", func([]step) []step { return nil }, "none"},
		{"no primary", func(s []step) []step { s[1].Primary, s[1].KeepBody = false, false; s[1].Label = "publish"; return s }, "no primary step"},
		{"two primaries", func(s []step) []step { s[0].Primary = true; return s }, "are both primary"},
		{"a primary that is not durable", func(s []step) []step { s[1].Durable = false; return s }, "primary but not durable"},
		{"keepBody on another step", func(s []step) []step { s[0].KeepBody = true; return s }, "keeps its body but is not primary"},
		{"a step without a label", func(s []step) []step { s[0].Label = ""; return s }, "has no label"},
		{"no build", func(s []step) []step { s[0].Build = nil; return s }, "needs both build and judge"},
		{"no judge", func(s []step) []step { s[1].Judge = nil; return s }, "needs both build and judge"},
		{"durable without a row", func(s []step) []step { s[0].Target = ""; return s }, "without a store row"},
		{"two steps on one row", func(s []step) []step { s[0].Target = s[1].Target; return s }, "share one store row"},
		{"neither durable nor arbitrated", func(s []step) []step { s[0].Durable, s[0].RecordID = false, false; return s }, "neither durable nor arbitrated"},
		{"unarbitrated without a check", func(s []step) []step { s[0].Check, s[0].Recheck = nil, ""; return s }, "no check"},
		{"a recheck without a check", func(s []step) []step { s[1].Recheck = "t-recheck"; return s }, "recheck row"},
		{"accepted without a check", func(s []step) []step { s[1].Accepts = true; return s }, "may be accepted to settle later but has no check"},
		{"accepted but not durable", func(s []step) []step {
			s[0].Accepts, s[0].Durable, s[0].Arbitrated, s[0].RecordID, s[0].Recheck = true, false, true, false, ""
			return s
		}, "or is not durable"},
		{"a record id not durable", func(s []step) []step { s[0].Durable, s[0].Arbitrated = false, true; s[0].Recheck = ""; return s }, "names the record id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSteps(tt.mutate(validSteps()))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.rule)
		})
	}
}

// Every built-in target keeps the rules, for a record and, where it takes
// them, a dataset with files.
func TestEveryTargetsStepsKeepTheContract(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"a.csv", "b.bin"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644))
	}
	keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(t, err)
	record, err := keyer.Key([]byte(`{"metadata":{"title":"x"},"titles":[{"title":"x"}]}`))
	require.NoError(t, err)
	dataset, err := keyer.WithFileMD5().DatasetKey(dir, []byte(`{"title":"x"}`), []string{"a.csv", "b.bin"})
	require.NoError(t, err)

	targets := map[string]Target{
		"invenio":            invenio.Target{Endpoint: "http://127.0.0.1/api"},
		"invenio no publish": invenio.Target{Endpoint: "http://127.0.0.1/api", NoPublish: true},
		"datacite event":     datacite.Target{Endpoint: "http://127.0.0.1", Prefix: "10.5072", Event: "publish"},
	}
	for _, proto := range []string{protocol.Put, protocol.IdempotencyKey, protocol.WebDAV, protocol.S3, protocol.CouchDB, protocol.DataCite} {
		targets[proto] = targetFor(proto, "http://127.0.0.1/x")
	}
	takesFiles := map[string]bool{protocol.S3: true, protocol.CouchDB: true, "invenio": true, "invenio no publish": true}
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			d, err := target.Driver()
			require.NoError(t, err)
			steps, err := d.Steps(record, "")
			require.NoError(t, err)
			require.NoError(t, checkSteps(steps))
			if !takesFiles[name] {
				return
			}
			steps, err = d.Steps(dataset, dir)
			require.NoError(t, err)
			require.NoError(t, checkSteps(steps))
		})
	}
}

// brokenTarget declares two primary steps.
type brokenTarget struct{ endpoint string }

func (t brokenTarget) Driver() (driver.Driver, error) { return t, nil }
func (t brokenTarget) Name() string                   { return "test-broken " + t.endpoint }
func (brokenTarget) StepTargets() []string            { return nil }
func (brokenTarget) SecretFingerprint() string        { return "" }
func (brokenTarget) Guards(name string) bool          { return driver.Guarded(name) }
func (t brokenTarget) Steps(k canonical.Keyed, _ string) ([]step, error) {
	put := step{Target: t.Name(), Key: k.Key, Primary: true, Durable: true, Arbitrated: true,
		Build: func([]string) (request, error) {
			return request{Method: http.MethodPut, URL: t.endpoint + "/" + k.Key, Body: k.Body}, nil
		}, Judge: func(answer) verdict { return verdict{Class: driver.Created} }}
	second := put
	second.Label, second.Target = "again", t.Name()+" again"
	return []step{put, second}, nil
}

// A target whose steps break the contract stops the run before anything is
// sent or recorded.
func TestABrokenStepListStopsTheRunBeforeAnyRequest(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	store := openStore(t)
	c, err := New(Config{Target: brokenTarget{endpoint: srv.URL}, Store: store, Retry: fastRetry})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), []byte(payload))
	require.ErrorIs(t, err, ErrStopRun)
	require.ErrorContains(t, err, "are both primary")
	require.Zero(t, requests.Load())
	_, err = store.Lookup(context.Background(), c.StoreTarget(), res.Key)
	require.True(t, isNotFound(err), "nothing is recorded: %v", err)
}
