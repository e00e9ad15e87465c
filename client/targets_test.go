package client

import (
	"fmt"

	"github.com/depositkit/deposit/internal/protocol"
)

// targetFor is the Target of protocol proto at endpoint with default
// options, for tables that run one case per protocol.
func targetFor(proto, endpoint string) Target {
	switch proto {
	case protocol.Put:
		return Put{Endpoint: endpoint}
	case protocol.IdempotencyKey:
		return IdempotencyKey{Endpoint: endpoint}
	case protocol.WebDAV:
		return WebDAV{Endpoint: endpoint}
	case protocol.S3:
		return S3{Endpoint: endpoint, AWS: *testAWS}
	case protocol.CouchDB:
		return CouchDB{Endpoint: endpoint}
	case protocol.DataCite:
		return DataCite{Endpoint: endpoint, Prefix: "10.5072"}
	}
	panic(fmt.Sprintf("targetFor: unknown protocol %q", proto))
}
