package dedup

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// A lease only says when its owner stops counting; a process killed with
// SIGKILL cannot release its leases, so the keys it claimed would wait out
// their TTL. Owner locks let a SQLite store tell that such an owner is
// dead, by a lock the operating system frees when its holder dies:
//
//   - Before its first claim through a store handle, an owner takes an
//     exclusive flock on a file of its own, <store>-owners/<hex of
//     sha256(owner)>. The file is created and locked under another name and
//     renamed into place, so it never appears unlocked. The handle keeps it
//     open, and locked, until Close, which removes it.
//   - A claim that meets another owner's live lease tries that owner's
//     lock, without waiting. Taken: the owner lives, the key stays leased.
//     Free, on the file at that name still: the owner died, and its lease
//     counts as expired. The file stays, so that every other process on
//     the store proves the same; a dead owner's file older than
//     staleOwnerFile is swept when an owner next takes its lock. No file
//     (an owner of an older version, one that closed its store, or a dead
//     one swept): not known to be dead, so the lease is waited out as
//     before.
//
// flock is reliable on a local file system only. A store on a network file
// system, where another machine's locks may not be seen, is unsupported,
// as SQLite's write-ahead log is there.
//
// The test runs in the claim's write transaction, so a takeover is atomic
// with the row it read. An owner proven dead is remembered for the life of
// the handle: owner names are random per process and never come back.

// ownerLocks holds the lock files of the owners claiming through one store
// handle and remembers the owners it proved dead. A nil *ownerLocks (a
// system without flock) holds nothing and proves nothing. It is safe for
// concurrent use.
type ownerLocks struct {
	dir string // <store path>-owners

	mu   sync.Mutex
	held map[string]*os.File // owner -> its locked file
	dead map[string]bool
}

// newOwnerLocks returns the owner locks of the store at path, or nil where
// the system has no flock.
func newOwnerLocks(path string) *ownerLocks {
	if !flockWorks {
		return nil
	}
	// Two names of one store (a symbolic link) share one folder of locks.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	return &ownerLocks{dir: path + "-owners", held: map[string]*os.File{}, dead: map[string]bool{}}
}

// file is the path of owner's lock file.
func (o *ownerLocks) file(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return filepath.Join(o.dir, hex.EncodeToString(sum[:]))
}

// hold makes sure this handle holds owner's lock, taking it on first use.
func (o *ownerLocks) hold(owner string) error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.held[owner]; ok {
		return nil
	}
	f, err := o.create(owner)
	if err != nil {
		return fmt.Errorf("owner lock in %s: %w", o.dir, err)
	}
	o.held[owner] = f
	o.sweep()
	return nil
}

// staleOwnerFile is the age past which a dead owner's lock file is swept.
// It only needs to outlive the dead owner's leases (30 s by default): a
// file swept early makes another process wait out a lease, never take a
// live one.
const staleOwnerFile = 24 * time.Hour

// sweep removes the files of dead owners (and the temporary files of
// owners killed while creating theirs) older than staleOwnerFile. o.mu is
// held.
func (o *ownerLocks) sweep() {
	entries, err := os.ReadDir(o.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < staleOwnerFile {
			continue
		}
		name := filepath.Join(o.dir, e.Name())
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(name)
			continue
		}
		if f, err := os.Open(name); err == nil {
			if freeAtName(f, name) {
				_ = os.Remove(name)
			}
			f.Close()
		}
	}
}

// create makes owner's lock file, locked before it appears under its name.
// Another handle's Close may remove the empty folder between MkdirAll and
// the create: that is tried again, a few times.
func (o *ownerLocks) create(owner string) (*os.File, error) {
	name := o.file(owner)
	var f *os.File
	var err error
	for range 3 {
		if err = os.MkdirAll(o.dir, 0o777); err != nil {
			return nil, err
		}
		tmp := fmt.Sprintf("%s.%016x.tmp", name, rand.Uint64())
		f, err = os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if locked, err := tryLock(f); err != nil || !locked {
			f.Close()
			os.Remove(tmp)
			return nil, fmt.Errorf("cannot lock the new file %s (locked: %v): %v", tmp, locked, err)
		}
		if err := os.Rename(tmp, name); err != nil {
			f.Close()
			os.Remove(tmp)
			return nil, err
		}
		return f, nil
	}
	return nil, err
}

// gone reports whether owner is proven dead: its lock file is in place and
// its lock free. It is called in a claim's write transaction.
func (o *ownerLocks) gone(owner string) bool {
	if o == nil || owner == "" {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead[owner] {
		return true
	}
	if _, ok := o.held[owner]; ok {
		return false
	}
	if !o.provedDead(owner) {
		return false
	}
	o.dead[owner] = true
	return true
}

// provedDead tries owner's lock without waiting. The file of an owner it
// proves dead stays, its lock free again once f is closed, so that other
// handles prove the same.
func (o *ownerLocks) provedDead(owner string) bool {
	name := o.file(owner)
	f, err := os.Open(name)
	if err != nil {
		return false // no file: not known to be dead
	}
	defer f.Close()
	return freeAtName(f, name)
}

// freeAtName takes f's lock without waiting and reports whether it got it
// while f is still the file at name. A free lock proves its holder dead
// only there: an owner that closed its store removed its file before
// freeing the lock, and may have left keys leased with requests in flight.
func freeAtName(f *os.File, name string) bool {
	if locked, err := tryLock(f); err != nil || !locked {
		return false
	}
	opened, err := f.Stat()
	if err != nil {
		return false
	}
	now, err := os.Stat(name)
	return err == nil && os.SameFile(opened, now)
}

// close frees every lock this handle holds and removes their files, then
// the folder if it is empty. It runs once the handle can write no more.
func (o *ownerLocks) close() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for owner, f := range o.held {
		// The file is removed before its lock is freed, and only while it
		// is still the one at the name.
		// A file that cannot be removed keeps its lock until the process
		// ends: left in place with its lock free, it would prove dead an
		// owner that may live on.
		name := o.file(owner)
		if mine, err := f.Stat(); err == nil {
			if now, err := os.Stat(name); err == nil && os.SameFile(mine, now) {
				if err := os.Remove(name); err != nil {
					keepLockedUntilExit(f)
				}
			}
		}
		f.Close()
		delete(o.held, owner)
	}
	_ = os.Remove(o.dir) // fails while another handle's files are there
}
