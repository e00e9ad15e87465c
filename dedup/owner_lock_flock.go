//go:build darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd

package dedup

import (
	"errors"
	"os"
	"syscall"
)

// flockWorks: this system has flock(2), whose locks the kernel frees when
// the last descriptor of their open file is closed, as when the process
// holding it dies.
const flockWorks = true

// tryLock takes an exclusive flock on f without waiting. It returns false,
// with no error, when another open file description holds the lock.
func tryLock(f *os.File) (bool, error) {
	conn, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var lockErr error
	if err := conn.Control(func(fd uintptr) {
		for range 8 { // a signal may interrupt the call
			if lockErr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB); lockErr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if errors.Is(lockErr, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return lockErr == nil, lockErr
}

// keepLockedUntilExit keeps f's lock held until the process ends, after f
// is closed: a duplicate descriptor, which nothing closes, holds it.
func keepLockedUntilExit(f *os.File) {
	if conn, err := f.SyscallConn(); err == nil {
		_ = conn.Control(func(fd uintptr) {
			if dup, err := syscall.Dup(int(fd)); err == nil {
				syscall.CloseOnExec(dup) // a program started later must not hold it
			}
		})
	}
}
