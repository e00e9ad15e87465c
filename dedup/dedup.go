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
// Open returns the SQLite store, which several goroutines and several
// processes may use on one file at once; its consumers declare the
// interfaces they need (package client declares client.Store). Concurrent
// single writes are group-committed: many goroutines calling Begin,
// Complete or Fail share one transaction.
//
// OpenReadOnly returns a Reader, for reports that must never write to the
// file: it counts and lists records, and creates or migrates nothing.
//
// OpenPostgres returns the same store kept in a PostgreSQL schema, for
// processes on several machines; OpenPostgresReadOnly its reader.
package dedup

import (
	"errors"
	"fmt"
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

// The outcomes of a done key. They say who may have made the record, not
// which record it is: a confirmation whose outcome differs from the
// recorded one, with the same identifier, is no conflict (the first
// outcome is kept); only another identifier is (ErrConflict).
const (
	// OutcomeCreated: a request of ours may have created the record.
	OutcomeCreated Outcome = "created"
	// OutcomeExisting: the record existed before any request of ours
	// could have made it.
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
	// LeaseOwner is the process that last claimed the key ("" if none
	// has), LeaseExpires when that claim ends unless renewed, by the
	// store's clock (zero once released). A lease whose time has passed is
	// free to be taken.
	LeaseOwner   string
	LeaseExpires time.Time
}

// Lease is a claim on a key by one process: while it lasts, no other owner
// may claim the key, so a deposit is in flight in one process at a time
// however many share the store. Owner is random per process; TTL is how
// long the claim lasts unless renewed, measured by the store's clock (the
// database server's, where there is one).
type Lease struct {
	Owner string
	TTL   time.Duration
}

// Ref names one row of a store.
type Ref struct{ Target, Key string }

// An Intent is one key's claim in a ClaimMany: the row and the body of its
// first request.
type Intent struct {
	Ref
	Body []byte
}

// Claimed is what ClaimMany made of one intent: the record as it stands
// after the claim, and whether another owner's live lease refused it, in
// which case nothing changed (what Claim reports with ErrLeased).
type Claimed struct {
	Record Record
	Leased bool
	// PriorOwner is the row's last claimer before this claim (its
	// Record.LeaseOwner then): "" for a row the claim created. A deposit
	// that finds its row pending learns from it, without a look-up of its
	// own, whether another process may have sent it.
	PriorOwner string
}

// Err is what Claim returns for the claim: an error wrapping ErrLeased,
// naming the key and when the lease ends, if another owner's lease refused
// it; else nil.
func (c Claimed) Err() error {
	if !c.Leased {
		return nil
	}
	return fmt.Errorf("%w: key %s until %s", ErrLeased, c.Record.Key, c.Record.LeaseExpires.Format(time.RFC3339Nano))
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
	// Identity lists the JSON Pointers whose values name an object, in
	// their order (the object key depends on it); empty for payloads
	// without an identity.
	Identity []string
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
	// ErrLeased: another owner holds a live lease on the key; Claim
	// returns the record, unchanged, with this error.
	ErrLeased = errors.New("dedup: key is leased by another process")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("dedup: store is closed")
	// ErrDiskFull: the disk (or quota) holding the store is full. The
	// write that met it was not made, as if never called; everything
	// committed before it is kept, and the store is consistent. Free
	// space and the store can be used again. The error names the store.
	ErrDiskFull = errors.New("dedup: the disk holding the store is full")
)

// diskFullError is a write refused because the disk holding the store at
// where is full; it wraps the database's own error and is ErrDiskFull.
type diskFullError struct {
	where string
	err   error
}

func (e *diskFullError) Error() string {
	return fmt.Sprintf("the disk holding the store %s is full (%v)", e.where, e.err)
}

func (e *diskFullError) Unwrap() error { return e.err }

func (e *diskFullError) Is(target error) bool { return target == ErrDiskFull }
