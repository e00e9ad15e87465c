//go:build linux

package peertest

import (
	"os"
	"syscall"
)

// sysProcAttr puts a peer in its own process group, so that stopping it
// reaches the workers it forks, and has the kernel send it SIGTERM when the
// test binary dies, so that a crashed test leaves no server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// terminate asks the peer to shut down.
func terminate(p *os.Process) error {
	return p.Signal(syscall.SIGTERM)
}

// kill ends the peer's whole process group at once.
func kill(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}
