// Package pgtest provides a real PostgreSQL server for tests: Debian's
// postgresql package's own initdb and postgres, started as child processes
// on 127.0.0.1.
//
// URL is the entry point: the first call in a test binary creates a cluster
// in a fresh temporary directory and starts its server; every call creates a
// database of its own on that server and returns its URL. The package's
// TestMain calls Stop after m.Run, which stops the server and removes the
// cluster; a test binary that dies takes the server with it (the kernel
// sends it SIGTERM).
//
// The server binaries are found under Debian's versioned library directory
// (/usr/lib/postgresql/VERSION/bin, newest version first), which is not on
// PATH, and then on PATH. initdb and postgres refuse to run as root: a test
// run as root starts them as the postgres user (which Debian's package
// creates), who owns the cluster's directory. The server runs with PostgreSQL's
// default durability (fsync on, synchronous commit), listens only on
// 127.0.0.1 (no Unix socket), and asks every TCP client for its password
// (scram-sha-256), which the returned URLs carry.
//
// When the binaries (or, as root, the postgres user) are missing, URL skips
// the test with a message naming what is missing; with
// DEPOSIT_REQUIRE_PEERS=1 in the environment (CI sets it) it fails the test
// instead, as internal/peertest does.
//
// URL and Stop are safe for concurrent use by multiple goroutines.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// requireEnv names the environment variable that turns a missing
	// server from a skip into a failure (the same as internal/peertest's).
	requireEnv = "DEPOSIT_REQUIRE_PEERS"
	// superuser is the cluster's superuser, whose password the URLs carry.
	superuser = "deposit"
	// startAttempts bounds how often a start is retried when the server
	// exits before it is ready (another process took the free port).
	startAttempts = 3
	// readyWithin bounds the wait for a started server to accept a login.
	readyWithin = 60 * time.Second
	// stopGrace is how long the server may take to exit after SIGTERM
	// (a "smart" shutdown becomes "fast" with SIGINT first) before it is
	// killed.
	stopGrace = 20 * time.Second
	// logTail is how many bytes of the server's log an error quotes.
	logTail = 2048
)

// ErrUnavailable marks a server that cannot start because PostgreSQL, or
// the user to run it as, is not installed here.
var ErrUnavailable = errors.New("pgtest: postgresql not installed")

// shared is the one server of a test binary.
var shared struct {
	mu     sync.Mutex
	srv    *server
	err    error // the first start's error, returned to every later call
	tried  bool
	dbSeq  int
	closed bool
}

// URL returns the URL of a new, empty database on the test binary's
// server, starting the server on first use. The URL names the user and its
// password and sets sslmode=disable (the server has no certificate).
func URL(tb testing.TB) string {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.closed {
		tb.Fatal("pgtest: URL called after Stop")
	}
	if !shared.tried {
		shared.tried = true
		shared.srv, shared.err = start()
	}
	if shared.err != nil {
		check(tb, shared.err)
		return ""
	}
	shared.dbSeq++
	name := fmt.Sprintf("test_%d", shared.dbSeq)
	if err := shared.srv.createDatabase(name); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return shared.srv.url(name)
}

// Stop stops the server, if one was started, and removes its cluster. Call
// it from TestMain after m.Run; URL fails afterwards.
func Stop() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.closed = true
	if shared.srv == nil {
		return nil
	}
	err := shared.srv.stop()
	shared.srv = nil
	return err
}

// check ends tb when err is not nil: a skip (or a failure under
// DEPOSIT_REQUIRE_PEERS=1) when PostgreSQL is not installed, a failure
// otherwise.
func check(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrUnavailable) {
		msg := fmt.Sprintf("%v; install it with .ci/peers", err)
		if os.Getenv(requireEnv) == "1" {
			tb.Fatalf("%s (%s=1 makes a missing peer a failure)", msg, requireEnv)
		}
		tb.Skip(msg)
		return
	}
	tb.Fatalf("pgtest: %v", err)
}

// binDirs returns the directories that may hold initdb and postgres:
// Debian's, newest version first, then the directories on PATH.
func binDirs() []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(d string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	return append(dirs, filepath.SplitList(os.Getenv("PATH"))...)
}

// findBinaries returns the directory that holds both initdb and postgres.
func findBinaries() (string, error) {
	dirs := binDirs()
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: initdb and postgres (Debian package postgresql) are neither in /usr/lib/postgresql/*/bin nor on PATH", ErrUnavailable)
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// runAs returns the credentials to run the server with: none for an
// ordinary user, the postgres user's when the test runs as root.
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root, and there is no postgres user to run initdb and postgres as (%v)", ErrUnavailable, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// server is a running cluster.
type server struct {
	dir      string // the temporary directory: data/, the log, the password file
	port     int
	password string
	cmd      *exec.Cmd
	done     chan struct{} // closed when postgres has exited
	waitErr  error         // set before done is closed
	bin      string
	cred     *syscall.Credential
}

// start creates a cluster and starts its server on a free port.
func start() (*server, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	s := &server{dir: dir, password: randomHex(16), bin: bin, cred: cred}
	if err := s.initdb(bin, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var lastErr error
	for range startAttempts {
		if lastErr = s.run(0); lastErr == nil {
			return s, nil
		}
		if !errors.Is(lastErr, errExitedEarly) {
			break
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// initdb creates the cluster in dir/data, owned by cred's user.
func (s *server) initdb(bin string, cred *syscall.Credential) error {
	pwfile := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err != nil {
		return err
	}
	if cred != nil {
		if err := chownAll(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"),
		"--pgdata", filepath.Join(s.dir, "data"),
		"--username", superuser, "--pwfile", pwfile,
		"--auth-local", "trust", "--auth-host", "scram-sha-256",
		"--encoding", "UTF8", "--locale", "C", "--no-instructions")
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr(cred)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, tail(out))
	}
	return nil
}

// chownAll gives dir and everything in it to uid:gid.
func chownAll(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// errExitedEarly marks a server that exited before it was ready, most
// often because another process took its port: the start is retried.
var errExitedEarly = errors.New("exited early")

// run starts postgres on port (a free one if 0) and waits until it accepts
// a login.
func (s *server) run(port int) error {
	bin, cred := s.bin, s.cred
	var err error
	if port == 0 {
		if port, err = freePort(); err != nil {
			return err
		}
	}
	logPath := filepath.Join(s.dir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", filepath.Join(s.dir, "data"),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories=",
		"-c", "max_connections=200",
		"-c", "logging_collector=off")
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	s.port, s.cmd, s.done = port, cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		logFile.Close()
		close(s.done)
	}()
	if err := s.waitReady(); err != nil {
		s.kill()
		return err
	}
	return nil
}

// waitReady polls the server with a login until it succeeds, the server
// exits, or readyWithin passes.
func (s *server) waitReady() error {
	start := time.Now()
	delay := 10 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, s.url("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		if time.Since(start) > readyWithin {
			return fmt.Errorf("postgres did not accept a login within %s: %v; log: %s", readyWithin, err, s.logTail())
		}
		timer := time.NewTimer(delay)
		select {
		case <-s.done:
			timer.Stop()
			return fmt.Errorf("%w: postgres exited before it was ready (%v); log: %s", errExitedEarly, s.waitErr, s.logTail())
		case <-timer.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// url is the URL of database name.
func (s *server) url(name string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, s.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + name,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// createDatabase creates the database name.
func (s *server) createDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// stop shuts the server down ("fast": open sessions are ended) and removes
// the cluster.
func (s *server) stop() error {
	var err error
	select {
	case <-s.done:
		err = fmt.Errorf("postgres had exited during the tests (%v); log: %s", s.waitErr, s.logTail())
	default:
		err = s.shutdown()
	}
	if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// shutdown stops the server "fast" (open sessions are ended with SQLSTATE
// 57P01) and waits for it, killing it after stopGrace.
func (s *server) shutdown() error {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT) // a frozen server cannot stop
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-s.done:
		return nil
	case <-timer.C:
		s.kill()
		return fmt.Errorf("postgres did not stop within %s; killed", stopGrace)
	}
}

// kill ends the server's process group at once and waits for it.
func (s *server) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

func (s *server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tail(b)
}

func tail(b []byte) string {
	if len(b) > logTail {
		b = append([]byte("..."), b[len(b)-logTail:]...)
	}
	return strings.TrimSpace(string(b))
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Server is a PostgreSQL server of one test's own, for a test that
// restarts or freezes it (the server URL returns is shared by every test
// of the binary). Its methods are safe for concurrent use by multiple
// goroutines.
type Server struct {
	mu  sync.Mutex
	srv *server
	seq int
}

// Start starts a server of the test's own, on a free port, in a cluster of
// its own; the test's cleanup stops it and removes the cluster. It skips
// (or fails) the test as URL does when PostgreSQL is not installed.
func Start(tb testing.TB) *Server {
	tb.Helper()
	srv, err := start()
	check(tb, err)
	s := &Server{srv: srv}
	tb.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.srv.stop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// URL returns the URL of a new, empty database on s.
func (s *Server) URL(tb testing.TB) string {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	name := fmt.Sprintf("test_%d", s.seq)
	if err := s.srv.createDatabase(name); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return s.srv.url(name)
}

// Restart stops s "fast", as an administrator's restart does (every open
// session ends with SQLSTATE 57P01, and logins meanwhile are refused), and
// starts it again on the same port, returning once it accepts a login.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.srv.shutdown(); err != nil {
		tb.Fatalf("pgtest: restart: %v", err)
	}
	var err error
	for range startAttempts {
		if err = s.srv.run(s.srv.port); err == nil {
			return
		}
		if !errors.Is(err, errExitedEarly) {
			break
		}
	}
	tb.Fatalf("pgtest: restart on port %d: %v", s.srv.port, err)
}

// Freeze stops every process of s with SIGSTOP: connections stay open and
// nothing answers, as on a server that hangs; no server-side timeout can
// fire. PostgreSQL's children leave the postmaster's process group, so
// the postmaster is stopped first (it forks no more) and then each of its
// children. The returned thaw resumes them (SIGCONT); it may be called
// more than once, and the test's cleanup thaws s too.
func (s *Server) Freeze(tb testing.TB) (thaw func()) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	pid := s.srv.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		tb.Fatalf("pgtest: freeze: %v", err)
	}
	kids, err := children(pid)
	if err != nil {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		tb.Fatalf("pgtest: freeze: %v", err)
	}
	for _, kid := range kids {
		_ = syscall.Kill(kid, syscall.SIGSTOP)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			for _, kid := range kids {
				_ = syscall.Kill(kid, syscall.SIGCONT)
			}
			_ = syscall.Kill(pid, syscall.SIGCONT)
		})
	}
	tb.Cleanup(thaw)
	return thaw
}
