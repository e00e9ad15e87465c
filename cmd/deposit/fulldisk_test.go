package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/sqlitefile"
	"github.com/depositkit/deposit/repotest"
)

// mountTmpfs mounts a tmpfs of size (mount's syntax: 256k, 64m) on a new
// directory and returns it, unmounted at the end of the test. Mounting
// needs root: elsewhere the test is skipped, or failed under
// DEPOSIT_REQUIRE_PEERS=1 (CI runs as root, and must not skip it).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	unable := func(why string) {
		t.Helper()
		msg := "full-disk test needs a small tmpfs, mounted as root: " + why
		if os.Getenv("DEPOSIT_REQUIRE_PEERS") == "1" {
			t.Fatal(msg + " (DEPOSIT_REQUIRE_PEERS=1 makes this a failure)")
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		unable("not running as root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		unable(fmt.Sprintf("mount -t tmpfs: %v: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// A store on a disk that fills mid-run: the run stops with exit 2 and a
// message that says the disk is full and names the store; status still
// reads the store, every row done then is done still; once there is room,
// the same command settles every item, one record each on the server.
func TestAFullDiskStopsTheRunAndTheNextRunSettlesTheRest(t *testing.T) {
	disk := mountTmpfs(t, "256k")
	db := filepath.Join(disk, "deposit.db")
	srv := newServer(t, repotest.Config{})
	lines := make([]string, 600)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"title":"record %d","n":%d,"pad":%q}`, i, i, strings.Repeat("x", 300))
	}
	input := writeFile(t, t.TempDir(), "in.jsonl", lines...)
	// The first run cannot release its leases (that is a write too): a
	// short lease lets the second take its keys over soon.
	args := []string{"run", "--endpoint", srv.URL, "--db", db, "--lease", "2s", "--json", input}

	first := deposit(t, nil, args...)
	require.Equal(t, 2, first.code, first.stderr)
	require.Contains(t, first.stderr, "disk full")
	require.Contains(t, first.stderr, "the disk holding the store "+db+" is full")
	t.Logf("first run: %s", lastLine(first.stderr))
	sum := summaryOf(t, first.stdout)
	require.Positive(t, int64(sum.Unresolved)+sum.Unread, "the disk filled before the end")
	if _, err := sqlitefile.ReadHeader(db); err != nil {
		t.Logf("left behind: %v (its -wal holds the rest)", err)
	}

	status := deposit(t, nil, "status", "--db", db, "--list", "--json")
	require.Equal(t, 0, status.code, status.stderr)
	doneBefore := map[string]string{}
	for _, row := range jsonLines(t, status.stdout) {
		if row["state"] == "done" {
			doneBefore[row["key"].(string)] = row["identifier"].(string)
		}
	}
	t.Logf("status after the full disk: %d rows, %d done", len(jsonLines(t, status.stdout)), len(doneBefore))

	out, err := exec.Command("mount", "-o", "remount,size=64m", disk).CombinedOutput()
	require.NoError(t, err, "remount: %s", out)
	second := deposit(t, nil, args...)
	require.Equal(t, 0, second.code, second.stderr)
	sum = summaryOf(t, second.stdout)
	require.Equal(t, len(lines), sum.Total)
	require.Zero(t, sum.Unresolved)

	checkExactlyOnce(t, srv, db, len(lines))
	after := map[string]string{}
	for _, row := range storeRows(t, db) {
		after[row.Key] = row.Identifier
	}
	for key, id := range doneBefore {
		require.Equal(t, id, after[key], "a row done before the disk filled changed: %s", key)
	}
}

// lastLine is the last non-empty line of text.
func lastLine(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return lines[len(lines)-1]
}
