package dedup

import "context"

// durableKey is the context key of WithDurableCommit.
type durableKey struct{}

// WithDurableCommit returns a copy of ctx under which a store's writes
// commit durably: once the call returns, the write survives a power cut or
// a kernel crash, not only a crash of the process, and so does every write
// committed before it.
//
// Without it, SQLite commits with synchronous=NORMAL: a commit survives the
// process dying at any moment, but a power cut may lose the last
// transactions (never corrupting the file). That costs, for a step the
// server arbitrates itself, one request that the server answers "exists".
// A write that records the intent of a step the server does not arbitrate
// (an InvenioRDM draft, file or publish) is made under this context:
// losing it would let the next run send the step again without looking
// for the first one's effect first.
//
// SQLite commits such a write, and any write that shares its transaction,
// with synchronous=FULL (the log is synced before the call returns);
// PostgreSQL with synchronous_commit on, whatever the server, database,
// role or URL set.
func WithDurableCommit(ctx context.Context) context.Context {
	return context.WithValue(ctx, durableKey{}, true)
}

// DurableCommit reports whether ctx asks for durable commits
// (WithDurableCommit).
func DurableCommit(ctx context.Context) bool {
	v, _ := ctx.Value(durableKey{}).(bool)
	return v
}
