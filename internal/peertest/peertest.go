// Package peertest provides real third-party servers for tests: Apache httpd
// with mod_dav, nginx with its dav module, pouchdb-server and versitygw, each
// started as a child process on 127.0.0.1 for one test.
//
// Each helper (Apache, Nginx, PouchDB, Versity) picks a free port, writes its
// configuration and data into a fresh temporary directory, starts the
// program in the foreground, waits until it answers HTTP, and stops it in
// the test's Cleanup. The servers are the programs users run, not fakes: what
// a test sees is what a user's deposit will meet.
//
// The programs are found on PATH, in the usual system sbin directories, and
// in the bin directory that the repository's .ci/peers script installs into:
// $DEPOSIT_PEERS_DIR/bin, or deposit-peers/bin under the user's cache
// directory. When a program is missing the helper skips the test with a
// message naming the package to install; with DEPOSIT_REQUIRE_PEERS=1 in the
// environment (CI sets it) it fails the test instead.
//
// The helpers may be called from parallel tests: every call starts its own
// server, with its own port and directory.
package peertest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

const (
	// requireEnv names the environment variable that turns a missing peer
	// from a skip into a failure.
	requireEnv = "DEPOSIT_REQUIRE_PEERS"
	// dirEnv names the environment variable that overrides where .ci/peers
	// installs the programs that do not come from Debian packages.
	dirEnv = "DEPOSIT_PEERS_DIR"

	// startAttempts bounds how often a start is retried when the program
	// exits before it is ready (another process took the free port).
	startAttempts = 3
	// readyWithin bounds the wait for a started program to answer HTTP.
	readyWithin = 60 * time.Second
	// stopGrace is how long a program may take to exit after SIGTERM
	// before its process group is killed.
	stopGrace = 10 * time.Second
	// logTail is how many bytes of a program's output an error quotes.
	logTail = 2048
)

// errUnavailable marks a start that failed because the program or one of
// its parts is not installed here.
var errUnavailable = errors.New("peer not installed")

// required reports whether a missing peer must fail the test.
func required() bool {
	return os.Getenv(requireEnv) == "1"
}

// unavailable skips tb, or fails it when require is set, saying what is
// missing and how to install it.
func unavailable(tb testing.TB, require bool, err error) {
	tb.Helper()
	msg := fmt.Sprintf("peertest: %v; install it with .ci/peers", err)
	if require {
		tb.Fatalf("%s (%s=1 makes a missing peer a failure)", msg, requireEnv)
		return
	}
	tb.Skip(msg)
}

// check ends tb when err is not nil: a skip (or a failure under
// DEPOSIT_REQUIRE_PEERS=1) when the peer is not installed, a failure
// otherwise.
func check(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, errUnavailable) {
		unavailable(tb, required(), err)
		return
	}
	tb.Fatalf("peertest: %v", err)
}

// peersDirs returns the directories that .ci/peers installs into, in the
// order they are searched.
func peersDirs() []string {
	var dirs []string
	if d := os.Getenv(dirEnv); d != "" {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if d, err := os.UserCacheDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "deposit-peers", "bin"))
	}
	return dirs
}

// sbinDirs returns the directories searched after PATH: Debian installs
// apache2 and nginx into sbin, which is not on the PATH of an ordinary user.
func sbinDirs() []string {
	return []string{"/usr/local/sbin", "/usr/sbin", "/sbin"}
}

// lookPath finds the first of names in the .ci/peers directories (so that
// the pinned versions installed there win), then on PATH, then in the sbin
// directories. The error wraps errUnavailable and names pkg, the package
// that provides the program.
func lookPath(pkg string, names ...string) (string, error) {
	peers := peersDirs()
	if p, ok := findIn(peers, names); ok {
		return p, nil
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	if p, ok := findIn(sbinDirs(), names); ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s (%s) is not on PATH nor in %v", errUnavailable, names[0], pkg, append(peers, sbinDirs()...))
}

// findIn returns the first executable file named one of names in dirs.
func findIn(dirs, names []string) (string, bool) {
	for _, name := range names {
		for _, dir := range dirs {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				return p, true
			}
		}
	}
	return "", false
}

// peerDir makes a directory for one server that every user may traverse,
// because Apache started as root serves files as an unprivileged user, and
// removes it when tb ends. It is registered before the server's own
// cleanup, so it runs after the server has stopped.
func peerDir(tb testing.TB, name string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "peertest-"+name+"-")
	if err != nil {
		tb.Fatalf("peertest: %v", err)
	}
	tb.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			tb.Errorf("peertest: remove %s: %v", dir, err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatalf("peertest: %v", err)
	}
	return dir
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	return port, l.Close()
}

// process is a started program. Its methods are not safe for concurrent
// use, except that done may be watched by many goroutines.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	grace   time.Duration // how long stop waits after SIGTERM
	done    chan struct{} // closed when the program has exited
	waitErr error         // set before done is closed
}

// startProcess starts bin with args in dir, its output going to logPath.
func startProcess(name, bin, dir, logPath string, args []string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, grace: stopGrace, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the program has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the end of the program's output.
func (p *process) tail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no output: %v)", err)
	}
	if len(b) > logTail {
		b = append([]byte("..."), b[len(b)-logTail:]...)
	}
	return string(bytes.TrimSpace(b))
}

// stop asks the program to exit and kills its process group when it has
// not exited within its grace period. It reports whether the program had
// already exited on its own.
func (p *process) stop() (crashed bool) {
	if p.exited() {
		return true
	}
	if err := terminate(p.cmd.Process); err != nil {
		kill(p.cmd.Process)
	}
	timer := time.NewTimer(p.grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		kill(p.cmd.Process)
		<-p.done
	}
	return false
}

// waitReady polls url until the program answers HTTP with any status, the
// program exits, or readyWithin passes.
func (p *process) waitReady(url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	start := time.Now()
	delay := 5 * time.Millisecond
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		if time.Since(start) > readyWithin {
			return fmt.Errorf("%s did not answer %s within %s: %w; output: %s", p.name, url, readyWithin, err, p.tail())
		}
		timer := time.NewTimer(delay)
		select {
		case <-p.done:
			timer.Stop()
			return fmt.Errorf("%w: %s exited before it answered (%v); output: %s", errExitedEarly, p.name, p.waitErr, p.tail())
		case <-timer.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// errExitedEarly marks a program that exited before it was ready, most
// often because another process took its port: the start is retried.
var errExitedEarly = errors.New("exited early")

// launch describes how to start one program.
type launch struct {
	name string                           // for messages: "apache2"
	bin  string                           // path of the program
	dir  string                           // working directory; output goes to name.log in it
	args func(port int) ([]string, error) // command line for a port; may write config files
}

// run starts l on a free port and waits until it answers HTTP at its root.
// It returns the running process and the base URL.
func run(l launch) (*process, string, error) {
	var lastErr error
	for range startAttempts {
		port, err := freePort()
		if err != nil {
			return nil, "", err
		}
		args, err := l.args(port)
		if err != nil {
			return nil, "", err
		}
		p, err := startProcess(l.name, l.bin, l.dir, filepath.Join(l.dir, l.name+".log"), args)
		if err != nil {
			return nil, "", err
		}
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		err = p.waitReady(base + "/")
		if err == nil {
			return p, base, nil
		}
		p.stop()
		if !errors.Is(err, errExitedEarly) {
			return nil, "", err
		}
		lastErr = err
	}
	return nil, "", fmt.Errorf("%s did not start in %d attempts: %w", l.name, startAttempts, lastErr)
}

// serve starts l and stops it when tb ends, reporting a program that
// exited during the test and, for a failed test, the program's output.
func serve(tb testing.TB, l launch) string {
	tb.Helper()
	p, base, err := run(l)
	check(tb, err)
	tb.Cleanup(func() {
		if p.stop() {
			tb.Errorf("peertest: %s exited during the test (%v); output: %s", p.name, p.waitErr, p.tail())
			return
		}
		if tb.Failed() {
			tb.Logf("peertest: %s output: %s", p.name, p.tail())
		}
	})
	return base
}
