package main

import (
	"context"
	"iter"
	"net/url"
	"strings"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
)

// The stores deposit run can write to.
var (
	_ client.Store = (*dedup.SQLite)(nil)
	_ client.Store = (*dedup.Postgres)(nil)
)

// runStore is what deposit run needs of a store.
type runStore interface {
	client.Store
	Close() error
}

// statusStore is what deposit status reads of a store.
type statusStore interface {
	CountByTarget(ctx context.Context) ([]dedup.TargetCounts, error)
	List(ctx context.Context, target string, state dedup.State) iter.Seq2[dedup.Record, error]
	CountObjects(ctx context.Context, target string) (dedup.ObjectCounts, error)
	ListObjects(ctx context.Context, target string) iter.Seq2[dedup.Object, error]
	Close() error
}

// isPostgres reports whether --db names a PostgreSQL database rather than
// a SQLite file.
func isPostgres(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// openStore opens the store that --db names for writing: a PostgreSQL
// database for a postgres:// or postgresql:// URL, else a SQLite file.
func openStore(ctx context.Context, db string) (runStore, error) {
	if isPostgres(db) {
		s, err := dedup.OpenPostgres(ctx, db)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := dedup.Open(db)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openStatusStore opens the store that --db names read-only.
func openStatusStore(ctx context.Context, db string) (statusStore, error) {
	if isPostgres(db) {
		r, err := dedup.OpenPostgresReadOnly(ctx, db)
		if err != nil {
			return nil, err
		}
		return r, nil
	}
	r, err := dedup.OpenReadOnly(db)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// showDB returns --db as a message may print it: a PostgreSQL URL without
// its password (in the user info or the query), a file name as given.
func showDB(db string) string {
	if !isPostgres(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return db[:strings.Index(db, "://")+3] + "(an unreadable URL)"
	}
	q := u.Query()
	for _, k := range []string{"password", "sslpassword"} {
		if q.Has(k) {
			q.Set(k, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.Redacted()
}
