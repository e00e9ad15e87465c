//go:build linux

package pgtest

import "syscall"

// sysProcAttr runs a program as cred's user (nil: as the test), in its own
// process group, and has the kernel send it SIGTERM when the test binary
// dies, so that a crashed test leaves no server behind. Go sets the
// parent-death signal after switching users, so the switch does not clear
// it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
