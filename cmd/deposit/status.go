package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

const statusAbout = `Shows what the store remembers: counts by state (per target and in total) and
every failure with its reason. A target is a protocol plus an endpoint.
States: done (confirmed by the server), failed (refused for good), pending
(a request was started and its outcome is unknown: run the batch again).
Rows of an invenio-recheck target are notes, not deposits: each is a record
created after a search for it found nothing, counted "to search again" (not
pending) until the next run of the batch searches for it once more.
Status only reads the store: it never creates, upgrades or changes it.`

const statusNotes = `Output:
  --json           one object: {"total","pending","done","failed","recheck",
                   "targets":[{"target","total","pending","done","failed",
                   "recheck"},...]}; "recheck" counts the notes to search
                   again, which "pending" leaves out
  --list           every row, grouped by target, in key order
  --list --json    JSON Lines, one row each: {"target","key","state","outcome",
                   "identifier","status","error","attempts"}; empty values omitted
Targets are printed without user info or query strings, except in the JSON
output, which gives them as the store holds them. A credential in a query
(?access_token=...) is held as a digest, never as given, and identifiers are
printed without it, in a store an older version wrote too.
`

// rowJSON is one row of `status --list --json`.
type rowJSON struct {
	Target     string `json:"target"`
	Key        string `json:"key"`
	State      string `json:"state"`
	Outcome    string `json:"outcome,omitempty"`
	Identifier string `json:"identifier,omitempty"`
	Status     int    `json:"status,omitempty"`
	Error      string `json:"error,omitempty"`
	Attempts   int    `json:"attempts"`
}

// countsJSON is the state counts of the `status --json` object.
type countsJSON struct {
	Target  string `json:"target,omitempty"`
	Total   int    `json:"total"`
	Pending int    `json:"pending"`
	Done    int    `json:"done"`
	Failed  int    `json:"failed"`
	Recheck int    `json:"recheck"` // a recheck target's pending notes
}

// add adds the counts of target to c.
func (c *countsJSON) add(target string, n dedup.Counts) {
	c.Total += n.Pending + n.Done + n.Failed
	if protocol.IsRecheck(target) {
		c.Recheck += n.Pending
	} else {
		c.Pending += n.Pending
	}
	c.Done += n.Done
	c.Failed += n.Failed
}

func statusCmd(ctx context.Context, args []string, s streams) int {
	var (
		db          string
		asJSON      bool
		list        bool
		stateFilter string
	)
	c := newCommand("status", "deposit status [--db FILE|URL] [--json] [--list [--state STATE]]", statusAbout, statusNotes)
	c.fs.StringVar(&db, "db", "deposit.db", "dedup store: a SQLite `FILE` or a postgres:// URL")
	c.fs.BoolVar(&asJSON, "json", false, "machine-readable output (an object; JSON Lines with --list)")
	c.fs.BoolVar(&list, "list", false, "list every stored row")
	c.fs.StringVar(&stateFilter, "state", "", "with --list, only rows in `STATE`: pending, done or failed")
	pos, code, ok := c.parse(args, s)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return c.usageError(s, "unexpected argument %q", pos[0])
	}
	state := dedup.State(stateFilter)
	switch state {
	case "", dedup.StatePending, dedup.StateDone, dedup.StateFailed:
	default:
		return c.usageError(s, "--state %q: want pending, done or failed", stateFilter)
	}
	// Read-only: a report never creates, migrates or otherwise writes the
	// store, however old or busy it is.
	store, err := openStatusStore(ctx, db)
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(s.stderr, "deposit status: no store at %s (%v): nothing was deposited with this --db\n", showDB(db), err)
		return exitStop
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit status: %s\n", explainStore(db, err))
		return exitStop
	}
	defer store.Close()

	out := bufio.NewWriterSize(s.stdout, 64<<10)
	if list {
		err = listRows(ctx, store, state, asJSON, out)
	} else {
		err = summarize(ctx, store, db, asJSON, out)
	}
	if ferr := out.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(s.stderr, "deposit status: %v\n", err)
		return exitStop
	}
	return exitDone
}

// listRows streams every row (of state, if set).
func listRows(ctx context.Context, store statusStore, state dedup.State, asJSON bool, w io.Writer) error {
	target := ""
	first := true
	for rec, err := range store.List(ctx, "", state) {
		if err != nil {
			return err
		}
		if asJSON {
			b, err := json.Marshal(rowOf(rec))
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\n", b)
			continue
		}
		if first || rec.Target != target {
			target, first = rec.Target, false
			fmt.Fprintf(w, "target %s\n", redact(target))
		}
		fmt.Fprintf(w, "  %-7s %s attempts=%d", rec.State, rec.Key, rec.Attempts)
		if rec.Status != 0 {
			fmt.Fprintf(w, " status=%d", rec.Status)
		}
		if rec.Outcome != "" {
			fmt.Fprintf(w, " %s", rec.Outcome)
		}
		if rec.Identifier != "" {
			fmt.Fprintf(w, " %s", credential.Strip(rec.Identifier))
		}
		if rec.Problem != "" {
			fmt.Fprintf(w, " error: %s", rec.Problem)
		}
		fmt.Fprintln(w)
	}
	return nil
}

func rowOf(rec dedup.Record) rowJSON {
	return rowJSON{
		Target: credential.Digest(rec.Target), Key: rec.Key, State: string(rec.State), Outcome: string(rec.Outcome),
		Identifier: credential.Strip(rec.Identifier), Status: rec.Status, Error: rec.Problem, Attempts: rec.Attempts,
	}
}

// summarize prints counts per target and in total, then the failures.
func summarize(ctx context.Context, store statusStore, db string, asJSON bool, w io.Writer) error {
	counts, err := store.CountByTarget(ctx)
	if err != nil {
		return err
	}
	var total countsJSON
	targets := make([]*countsJSON, 0, len(counts))
	for _, c := range counts {
		t := &countsJSON{Target: credential.Digest(c.Target)}
		t.add(c.Target, c.Counts)
		targets = append(targets, t)
		total.add(c.Target, c.Counts)
	}
	if asJSON {
		obj := struct {
			countsJSON
			Targets []*countsJSON `json:"targets"`
		}{total, targets}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
		return nil
	}
	fmt.Fprintf(w, "store %s: %s: %d done, %d failed, %d pending%s\n", showDB(db), plural(int(total.Total), "record"), total.Done, total.Failed, total.Pending, toSearchAgain(total.Recheck))
	for _, t := range targets {
		if protocol.IsRecheck(t.Target) {
			fmt.Fprintf(w, "  %s: %d done, %d failed%s\n", redact(t.Target), t.Done, t.Failed, toSearchAgain(t.Recheck))
			continue
		}
		fmt.Fprintf(w, "  %s: %d done, %d failed, %d pending\n", redact(t.Target), t.Done, t.Failed, t.Pending)
	}
	if total.Failed > 0 {
		fmt.Fprintf(w, "\nfailures (refused by the server; re-sent only with run --retry-failed):\n")
		for rec, err := range store.List(ctx, "", dedup.StateFailed) {
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  %s %s: status %d: %s\n", redact(rec.Target), rec.Key, rec.Status, rec.Problem)
		}
	}
	if total.Pending > 0 {
		fmt.Fprintf(w, "\n%d pending: a run was interrupted before the server's answer arrived; run the batch again to settle them\n", total.Pending)
	}
	if total.Recheck > 0 {
		fmt.Fprintf(w, "\n%d to search again: records created after a search for them found nothing; the next run of the batch searches for each once more and reports a duplicate the search index hid\n", total.Recheck)
	}
	return nil
}

// toSearchAgain is ", N to search again", or "" for none.
func toSearchAgain(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d to search again", n)
}
