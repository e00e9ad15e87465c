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
	"github.com/depositkit/deposit/internal/steprules"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/invenio"
)

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
			require.NoError(t, steprules.Check(steps))
			if !takesFiles[name] {
				return
			}
			steps, err = d.Steps(dataset, dir)
			require.NoError(t, err)
			require.NoError(t, steprules.Check(steps))
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
