// Command deposit deposits every line of a JSON Lines file in a research
// repository exactly once, however often the batch is interrupted, killed or
// run again.
//
// Usage:
//
//	deposit run     --endpoint URL [flags] FILE|-
//	deposit status  [--db FILE] [--json] [--list]
//	deposit key     [--form jcs|python] [--ignore POINTER]... [flags] FILE|-
//	deposit serve   [--addr HOST:PORT] [--protocol put|idempotency-key|datacite|invenio] [--faults SPEC] [flags]
//	deposit demo
//	deposit probe   --endpoint URL [--protocol put|webdav|s3|couchdb] [--yes]
//	deposit version
//
// Each line's key is the SHA-256 of its canonical bytes; a local SQLite
// store remembers every key's outcome, so a run repeated after a crash
// finishes what was left and creates nothing twice. Run "deposit help" or
// "deposit COMMAND -h" for every flag.
//
// Exit status: 0 every item done; 1 some items failed or were invalid; 3 some
// items unresolved (running again is safe); 2 the run could not proceed
// (usage, store, settings, credentials, endpoint); 130 interrupted twice.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit statuses of the design's "Command line" section.
const (
	exitDone       = 0 // every item done
	exitFailed     = 1 // some items failed or invalid, all others done
	exitStop       = 2 // the run could not proceed
	exitUnresolved = 3 // some items unresolved: safe to run again
	exitInterrupt2 = 130
)

func main() {
	tuneGC(os.Getenv)
	ctx, stop := signalContext()
	code := realMain(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// signalContext returns a context cancelled by the first SIGINT or SIGTERM,
// with an interrupt naming the signal as its cause: the batch stops sending
// and records what is in flight. A second signal exits at once with
// 128+signal (130 for SIGINT).
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		n := 0
		for sig := range ch {
			n++
			if n == 1 {
				cancel(interrupt{sig})
				continue
			}
			code := exitInterrupt2
			if sig == syscall.SIGTERM {
				code = 128 + int(syscall.SIGTERM)
			}
			os.Exit(code)
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// interrupt is the cause of a context the first signal cancelled.
type interrupt struct{ sig os.Signal }

func (i interrupt) Error() string { return "interrupted by " + signalName(i.sig) }

// signalName is SIGINT or SIGTERM, as a user sends them.
func signalName(sig os.Signal) string {
	if sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return "SIGINT"
}

// streams are the process's standard streams and environment, passed in so
// tests can run a command in process.
type streams struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// realMain runs the command line args (without the program name) and returns
// the exit status.
func realMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	s := streams{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitStop
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runCmd(ctx, rest, s)
	case "status":
		return statusCmd(ctx, rest, s)
	case "key":
		return keyCmd(ctx, rest, s)
	case "serve":
		return serveCmd(ctx, rest, s)
	case "demo":
		return demoCmd(ctx, rest, s)
	case "probe":
		return probeCmd(ctx, rest, s)
	case "version", "-version", "--version":
		return versionCmd(ctx, rest, s)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" {
			if isCommand(rest[0]) {
				return realMain(ctx, []string{rest[0], "-h"}, stdin, stdout, stderr, getenv)
			}
			fmt.Fprintf(stderr, "deposit: unknown command %q\n\n%s", rest[0], usage)
			return exitStop
		}
		fmt.Fprint(stdout, usage)
		return exitDone
	}
	fmt.Fprintf(stderr, "deposit: unknown command %q\n\n%s", cmd, usage)
	return exitStop
}

// isCommand reports whether name is a subcommand, for "deposit help COMMAND".
func isCommand(name string) bool {
	switch name {
	case "run", "status", "key", "serve", "demo", "probe", "version":
		return true
	}
	return false
}

const usage = `deposit deposits each line of a JSON Lines file in a repository exactly once.
Run it again after anything went wrong: it finishes what was left, creates
nothing twice, and answers finished lines from its store without a request.

Usage:
  deposit run     --endpoint URL [flags] FILE|-   deposit each line exactly once
  deposit status  [--db FILE] [--json] [--list]   what the store remembers
  deposit key     [flags] FILE|-                  print the key of each line
  deposit serve   [flags]                         run the reference repository
  deposit demo                                    a fault-injected batch, then its replay
  deposit probe   --endpoint URL [--yes]          does the server refuse a second create?
  deposit version                                 the version and the store schema it writes
  deposit help [COMMAND]                          this text, or a command's flags

Run "deposit COMMAND -h" for every flag of a command, with its default.

Quick start:
  deposit serve --faults 'drop=0.1,503=0.1:retry-after=1' &
  deposit run --endpoint http://127.0.0.1:8080 records.jsonl
  deposit status

Environment:
  DEPOSIT_ENDPOINT       the endpoint when --endpoint is not given
  DEPOSIT_AUTHORIZATION  the Authorization header of every request (never echoed);
                         under --protocol invenio, the personal access token
  DEPOSIT_KEY_SECRET     secret for Idempotency-Key values and invenio markers
                         (never echoed)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION
                         sign the requests of --protocol s3 (never echoed)
  DATACITE_REPOSITORY_ID, DATACITE_PASSWORD
                         the repository's credentials under --protocol datacite

Exit status (the first that applies):
  2  the run could not proceed: usage, store unusable or settings mismatch,
     endpoint unreachable, 401/403 (credentials), 404 (endpoint), 501
  3  some items unresolved: run the same command again, it is safe
  1  some items failed or were invalid; all others are done
  0  every item done
  130 a second SIGINT (the first stops the run cleanly and exits 3)
`

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ", ") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// command is one subcommand's flag set and help text.
type command struct {
	fs       *flag.FlagSet
	synopsis string // "deposit run --endpoint URL [flags] FILE|-"
	about    string // what the command does, and notes after the flags
	notes    string
}

func newCommand(name, synopsis, about, notes string) *command {
	fs := flag.NewFlagSet("deposit "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &command{fs: fs, synopsis: synopsis, about: about, notes: notes}
}

// help writes the command's help: synopsis, description, every flag with its
// default, notes.
func (c *command) help(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", c.synopsis, c.about)
	flags := 0
	c.fs.VisitAll(func(*flag.Flag) { flags++ })
	if flags > 0 {
		fmt.Fprint(w, "\nFlags:\n")
	}
	c.fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		switch f.DefValue {
		case "", "0", "0s", "false", "[]":
		default:
			text += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, text)
	})
	if c.notes != "" {
		fmt.Fprintf(w, "\n%s", c.notes)
	}
}

// parse parses args, allowing flags after positional arguments ("run FILE
// --json"); "--" ends the flags. It returns the positional arguments, or an
// exit status when the command should end: 0 after -h, 2 after a usage
// error (reported on stderr).
func (c *command) parse(args []string, s streams) ([]string, int, bool) {
	var pos []string
	for {
		err := c.fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			c.help(s.stdout)
			return nil, exitDone, false
		}
		if err != nil {
			return nil, c.usageError(s, "%v", err), false
		}
		rest := c.fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	return pos, 0, true
}

// usageError reports a usage error and returns exit status 2.
func (c *command) usageError(s streams, format string, args ...any) int {
	fmt.Fprintf(s.stderr, "%s: %s\nRun \"%s -h\" for help.\n", c.fs.Name(), fmt.Sprintf(format, args...), c.fs.Name())
	return exitStop
}
