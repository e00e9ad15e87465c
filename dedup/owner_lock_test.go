package dedup

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// claimChild claims the keys k0000..k{DEDUP_KEYS-1} as DEDUP_OWNER with a
// lease of 10 minutes, prints "claimed", and holds them until stdin closes
// or the process is killed.
func claimChild() error {
	s, err := Open(os.Getenv("DEDUP_DB"))
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := strconv.Atoi(os.Getenv("DEDUP_KEYS"))
	if err != nil {
		return err
	}
	got, err := s.ClaimMany(context.Background(), Lease{Owner: os.Getenv("DEDUP_OWNER"), TTL: 10 * time.Minute}, ownerTestIntents(n))
	if err != nil {
		return err
	}
	for _, c := range got {
		if c.Leased {
			return fmt.Errorf("key %s is leased to %s", c.Record.Key, c.Record.LeaseOwner)
		}
	}
	fmt.Println("claimed")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// ownerTestIntents are the intents of the keys k0000..k{n-1}.
func ownerTestIntents(n int) []Intent {
	in := make([]Intent, n)
	for i := range in {
		key := fmt.Sprintf("k%04d", i)
		in[i] = Intent{Ref: Ref{Target: target, Key: key}, Body: crashBody(key)}
	}
	return in
}

// startClaimer starts a child process that claims keys as owner in the
// store at path, and returns once its claims have committed.
func startClaimer(t *testing.T, path, owner string, keys int) func() {
	t.Helper()
	cmd, _, out := helper(t, "claim", "DEDUP_DB="+path, "DEDUP_OWNER="+owner, fmt.Sprintf("DEDUP_KEYS=%d", keys))
	require.True(t, out.Scan(), "the child claimed its keys")
	require.Equal(t, "claimed", out.Text())
	return func() {
		require.NoError(t, cmd.Process.Kill()) // SIGKILL
		require.Error(t, cmd.Wait(), "the child died of the kill")
	}
}

func requireFlock(t *testing.T) {
	t.Helper()
	if !flockWorks {
		t.Skip("this system has no flock: no owner is ever proven dead")
	}
}

// A process killed with SIGKILL leaves its claims with 10 minutes to run;
// the next claim takes them over at once, as after an expiry, and another
// handle proves the death as well. While it lived, the same claim was
// refused.
func TestAKilledOwnersLeasesAreTakenOverAtOnce(t *testing.T) {
	requireFlock(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	const keys = 300
	kill := startClaimer(t, path, "child", keys)

	s := openAt(t, path)
	me := Lease{Owner: "parent", TTL: time.Minute}
	got, err := s.ClaimMany(ctx, me, ownerTestIntents(keys))
	require.NoError(t, err)
	for _, c := range got {
		require.True(t, c.Leased, "key %s: the child lives and holds its lease", c.Record.Key)
		require.Equal(t, "child", c.PriorOwner)
	}
	require.False(t, s.OwnerGone("child"))
	lockFile := s.owners.file("child")
	require.FileExists(t, lockFile)

	kill()
	got, err = s.ClaimMany(ctx, me, ownerTestIntents(keys))
	require.NoError(t, err)
	for _, c := range got {
		require.False(t, c.Leased, "key %s: the child is dead; its lease counts as expired", c.Record.Key)
		require.Equal(t, "child", c.PriorOwner, "the engine recovers the key as after an expiry")
		require.Equal(t, "parent", c.Record.LeaseOwner)
		require.Equal(t, StatePending, c.Record.State)
		require.Equal(t, 2, c.Record.Attempts, "the child's attempt counts: the key is uncertain")
		require.Equal(t, crashBody(c.Record.Key), c.Record.Body, "the body first claimed is kept")
	}
	require.True(t, s.OwnerGone("child"))
	require.FileExists(t, lockFile, "a dead owner's file stays, for other processes to prove the same")
	other := openAt(t, path)
	require.True(t, other.OwnerGone("child"), "another handle proves the death too")
}

// A dead owner's file past staleOwnerFile is swept when an owner next takes
// its lock; a live owner's file, however old, is not.
func TestOldFilesOfDeadOwnersAreSwept(t *testing.T) {
	requireFlock(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	kill := startClaimer(t, path, "dead", 1)
	kill()
	live := openAt(t, path)
	_, err := live.Claim(ctx, target, "k-live", nil, Lease{Owner: "live", TTL: time.Minute})
	require.NoError(t, err)
	old := time.Now().Add(-staleOwnerFile - time.Hour)
	for _, owner := range []string{"dead", "live"} {
		require.NoError(t, os.Chtimes(live.owners.file(owner), old, old))
	}
	tmp := live.owners.file("killed") + ".0000000000000001.tmp"
	require.NoError(t, os.WriteFile(tmp, nil, 0o666))
	require.NoError(t, os.Chtimes(tmp, old, old))

	s := openAt(t, path)
	_, err = s.Claim(ctx, target, "k-new", nil, Lease{Owner: "new", TTL: time.Minute})
	require.NoError(t, err)
	require.NoFileExists(t, s.owners.file("dead"), "a dead owner's old file is swept")
	require.NoFileExists(t, tmp, "an old temporary file is swept")
	require.FileExists(t, s.owners.file("live"), "a live owner's file stays")
	require.False(t, s.OwnerGone("live"))
}

// One key claimed alone (Claim) is taken over the same way, and another
// handle on the store, in another process, proves the death as well.
func TestAKilledOwnersLeaseIsTakenOverByClaim(t *testing.T) {
	requireFlock(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	kill := startClaimer(t, path, "child", 1)
	s := openAt(t, path)
	_, err := s.Claim(ctx, target, "k0000", nil, Lease{Owner: "parent", TTL: time.Minute})
	require.ErrorIs(t, err, ErrLeased)
	kill()
	r, err := s.Claim(ctx, target, "k0000", nil, Lease{Owner: "parent", TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, "parent", r.LeaseOwner)
}

// Without a lock file (an owner of an older version, one that closed its
// store) an owner is not presumed dead: its lease is waited out.
func TestAnOwnerWithoutALockFileIsWaitedFor(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	gone := openAt(t, path)
	_, err := gone.Claim(ctx, target, "k", nil, Lease{Owner: "closed", TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, gone.Close())
	require.NoDirExists(t, path+"-owners", "Close removes its lock files, and their folder once empty")

	s := openAt(t, path)
	r, err := s.Claim(ctx, target, "k", nil, Lease{Owner: "parent", TTL: time.Minute})
	require.ErrorIs(t, err, ErrLeased)
	require.Equal(t, "closed", r.LeaseOwner)
	require.False(t, s.OwnerGone("closed"))
	require.False(t, s.OwnerGone("never seen"))
}

// Two handles in one process: each owner's lock is its handle's, and the
// other handle sees it held.
func TestALiveOwnerOfAnotherHandleKeepsItsLease(t *testing.T) {
	requireFlock(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "deposit.db")
	a, b := openAt(t, path), openAt(t, path)
	_, err := a.Claim(ctx, target, "k", nil, Lease{Owner: "a", TTL: time.Minute})
	require.NoError(t, err)
	_, err = b.Claim(ctx, target, "k", nil, Lease{Owner: "b", TTL: time.Minute})
	require.ErrorIs(t, err, ErrLeased)
	require.False(t, b.OwnerGone("a"))
	require.FileExists(t, a.owners.file("a"))
}

// A process that opened an owner's lock file before the owner closed its
// store finds the lock free afterwards, but on a file no longer at its
// name: that proves nothing.
func TestALockFreedByCloseProvesNothing(t *testing.T) {
	requireFlock(t)
	path := filepath.Join(t.TempDir(), "deposit.db")
	s := openAt(t, path)
	_, err := s.Claim(context.Background(), target, "k", nil, Lease{Owner: "a", TTL: time.Minute})
	require.NoError(t, err)
	name := s.owners.file("a")
	early, err := os.Open(name)
	require.NoError(t, err)
	defer early.Close()
	require.False(t, freeAtName(early, name), "held while the store is open")
	require.NoError(t, s.Close())
	require.False(t, freeAtName(early, name), "free, but removed from its name first")

	other, err := os.Open(name)
	require.ErrorIs(t, err, os.ErrNotExist, "Close removed the file")
	if other != nil {
		other.Close()
	}
}

// openAt opens the store at path, closed when the test ends.
func openAt(t *testing.T, path string) *SQLite {
	t.Helper()
	s, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkClaimManyLeasedElsewhere64 claims, in groups of 64, keys that
// another live owner (another handle, as another process would) holds: the
// only claims that test an owner's lock, once per owner and transaction.
// One op is one key refused.
func BenchmarkClaimManyLeasedElsewhere64(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	path := filepath.Join(dir, "deposit.db")
	holder, err := Open(path)
	require.NoError(b, err)
	defer holder.Close()
	s, err := Open(path)
	require.NoError(b, err)
	defer s.Close()
	keys := newKeys(b.N)
	groups := make([][]Intent, 0, len(keys)/64+1)
	for i := 0; i < len(keys); i += 64 {
		group := make([]Intent, 0, 64)
		for _, k := range keys[i:min(i+64, len(keys))] {
			group = append(group, Intent{Ref: Ref{Target: target, Key: k}, Body: benchBody})
		}
		_, err := holder.ClaimMany(ctx, Lease{Owner: "holder", TTL: time.Hour}, group)
		require.NoError(b, err)
		groups = append(groups, group)
	}
	b.ResetTimer()
	for _, group := range groups {
		got, err := s.ClaimMany(ctx, benchLease, group)
		if err != nil {
			b.Fatal(err)
		}
		if !got[0].Leased {
			b.Fatal("a live owner's key was taken")
		}
	}
	perSecond(b, b.N, "claims/s")
}
