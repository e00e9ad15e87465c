package dedup

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scanStore is what the scan tests use of a store.
type scanStore interface {
	ClaimScan(ctx context.Context, target string, lease Lease) (bool, error)
	FinishScan(ctx context.Context, target string, found []Found) error
	ReleaseScan(ctx context.Context, target, owner string) error
	ScanFound(ctx context.Context, target, marker string) ([]Found, error)
}

const scanTarget = "invenio-scan https://repo.example/api"

// runScanTests checks the scan's mark, lease and findings on stores that
// open gives, each new and empty.
func runScanTests(t *testing.T, open func(t *testing.T) testStore) {
	ctx := context.Background()
	a := Lease{Owner: "owner-a", TTL: time.Minute}
	b := Lease{Owner: "owner-b", TTL: time.Minute}
	found := []Found{
		{Marker: "urn:deposit:sha256:aa", ID: "r1", PID: "10.5072/r1", Published: true},
		{Marker: "urn:deposit:sha256:bb", ID: "d2"},
		{Marker: "urn:deposit:sha256:bb", ID: "d3"},
	}

	t.Run("a kept scan is found by marker and claimed as scanned", func(t *testing.T) {
		s := open(t)
		scanned, err := s.ClaimScan(ctx, scanTarget, a)
		require.NoError(t, err)
		require.False(t, scanned)
		got, err := s.ScanFound(ctx, scanTarget, found[0].Marker)
		require.NoError(t, err)
		require.Empty(t, got, "nothing before the scan is kept")

		require.NoError(t, s.FinishScan(ctx, scanTarget, found))
		got, err = s.ScanFound(ctx, scanTarget, found[0].Marker)
		require.NoError(t, err)
		require.Equal(t, found[:1], got)
		got, err = s.ScanFound(ctx, scanTarget, found[1].Marker)
		require.NoError(t, err)
		require.Equal(t, found[1:], got)
		got, err = s.ScanFound(ctx, "invenio-scan https://other.example/api", found[0].Marker)
		require.NoError(t, err)
		require.Empty(t, got, "findings are the target's")

		for _, l := range []Lease{a, b} {
			scanned, err = s.ClaimScan(ctx, scanTarget, l)
			require.NoError(t, err)
			require.True(t, scanned, "every owner sees the mark")
		}
		scanned, err = s.ClaimScan(ctx, "invenio-scan https://other.example/api", b)
		require.NoError(t, err)
		require.False(t, scanned, "the mark is the target's")
	})

	t.Run("another owner waits while the scan is leased, and takes it once released or expired", func(t *testing.T) {
		s := open(t)
		_, err := s.ClaimScan(ctx, scanTarget, a)
		require.NoError(t, err)
		_, err = s.ClaimScan(ctx, scanTarget, b)
		require.ErrorIs(t, err, ErrLeased)
		scanned, err := s.ClaimScan(ctx, scanTarget, a)
		require.NoError(t, err, "the owner renews")
		require.False(t, scanned)

		require.NoError(t, s.ReleaseScan(ctx, scanTarget, "owner-b"), "a release by another owner changes nothing")
		_, err = s.ClaimScan(ctx, scanTarget, b)
		require.ErrorIs(t, err, ErrLeased)
		require.NoError(t, s.ReleaseScan(ctx, scanTarget, "owner-a"))
		scanned, err = s.ClaimScan(ctx, scanTarget, Lease{Owner: "owner-b", TTL: expired})
		require.NoError(t, err)
		require.False(t, scanned)
		_, err = s.ClaimScan(ctx, scanTarget, a)
		require.NoError(t, err, "an expired lease is taken over")
	})

	t.Run("a scan kept twice keeps the first", func(t *testing.T) {
		s := open(t)
		require.NoError(t, s.FinishScan(ctx, scanTarget, found[:1]))
		require.NoError(t, s.FinishScan(ctx, scanTarget, found[1:]))
		got, err := s.ScanFound(ctx, scanTarget, found[1].Marker)
		require.NoError(t, err)
		require.Empty(t, got)
		got, err = s.ScanFound(ctx, scanTarget, found[0].Marker)
		require.NoError(t, err)
		require.Len(t, got, 1)
	})

	t.Run("owners claiming at once get one lease", func(t *testing.T) {
		s := open(t)
		var wg sync.WaitGroup
		won := make(chan string, 8)
		for i := range 8 {
			wg.Go(func() {
				l := Lease{Owner: string(rune('a' + i)), TTL: time.Minute}
				if _, err := s.ClaimScan(ctx, scanTarget, l); err == nil {
					won <- l.Owner
				}
			})
		}
		wg.Wait()
		close(won)
		n := 0
		for range won {
			n++
		}
		require.Equal(t, 1, n)
	})

	t.Run("refuses a scan without a target or a lease", func(t *testing.T) {
		s := open(t)
		_, err := s.ClaimScan(ctx, "", a)
		require.ErrorIs(t, err, ErrInvalidArgument)
		_, err = s.ClaimScan(ctx, scanTarget, Lease{Owner: "x"})
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorIs(t, s.FinishScan(ctx, "", nil), ErrInvalidArgument)
	})
}
