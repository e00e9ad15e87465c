//go:build !(darwin || dragonfly || freebsd || illumos || linux || netbsd || openbsd)

package dedup

import (
	"errors"
	"os"
)

// flockWorks: this system has no flock(2); its stores prove no owner dead,
// and a dead process's leases are waited out.
const flockWorks = false

func tryLock(*os.File) (bool, error) { return false, errors.ErrUnsupported }

func keepLockedUntilExit(*os.File) {}
