package client

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/protocol"
	"github.com/depositkit/deposit/target/couchdb"
	"github.com/depositkit/deposit/target/datacite"
	"github.com/depositkit/deposit/target/idempotencykey"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
	"github.com/depositkit/deposit/target/s3"
	"github.com/depositkit/deposit/target/webdav"
)

// targetFor is the Target of protocol proto at endpoint with default
// options, for tables that run one case per protocol.
func targetFor(proto, endpoint string) Target {
	switch proto {
	case protocol.Put:
		return put.Target{Endpoint: endpoint}
	case protocol.IdempotencyKey:
		return idempotencykey.Target{Endpoint: endpoint}
	case protocol.WebDAV:
		return webdav.Target{Endpoint: endpoint}
	case protocol.S3:
		return s3.Target{Endpoint: endpoint, AWS: *testAWS}
	case protocol.CouchDB:
		return couchdb.Target{Endpoint: endpoint}
	case protocol.DataCite:
		return datacite.Target{Endpoint: endpoint, Prefix: "10.5072"}
	}
	panic(fmt.Sprintf("targetFor: unknown protocol %q", proto))
}

// invenioStoreTarget is the store target of an InvenioRDM at api whose
// protocol name has suffix ("-draft", "-scan", the recheck note's),
// spelled out as a store written before holds it.
func invenioStoreTarget(api, suffix string) string {
	return driver.TargetName(protocol.Invenio+suffix, mustEndpoint(api))
}

// mustEndpoint is raw normalised, as a target's driver holds it.
func mustEndpoint(raw string) string {
	ep, err := driver.Endpoint("endpoint", raw)
	if err != nil {
		panic(err)
	}
	return ep
}

// invenioDraftBody is the body of the draft the invenio target creates for
// k at api: the payload with the deposit's marker.
func invenioDraftBody(t testing.TB, api string, k canonical.Keyed) ([]byte, error) {
	t.Helper()
	d, err := invenio.Target{Endpoint: api}.Driver()
	require.NoError(t, err)
	steps, err := d.Steps(k, "")
	require.NoError(t, err)
	req, err := steps[0].Build(nil)
	return req.Body, err
}
