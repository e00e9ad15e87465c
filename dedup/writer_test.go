package dedup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blockWriter occupies the writer goroutine until the returned release
// function is called, so that the writes queued meanwhile share one batch.
func blockWriter(t *testing.T, s *SQLite) (release func()) {
	t.Helper()
	running, unblock, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	var once sync.Once
	go func() {
		done <- s.write(context.Background(), func(tx *sql.Tx) error {
			once.Do(func() { close(running) })
			<-unblock
			return nil
		})
	}()
	<-running
	return func() {
		close(unblock)
		require.NoError(t, <-done)
	}
}

// waitQueued waits until n writes are queued.
func waitQueued(s *SQLite, n int) {
	for len(s.queue) < n {
		runtime.Gosched()
	}
}

func TestFailingWriteFailsAlone(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	release := blockWriter(t, s)

	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 11)
	for i := range 10 {
		wg.Go(func() {
			_, errs[i] = s.Begin(ctx, target, fmt.Sprintf("k%d", i), nil)
		})
	}
	wg.Go(func() {
		errs[10] = s.write(ctx, func(tx *sql.Tx) error {
			if _, err := tx.Exec("INSERT INTO settings (target, form, ignore_pointers, secret_fingerprint, created_at) VALUES ('x', '', '[]', '', 0)"); err != nil {
				return err
			}
			return boom
		})
	})
	waitQueued(s, 11)
	release()
	wg.Wait()

	require.ErrorIs(t, errs[10], boom)
	for i := range 10 {
		require.NoError(t, errs[i])
		r, err := s.Lookup(ctx, target, fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		require.Equal(t, 1, r.Attempts, "written once, though its batch ran again")
	}
	var n int
	require.NoError(t, s.rdb.QueryRow("SELECT count(*) FROM settings").Scan(&n))
	require.Equal(t, 0, n, "the failed write left nothing behind")
}

func TestWriteCancelledWhileQueuedIsNotApplied(t *testing.T) {
	s := openTemp(t)
	release := blockWriter(t, s)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.Begin(ctx, target, "k", nil)
		errc <- err
	}()
	waitQueued(s, 1)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	release()

	_, err := s.Lookup(context.Background(), target, "k")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestCloseDrainsQueuedWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	s, err := Open(path)
	require.NoError(t, err)
	release := blockWriter(t, s)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			_, err := s.Complete(ctx, target, fmt.Sprintf("k%d", i), created)
			assert.NoError(t, err) // off the test goroutine
		})
	}
	waitQueued(s, 5)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	for !s.isClosed.Load() {
		runtime.Gosched()
	}
	release()
	require.NoError(t, <-closed)
	wg.Wait()

	s, err = Open(path)
	require.NoError(t, err)
	defer s.Close()
	c, err := s.Count(ctx, "")
	require.NoError(t, err)
	require.Equal(t, Counts{Done: 5}, c)
}
