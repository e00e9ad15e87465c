//go:build linux

package pgtest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr runs a program as cred's user (nil: as the test), in its own
// process group, and has the kernel send it SIGTERM when the test binary
// dies, so that a crashed test leaves no server behind. Go sets the
// parent-death signal after switching users, so the switch does not clear
// it.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// children returns the processes whose parent is pid, from /proc.
func children(pid int) ([]int, error) {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	var kids []int
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			kid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			kids = append(kids, kid)
		}
	}
	return kids, nil
}
