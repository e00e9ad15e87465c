//go:build unix && !linux

package pgtest

import "syscall"

// sysProcAttr runs a program as cred's user (nil: as the test), in its own
// process group. Without Linux's parent-death signal, a test binary that
// crashes leaves its server running until it is stopped by hand.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}

// children is not known here: Freeze stops the postmaster alone.
func children(int) ([]int, error) { return nil, nil }
