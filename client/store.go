package client

import (
	"context"

	"github.com/depositkit/deposit/dedup"
)

// Store is what a Client needs of a durable store: one row per (target,
// key), where each step of a deposit has a target name of its own. Its
// states and transitions are dedup's: Begin records the intent (pending)
// before a step's first request, Complete the server's confirmation (done,
// final), Fail a terminal answer. *dedup.SQLite implements it. A Store must
// be safe for concurrent use by multiple goroutines; one shared by several
// processes must make each transition atomic across them.
type Store interface {
	// CheckSettings records s for target on first use and refuses other
	// settings later (an error wrapping dedup.ErrSettingsMismatch).
	CheckSettings(ctx context.Context, target string, s dedup.Settings) error
	// Lookup returns the row of key, or an error wrapping dedup.ErrNotFound.
	Lookup(ctx context.Context, target, key string) (dedup.Record, error)
	// LookupMany returns the rows of keys in one query; keys without a row
	// are absent from the map.
	LookupMany(ctx context.Context, target string, keys []string) (map[string]dedup.Record, error)
	// Begin records the intent to send: a pending row (holding body, the
	// first non-nil one) or one more attempt of a pending row. A done or
	// failed row is returned unchanged.
	Begin(ctx context.Context, target, key string, body []byte) (dedup.Record, error)
	// Complete records a confirmation. A done row keeps its first result,
	// returned with an error wrapping dedup.ErrConflict when it differs.
	Complete(ctx context.Context, target, key string, c dedup.Confirmation) (dedup.Record, error)
	// Fail records a terminal answer; a done row stays done (an error
	// wrapping dedup.ErrInvalidTransition).
	Fail(ctx context.Context, target, key string, f dedup.Failure) (dedup.Record, error)
	// ResetFailed turns a failed row back into pending.
	ResetFailed(ctx context.Context, target, key string) error
}
