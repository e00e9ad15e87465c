package dedup

import (
	"context"
	"database/sql"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// TestDurableWritesCommitWithSynchronousFull runs every kind of write with
// and without WithDurableCommit and reads, inside each transaction as it
// commits, the synchronous level in force: FULL for a durable write, the
// store's NORMAL for every other.
func TestDurableWritesCommitWithSynchronousFull(t *testing.T) {
	levels := &syncLevels{}
	s := openTemp(t, withBeforeCommit(levels.beforeCommit))
	lease := Lease{Owner: "me", TTL: time.Minute}
	writes := []struct {
		name string
		run  func(ctx context.Context, key string) error
	}{
		{"CheckSettings", func(ctx context.Context, key string) error {
			return s.CheckSettings(ctx, target+" "+key, Settings{Form: "jcs"})
		}},
		{"Begin", func(ctx context.Context, key string) error {
			_, err := s.Begin(ctx, target, key, []byte("b"))
			return err
		}},
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
	}
	for _, durable := range []bool{false, true} {
		ctx, want, key := context.Background(), syncNormal, "plain"
		if durable {
			ctx, want, key = WithDurableCommit(ctx), syncFull, "durable"
		}
		for _, w := range writes {
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
