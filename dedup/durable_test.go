package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/pgtest"
)

// syncLevels records SQLite's synchronous level (1 NORMAL, 2 FULL) in force
// in each write transaction as it commits, read inside that transaction.
type syncLevels struct {
	mu     sync.Mutex
	levels []int
	// hold, when set, is received from before the next commit (and then
	// cleared): the writer waits there while a test queues more writes.
	hold chan struct{}
}

func (l *syncLevels) beforeCommit(tx *sql.Tx) {
	var level int
	err := tx.QueryRow("PRAGMA synchronous").Scan(&level)
	l.mu.Lock()
	if err != nil {
		level = -1
	}
	l.levels = append(l.levels, level)
	hold := l.hold
	l.hold = nil
	l.mu.Unlock()
	if hold != nil {
		<-hold
	}
}

// take returns the levels recorded since the last take.
func (l *syncLevels) take() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.levels
	l.levels = nil
	return out
}

const (
	syncNormal = 1
	syncFull   = 2
)

func withBeforeCommit(fn func(tx *sql.Tx)) Option {
	return func(o *options) { o.beforeCommit = fn }
}

// writer is every write of a store.
type writer interface {
	CheckSettings(ctx context.Context, target string, set Settings) error
	Begin(ctx context.Context, target, key string, body []byte) (Record, error)
	Claim(ctx context.Context, target, key string, body []byte, lease Lease) (Record, error)
	ClaimMany(ctx context.Context, lease Lease, intents []Intent) ([]Claimed, error)
	Renew(ctx context.Context, lease Lease, refs []Ref) ([]Ref, error)
	Release(ctx context.Context, owner string, ref Ref, unsent bool) error
	Complete(ctx context.Context, target, key string, c Confirmation) (Record, error)
	CompleteMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]Record, error)
	ConfirmMany(ctx context.Context, target string, items map[string]Confirmation) (map[string]string, error)
	Fail(ctx context.Context, target, key string, f Failure) (Record, error)
	ResetFailed(ctx context.Context, target, key string) error
}

type namedWrite struct {
	name string
	run  func(ctx context.Context, key string) error
}

// everyWrite is one call of each write of s, for keys named after key.
func everyWrite(s writer) []namedWrite {
	lease := Lease{Owner: "me", TTL: time.Minute}
	return []namedWrite{
		{"CheckSettings", func(ctx context.Context, key string) error {
			return s.CheckSettings(ctx, target+" "+key, Settings{Form: "jcs"})
		}},
		{"Begin", func(ctx context.Context, key string) error {
			_, err := s.Begin(ctx, target, key, []byte("b"))
			return err
		}},
		{"Begin again", func(ctx context.Context, key string) error { _, err := s.Begin(ctx, target, key, nil); return err }},
		{"Claim", func(ctx context.Context, key string) error {
			_, err := s.Claim(ctx, target, key+"-claim", []byte("b"), lease)
			return err
		}},
		{"ClaimMany", func(ctx context.Context, key string) error {
			_, err := s.ClaimMany(ctx, lease, []Intent{{Ref: Ref{Target: target, Key: key + "-many"}}})
			return err
		}},
		{"Renew", func(ctx context.Context, key string) error {
			_, err := s.Renew(ctx, lease, []Ref{{Target: target, Key: key + "-claim"}})
			return err
		}},
		{"Release", func(ctx context.Context, key string) error {
			return s.Release(ctx, lease.Owner, Ref{Target: target, Key: key + "-claim"}, false)
		}},
		{"Complete", func(ctx context.Context, key string) error {
			_, err := s.Complete(ctx, target, key, created)
			return err
		}},
		{"CompleteMany", func(ctx context.Context, key string) error {
			_, err := s.CompleteMany(ctx, target, map[string]Confirmation{key + "-many": created})
			return err
		}},
		{"ConfirmMany", func(ctx context.Context, key string) error {
			_, err := s.ConfirmMany(ctx, target, map[string]Confirmation{key + "-claim": created})
			return err
		}},
		{"Fail", func(ctx context.Context, key string) error {
			_, err := s.Fail(ctx, target, key+"-failed", Failure{Status: 422})
			return err
		}},
		{"ResetFailed", func(ctx context.Context, key string) error { return s.ResetFailed(ctx, target, key+"-failed") }},
		// Writes the row's state refuses: an upsert read back in a
		// transaction of its own, a confirmation that loses, a failure of
		// a done key.
		{"Begin done", func(ctx context.Context, key string) error { _, err := s.Begin(ctx, target, key, nil); return err }},
		{"Complete conflict", func(ctx context.Context, key string) error {
			_, err := s.Complete(ctx, target, key, Confirmation{Outcome: OutcomeCreated, Identifier: "other"})
			return expect(err, ErrConflict)
		}},
		{"Fail done", func(ctx context.Context, key string) error {
			_, err := s.Fail(ctx, target, key, Failure{Status: 422})
			return expect(err, ErrInvalidTransition)
		}},
	}
}

// expect is nil when err wraps want, else an error saying what came.
func expect(err, want error) error {
	if errors.Is(err, want) {
		return nil
	}
	return fmt.Errorf("want %v, got %v", want, err)
}

// TestDurableWritesCommitWithSynchronousFull runs every kind of write with
// and without WithDurableCommit and reads, inside each transaction as it
// commits, the synchronous level in force: FULL for a durable write, the
// store's NORMAL for every other.
func TestDurableWritesCommitWithSynchronousFull(t *testing.T) {
	levels := &syncLevels{}
	s := openTemp(t, withBeforeCommit(levels.beforeCommit))
	for _, durable := range []bool{false, true} {
		ctx, want, key := context.Background(), syncNormal, "plain"
		if durable {
			ctx, want, key = WithDurableCommit(ctx), syncFull, "durable"
		}
		for _, w := range everyWrite(s) {
			require.NoError(t, w.run(ctx, key), w.name)
			require.Equal(t, []int{want}, levels.take(), "%s, durable %v", w.name, durable)
		}
	}
}

// TestDurableWriteMakesItsWholeBatchFull queues a plain and a durable write
// while the writer is busy, so that they share the next transaction: it
// commits with FULL, and the next plain write is back at NORMAL.
func TestDurableWriteMakesItsWholeBatchFull(t *testing.T) {
	levels := &syncLevels{}
	s := openTemp(t, withBeforeCommit(levels.beforeCommit))
	ctx := context.Background()
	release := make(chan struct{})
	levels.mu.Lock()
	levels.hold = release
	levels.mu.Unlock()

	errs := make(chan error, 3)
	go func() { _, err := s.Begin(ctx, target, "first", nil); errs <- err }()
	// The writer holds "first" before its commit; the next two queue.
	for {
		levels.mu.Lock()
		held := levels.hold == nil
		levels.mu.Unlock()
		if held {
			break
		}
		runtime.Gosched()
	}
	go func() { _, err := s.Begin(ctx, target, "plain", nil); errs <- err }()
	go func() { _, err := s.Begin(WithDurableCommit(ctx), target, "durable", nil); errs <- err }()
	for len(s.queue) < 2 {
		runtime.Gosched()
	}
	close(release)
	for range 3 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, []int{syncNormal, syncFull}, levels.take(), "the two queued writes share one FULL commit")

	_, err := s.Begin(ctx, target, "after", nil)
	require.NoError(t, err)
	require.Equal(t, []int{syncNormal}, levels.take())
}

// settings records the synchronous_commit a PostgreSQL store's probe saw.
type settings struct {
	mu   sync.Mutex
	seen []string
}

func (s *settings) add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, v)
}

func (s *settings) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

// On a database whose synchronous_commit is off (as a server, database or
// role may set it) and with a URL that sets it off, a durable write's
// transaction, read just before it commits, runs with synchronous_commit
// on; every other write keeps the session's off. A write may run more than
// one transaction (a refused upsert reads the row in a second one): each
// is probed, and each of a durable write's is on.
func TestPostgresDurableWritesCommitSynchronously(t *testing.T) {
	base := pgtest.URL(t)
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := pgx.Connect(context.Background(), base)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()+" SET synchronous_commit = off")
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))

	for _, tc := range []struct{ name, url string }{
		{"database", base + "&schema=db_off"},
		{"url", base + "&schema=url_off&synchronous_commit=off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OpenPostgres(context.Background(), tc.url)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Close()) })
			seen := &settings{}
			s.probe = seen.add
			for _, durable := range []bool{false, true} {
				ctx, want, key := context.Background(), "off", "plain"
				if durable {
					ctx, want, key = WithDurableCommit(ctx), "on", "durable"
				}
				for _, w := range everyWrite(s) {
					require.NoError(t, w.run(ctx, key), w.name)
					got := seen.take()
					require.NotEmpty(t, got, w.name)
					for _, v := range got {
						require.Equal(t, want, v, "%s, durable %v", w.name, durable)
					}
				}
			}
		})
	}
}
