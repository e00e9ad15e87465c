//go:build !linux

package peertest

import (
	"os"
	"syscall"
)

// sysProcAttr returns nil: only Linux needs the process group and
// parent-death signal that proc_linux.go sets.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}

// terminate asks the peer to shut down.
func terminate(p *os.Process) error {
	return p.Signal(os.Interrupt)
}

// kill ends the peer at once.
func kill(p *os.Process) {
	_ = p.Kill()
}
