// Package dedup provides the durable memory of what was already deposited:
// for each (target, key) it remembers whether a request was started, whether
// the server confirmed it and with which identifier, or why it failed.
//
// The model is a small state machine per key. Begin records the intent to send
// a request (state pending, "outcome unknown") before the request leaves;
// Complete records the server's confirmation (state done, final); Fail records
// a terminal answer (state failed), which ResetFailed turns back into pending
// when the user asks for a deliberate retry. Nothing becomes done without a
// confirmation, a done key keeps its first identifier for ever, and a second
// confirmation with another identifier is reported as ErrConflict.
//
// Store is the interface the deposit client depends on; Open returns the
// SQLite implementation, which several goroutines and several processes may
// use on one file at once. Concurrent single writes are group-committed: many
// goroutines calling Begin, Complete or Fail share one transaction.
//
// OpenReadOnly returns a Reader, for reports that must never write to the
// file: it counts and lists records, and creates or migrates nothing.
package dedup

import (
	"context"
	"errors"
	"iter"
	"time"
)

// State is the state of one key in a Store.
type State string

// The states of a key. A key that was never recorded has no state: Lookup
// returns ErrNotFound.
const (
	// StatePending: a request was started (or is about to be); its outcome is
	// unknown. It never means done.
	StatePending State = "pending"
	// StateDone: the server confirmed the key. Final.
	StateDone State = "done"
	// StateFailed: the server gave a terminal answer. ResetFailed turns it
	// back into pending.
	StateFailed State = "failed"
)

// Outcome says how a done key was confirmed.
type Outcome string

// The outcomes of a done key.
const (
	// OutcomeCreated: a request of ours created the record.
	OutcomeCreated Outcome = "created"
	// OutcomeExisting: the server said the record already existed.
	OutcomeExisting Outcome = "existing"
)

// Record is one stored key. The zero value is not a stored record.
type Record struct {
	Target string // the normalised endpoint plus protocol the key belongs to
	Key    string // the deposit key
	State  State
	// Outcome and Identifier are set for done records only.
	Outcome    Outcome
	Identifier string
	// Status is the last HTTP status of a done or failed record, else 0.
	Status int
	// Problem is the server's problem detail or error text of a failed
	// record, else empty.
	Problem string
	// Body is the exact body first given to Begin, kept so that retries
	// (after a restart too) re-send it byte for byte; nil if none was given.
	Body []byte
	// Attempts counts the Begin calls for this key (requests started).
	Attempts int
	// CreatedAt and UpdatedAt are in UTC, with microsecond precision.
	CreatedAt, UpdatedAt time.Time
}

// Settings are the key settings a target was first used with. A run whose
// settings differ would give every payload a new key, so CheckSettings
// refuses it.
type Settings struct {
	Form string // canonical form, as the caller names it
	// Ignore lists the JSON Pointers removed from the key; their order does
	// not matter.
	Ignore []string
	// SecretFingerprint identifies the key secret (never the secret itself);
	// empty when there is none.
	SecretFingerprint string
}

// Confirmation is the server's confirmation of a key, recorded by Complete.
type Confirmation struct {
	Outcome    Outcome // created or existing; required
	Identifier string  // required
	Status     int     // HTTP status of the answer
}

// Failure is a terminal answer, recorded by Fail.
type Failure struct {
	Status  int    // HTTP status, 0 if there was no answer
	Problem string // the server's problem detail or the error text
}

// Counts holds the number of records in each state.
type Counts struct{ Pending, Done, Failed int }

// Errors a Store returns; test with errors.Is. Errors that carry detail (which
// file, which key) wrap one of these.
var (
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("dedup: record not found")
	// ErrSettingsMismatch: the target was first used with other key settings.
	ErrSettingsMismatch = errors.New("dedup: key settings differ from the recorded ones")
	// ErrConflict: the key is already done with another identifier; the first
	// result is kept and returned with this error.
	ErrConflict = errors.New("dedup: key already done with another identifier")
	// ErrNotDepositStore: the file is not a deposit store (not SQLite,
	// another program's database, truncated or corrupt); it was not changed.
	ErrNotDepositStore = errors.New("dedup: not a deposit store")
	// ErrNewerSchema: the store was written by a newer version of this
	// package; it was not changed.
	ErrNewerSchema = errors.New("dedup: store has a newer schema version")
	// ErrOlderSchema: OpenReadOnly found a store written by an older version
	// of this package, which Open would migrate; it was not changed.
	ErrOlderSchema = errors.New("dedup: store has an older schema version")
	// ErrInvalidTransition: the call does not apply to the key's state (Fail
	// of a done key); the record is returned unchanged with this error.
	ErrInvalidTransition = errors.New("dedup: invalid state transition")
	// ErrInvalidArgument: a call was given a value it cannot store, such as a
	// confirmation without an identifier.
	ErrInvalidArgument = errors.New("dedup: invalid argument")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("dedup: store is closed")
)

// Store is the durable memory the deposit client depends on. Implementations
// must be safe for concurrent use by multiple goroutines; the SQLite one is
// also safe for several processes sharing one file.
//
// A write that returns an error because its context ended was not applied.
// Callers recording a server's answer should therefore pass a context that
// outlives cancellation (context.WithoutCancel), so an interrupted run still
// records what the server said.
type Store interface {
	// CheckSettings records s for target on first use; later calls with
	// different settings return an error wrapping ErrSettingsMismatch that
	// names both.
	CheckSettings(ctx context.Context, target string, s Settings) error
	// Lookup returns the record of key, or an error wrapping ErrNotFound.
	Lookup(ctx context.Context, target, key string) (Record, error)
	// LookupMany returns the records of keys in one query; keys without a
	// record are absent from the map.
	LookupMany(ctx context.Context, target string, keys []string) (map[string]Record, error)
	// Begin records the intent to send a request: it inserts a pending row
	// with body if the key is absent (attempts 1), or increments the attempts
	// of a pending row (the first non-nil body wins). It returns the row as
	// stored after the call; a done or failed row is returned unchanged.
	Begin(ctx context.Context, target, key string, body []byte) (Record, error)
	// Complete records a confirmation: an absent, pending or failed key
	// becomes done. A done key keeps its first result, which is returned; if
	// the identifier differs, the error wraps ErrConflict.
	Complete(ctx context.Context, target, key string, c Confirmation) (Record, error)
	// CompleteMany completes many keys in one transaction. It returns the
	// record of every key; if any key was already done with another
	// identifier, it also returns an error wrapping ErrConflict (compare the
	// identifiers to see which).
	CompleteMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]Record, error)
	// Fail records a terminal answer: an absent, pending or failed key
	// becomes failed. A done key stays done and is returned with an error
	// wrapping ErrInvalidTransition.
	Fail(ctx context.Context, target, key string, f Failure) (Record, error)
	// ResetFailed turns a failed key back into pending, for a deliberate
	// retry. A pending or done key is left unchanged without error; an absent
	// key gives an error wrapping ErrNotFound.
	ResetFailed(ctx context.Context, target, key string) error
	// Count counts the records of target in each state; target "" counts all
	// targets.
	Count(ctx context.Context, target string) (Counts, error)
	// List yields the records of target ("" for all targets) in the given
	// state ("" for any), ordered by target and key, without holding them
	// all in memory. An error ends the sequence.
	List(ctx context.Context, target string, state State) iter.Seq2[Record, error]
	// Close waits for queued writes and releases the store.
	Close() error
}
