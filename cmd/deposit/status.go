package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/depositkit/deposit/dedup"
)

const statusAbout = `Shows what the store remembers: counts by state (per target and in total) and
every failure with its reason. A target is a protocol plus an endpoint.
States: done (confirmed by the server), failed (refused for good), pending
(a request was started and its outcome is unknown: run the batch again).`

const statusNotes = `Output:
  --json           one object: {"total","pending","done","failed","targets":[
                   {"target","total","pending","done","failed"},...]}
  --list           every row, grouped by target, in key order
  --list --json    JSON Lines, one row each: {"target","key","state","outcome",
                   "identifier","status","error","attempts"}; empty values omitted
Targets are printed without user info or query strings (where an endpoint may
carry a token), except in the JSON output, which gives them exactly.
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
}

func (c *countsJSON) add(st dedup.State) {
	c.Total++
	switch st {
	case dedup.StatePending:
		c.Pending++
	case dedup.StateDone:
		c.Done++
	case dedup.StateFailed:
		c.Failed++
	}
}

func statusCmd(ctx context.Context, args []string, s streams) int {
	var (
		db          string
		asJSON      bool
		list        bool
		stateFilter string
	)
	c := newCommand("status", "deposit status [--db FILE] [--json] [--list [--state STATE]]", statusAbout, statusNotes)
	c.fs.StringVar(&db, "db", "deposit.db", "dedup store `FILE`")
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
	if _, err := os.Stat(db); err != nil {
		fmt.Fprintf(s.stderr, "deposit status: no store at %s (%v): nothing was deposited with this --db\n", db, err)
		return exitStop
	}
	store, err := dedup.Open(db)
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
func listRows(ctx context.Context, store dedup.Store, state dedup.State, asJSON bool, w io.Writer) error {
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
			fmt.Fprintf(w, " %s", rec.Identifier)
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
		Target: rec.Target, Key: rec.Key, State: string(rec.State), Outcome: string(rec.Outcome),
		Identifier: rec.Identifier, Status: rec.Status, Error: rec.Problem, Attempts: rec.Attempts,
	}
}

// summarize prints counts per target and in total, then the failures.
func summarize(ctx context.Context, store dedup.Store, db string, asJSON bool, w io.Writer) error {
	var (
		total   countsJSON
		targets []*countsJSON
		cur     *countsJSON
	)
	for rec, err := range store.List(ctx, "", "") {
		if err != nil {
			return err
		}
		if cur == nil || cur.Target != rec.Target {
			cur = &countsJSON{Target: rec.Target}
			targets = append(targets, cur)
		}
		cur.add(rec.State)
		total.add(rec.State)
	}
	if asJSON {
		obj := struct {
			countsJSON
			Targets []*countsJSON `json:"targets"`
		}{total, targets}
		if obj.Targets == nil {
			obj.Targets = []*countsJSON{}
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
		return nil
	}
	fmt.Fprintf(w, "store %s: %d records: %d done, %d failed, %d pending\n", db, total.Total, total.Done, total.Failed, total.Pending)
	for _, t := range targets {
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
	return nil
}
