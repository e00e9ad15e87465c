package client

import (
	"context"

	"github.com/depositkit/deposit/dedup"
)

// Store is what a Client needs of a durable store: one row per (target,
// key), where each step of a deposit has a target name of its own. Its
// states and transitions are dedup's: Begin records the intent (pending)
// before a step's first request, Complete the server's confirmation (done,
// final), Fail a terminal answer. *dedup.SQLite and *dedup.Postgres
// implement it. A Store must be safe for concurrent use by multiple
// goroutines; one shared by several processes must make each transition
// atomic across them. A write whose context carries
// dedup.WithDurableCommit records the intent of a step the server does not
// arbitrate, and must survive power loss once it returns.
type Store interface {
	// CheckSettings records s for target on first use and refuses other
	// settings later (an error wrapping dedup.ErrSettingsMismatch).
	CheckSettings(ctx context.Context, target string, s dedup.Settings) error
	// Lookup returns the row of key, or an error wrapping dedup.ErrNotFound.
	Lookup(ctx context.Context, target, key string) (dedup.Record, error)
	// LookupMany returns the rows of keys in one query, without their Body
	// (nil); keys without a row are absent from the map.
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

	// Claim is Begin for a deposit's first step that also takes lease on
	// the key, in the same transaction. A done or failed row keeps its
	// state and is leased all the same (later steps run under the lease).
	// While another owner's lease has not expired by the store's clock,
	// nothing changes: the row is returned with an error wrapping
	// dedup.ErrLeased.
	Claim(ctx context.Context, target, key string, body []byte, lease dedup.Lease) (dedup.Record, error)
	// Renew extends lease.Owner's leases on refs to lease.TTL from now and
	// returns the refs it no longer holds (taken over after they expired).
	Renew(ctx context.Context, lease dedup.Lease, refs []dedup.Ref) (lost []dedup.Ref, err error)
	// Release ends owner's lease on ref, if it still holds it; the row
	// keeps owner as its last claimer (Record.LeaseOwner). With
	// unsent, nothing the deposit sent can have taken effect: the attempt
	// Claim counted is taken back, and a pending row left without attempts
	// is removed, so the key does not look uncertain.
	Release(ctx context.Context, owner string, ref dedup.Ref, unsent bool) error
}
