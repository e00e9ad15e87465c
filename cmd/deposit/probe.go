package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/internal/protocol"
)

// probeOptions are the flags of `deposit probe`.
type probeOptions struct {
	endpoint string
	protocol string
	headers  stringList
	yes      bool
}

const probeAbout = `Checks, before a real batch, whether the endpoint refuses a second
conditional create of the same record: the server's own guard against
duplicates. It writes one clearly named record (deposit-probe- and 16 random
hex digits, under the endpoint) twice, then deletes it where the server
allows, and says so when it does not. Without --yes it only says what it
would write.

Each request is retried as deposit run retries it (up to 20 attempts within
2 minutes, Retry-After honoured): a write whose answer was lost is sent again
as the same conditional create, so the probe never writes the record twice
where the server honours the condition.

On a repository that mints identifiers (DOIs), the probe record is a real
record that may not be deletable: probe its test instance instead.`

const probeNotes = `Verdicts and exit status:
  0  created, then "exists": the server prevents duplicates itself
  1  created twice: the server ignores If-None-Match; only the local store
     (--db of deposit run) prevents duplicates
  2  nothing written (no --yes), a usage error, or an answer that is neither
     (credentials, a wrong endpoint, a missing collection, a server error
     that outlasted the retries), explained

Environment:
  DEPOSIT_ENDPOINT       used when --endpoint is not given
  DEPOSIT_AUTHORIZATION  sent as the Authorization header (--header overrides it)
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
  AWS_REGION (or AWS_DEFAULT_REGION; default us-east-1)
                         sign the requests of --protocol s3
Credentials are never printed.
`

// probeCmd runs `deposit probe`.
func probeCmd(ctx context.Context, args []string, s streams) int {
	o := probeOptions{}
	c := newCommand("probe", "deposit probe --endpoint URL [--protocol put|webdav|s3|couchdb] [--header 'Name: value']... [--yes]", probeAbout, probeNotes)
	fs := c.fs
	fs.StringVar(&o.endpoint, "endpoint", "", "collection `URL` to probe, as given to deposit run (default $DEPOSIT_ENDPOINT)")
	fs.StringVar(&o.protocol, "protocol", "put", "write protocol: put, webdav, s3 (endpoint: the bucket URL) or couchdb (endpoint: the database URL)")
	fs.Var(&o.headers, "header", "`'Name: value'` added to every request; repeatable")
	fs.BoolVar(&o.yes, "yes", false, "write the probe record; without it, only say what would be written")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(s, "no arguments expected, got %q", pos[0])
	}
	fromEnv := o.endpoint == ""
	if fromEnv {
		o.endpoint = s.getenv("DEPOSIT_ENDPOINT")
	}
	if o.endpoint == "" {
		return c.usageError(s, "no endpoint: give --endpoint URL or set DEPOSIT_ENDPOINT")
	}
	if err := checkEndpoint(o.endpoint, fromEnv); err != nil {
		return c.usageError(s, "%v", err)
	}
	proto, err := protocol.Parse(o.protocol)
	if err != nil {
		return c.usageError(s, "--protocol: %v", err)
	}
	header, err := parseHeaders(o.headers)
	if err != nil {
		return c.usageError(s, "%v", err)
	}
	if !specOf(proto).probes {
		return c.usageError(s, "--protocol %s has no conditional create to probe: use %s", proto, strings.Join(probed(), ", "))
	}
	if err := authorize(proto, o.endpoint, header, s.getenv); err != nil {
		return c.usageError(s, "%v", err)
	}
	target, err := newTarget(proto, targetFlags{endpoint: o.endpoint}, s.getenv)
	if err != nil {
		return c.usageError(s, "%v", err)
	}
	p, err := client.NewProbe(client.Config{Target: target, Header: header})
	if err != nil {
		return c.usageError(s, "%v", err)
	}

	if !o.yes {
		fmt.Fprintf(s.stdout, "deposit probe would write this record twice with a conditional create\n"+
			"(PUT, If-None-Match: *), then delete it where the server allows:\n\n"+
			"  %s\n  %s\n\n"+
			"The name is new on every run, so no record of yours is touched. On a repository\n"+
			"that mints identifiers (DOIs) it would be a real record: probe a test instance.\n", p.URL, p.Body)
		fmt.Fprintf(s.stderr, "deposit probe: nothing written: run again with --yes to write the probe record\n")
		return exitStop
	}

	rep, err := p.Run(ctx)
	fmt.Fprintf(s.stdout, "probe record: %s\n", rep.URL)
	if len(rep.FirstTries) > 0 {
		fmt.Fprintf(s.stdout, "  first write:  %s\n", triesLine(rep.FirstTries))
		if rep.FirstFound {
			fmt.Fprintf(s.stdout, "                (the attempt whose answer was lost made the record)\n")
		}
	}
	if len(rep.SecondTries) > 0 {
		fmt.Fprintf(s.stdout, "  second write: %s\n", triesLine(rep.SecondTries))
	}
	code = exitStop
	switch {
	case err != nil:
		fmt.Fprintf(s.stderr, "deposit probe: %s\n", withHint(oneLine(err), err, proto))
		if errors.Is(err, client.ErrUnresolved) {
			fmt.Fprintf(s.stderr, "The probe could not tell whether this endpoint refuses a second create.\n")
		}
	case rep.Verdict == client.ProbeHonoured:
		fmt.Fprintf(s.stdout, "good: the server created the record, then refused a second create of it as existing.\n"+
			"It prevents duplicates itself, so retries and concurrent runs are safe.\n")
		code = exitDone
	case rep.Verdict == client.ProbeIgnored:
		fmt.Fprintf(s.stdout, "created twice: the server accepted a second create of the same record, so it\n"+
			"ignores If-None-Match and cannot tell deposit that a record already exists.\n"+
			"Only the local store (--db of deposit run) prevents duplicates here: keep it,\n"+
			"and give every process that deposits to this endpoint the same store file.\n"+
			"A retry after a lost answer, or a run with another store, writes the record\n"+
			"again: the same bytes at the same name on a plain file server, but a second\n"+
			"record on a repository that mints identifiers.\n")
		code = exitFailed
	}
	switch {
	case rep.Deleted && rep.DeleteStatus == 0:
		fmt.Fprintf(s.stdout, "no probe record was left.\n")
	case rep.Deleted:
		fmt.Fprintf(s.stdout, "deleted the probe record.\n")
	case rep.DeleteRefused && (rep.DeleteStatus == http.StatusUnauthorized || rep.DeleteStatus == http.StatusForbidden):
		fmt.Fprintf(s.stdout, "the probe record stays: these credentials may not delete it (DELETE answered %s): %s\n", statusLine(rep.DeleteStatus), rep.URL)
	case rep.DeleteRefused:
		fmt.Fprintf(s.stdout, "the probe record stays: the server does not allow deleting it (DELETE answered %s): %s\n", statusLine(rep.DeleteStatus), rep.URL)
	case rep.DeleteProblem != "":
		fmt.Fprintf(s.stdout, "could not delete the probe record (%s): remove %s yourself.\n", rep.DeleteProblem, rep.URL)
	}
	return code
}

// statusLine is "201 Created".
func statusLine(status int) string {
	return fmt.Sprintf("%d %s", status, http.StatusText(status))
}

// triesLine is the answers to a write's attempts, in order, a run of
// the same answer counted: "2 times 503 Service Unavailable, then 201
// Created".
func triesLine(tries []string) string {
	var parts []string
	for i := 0; i < len(tries); {
		n := 1
		for i+n < len(tries) && tries[i+n] == tries[i] {
			n++
		}
		part := tries[i]
		if n > 1 {
			part = fmt.Sprintf("%d times %s", n, part)
		}
		parts = append(parts, part)
		i += n
	}
	return strings.Join(parts, ", then ")
}
