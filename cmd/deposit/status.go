package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/credential"
	"github.com/depositkit/deposit/internal/protocol"
)

const statusAbout = `Shows what the store remembers: counts of deposits by state (per target and in
total), the steps of each target's deposits beneath it, and every failure
with its reason. A target is a protocol plus an endpoint.
States: done (confirmed by the server), failed (refused for good), pending
(a request was started and its outcome is unknown: run the batch again).
A deposit is one row, one input line: InvenioRDM's published record (its
draft under run --no-publish), DataCite's DOI, or the stored document.
Its other steps are rows of their own, shown as steps: an InvenioRDM
deposit's draft and file rows (three per file: start, upload, commit), a
DataCite deposit's publish or register event. A step's rows are under the
deposits' target with "-step" after the protocol ("invenio-file <endpoint>"),
and a target of one's own that names its steps so (driver.StepTarget) is
counted the same way. Rows of the recheck step are
notes, not deposits: each is a record created after a search for it found
nothing, counted "to search again" (not pending) until the next run of the
batch searches for it once more.
Status only reads the store: it never creates, upgrades or changes it.`

const statusNotes = `Output:
  --json           one object: {"total","pending","done","failed","recheck",
                   "steps":{"total","pending","done","failed"},
                   "targets":[{"target","kind","step","of","total","pending",
                   "done","failed","recheck"},...]}; the top-level counts are
                   deposits, "steps" counts the step rows; a target's "kind"
                   is "deposit" or "step", "step" names the step ("draft",
                   "file", "recheck", "publish", ...) and "of" is the target
                   of its deposits; "recheck" counts the notes to search
                   again, which "pending" leaves out
  --list           every row, deposits and steps, grouped by target, in key
                   order
  --list --json    JSON Lines, one row each: {"target","key","state","outcome",
                   "identifier","status","error","attempts"}; empty values omitted
  --objects        every object (a record kept by its identity: run
                   --identity, a DataCite DOI, a Crossref DOI), by target
                   and object key: its identifier, the version it holds and
                   since when, its updates, stale lines and update in
                   flight; with --json
                   JSON Lines {"target","object","identifier","version",
                   "applied_at","updates","stale","pending"}
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

// targetJSON is one target of the `status --json` object: its rows' counts,
// and whether the rows are deposits or the steps of deposits.
type targetJSON struct {
	countsJSON
	// Kind is "deposit" for a target whose rows are deposits, one each,
	// "step" for one whose rows are steps of the deposits of Of.
	Kind string `json:"kind"`
	// Step names the step the rows are ("draft", "file", "recheck",
	// "publish"); "" for a deposit's own row unless it is a draft.
	Step string `json:"step,omitempty"`
	// Of is the target of the deposits the steps are of, "" if the store
	// holds none of them.
	Of string `json:"of,omitempty"`
}

// stepCounts are the counts of step rows in the `status --json` object.
type stepCounts struct {
	Total   int `json:"total"`
	Pending int `json:"pending"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
}

// targetGroup is a deposit target and the targets of its steps: one
// protocol and endpoint (and DataCite prefix).
type targetGroup struct {
	deposit *targetJSON   // nil when the store holds steps only
	name    string        // the deposit target's name, as the store holds it
	steps   []*targetJSON // in store order
}

// groupTargets sorts the store's targets into deposits and steps. A deposit
// is a row under a target's primary step (protocol.Step gives the step ""),
// and its other steps are rows under the same protocol and endpoint with a
// step name: "proto-step endpoint", the rule of driver.StepTarget, which a
// target of one's own follows too (its steps are found by driver.StepOf,
// where the store holds its deposits' target); InvenioRDM's drafts are the deposits where the store holds no
// published ones for the endpoint (a batch run with --no-publish).
func groupTargets(counts []dedup.TargetCounts) []*targetGroup {
	type groupKey struct{ proto, rest string }
	byKey := map[groupKey]*targetGroup{}
	var groups []*targetGroup
	primary := map[groupKey]bool{}
	held := make(map[string]bool, len(counts))
	for _, c := range counts {
		held[c.Target] = true
	}
	split := func(target string) (proto, step, rest string) {
		proto, step, rest = protocol.Step(target)
		if step == "" && !slices.Contains(protocol.Names(), proto) {
			// A target of one's own names its steps by driver.StepTarget.
			if d, s, ok := driver.StepOf(target, func(t string) bool { return held[t] }); ok {
				proto, rest, _ = strings.Cut(d, " ")
				step = s
			}
		}
		return proto, step, rest
	}
	for _, c := range counts {
		proto, step, rest := split(c.Target)
		if step == "" {
			primary[groupKey{proto, rest}] = true
		}
	}
	for _, c := range counts {
		proto, step, rest := split(c.Target)
		k := groupKey{proto, rest}
		g := byKey[k]
		if g == nil {
			g = &targetGroup{}
			byKey[k] = g
			groups = append(groups, g)
		}
		t := &targetJSON{countsJSON: countsJSON{Target: credential.Digest(c.Target)}, Step: step}
		t.add(c.Target, c.Counts)
		isDeposit := step == "" || (step != "" && step == targetSpecs[proto].standInStep && !primary[k])
		if isDeposit && g.deposit == nil {
			t.Kind, g.deposit, g.name = "deposit", t, c.Target
			continue
		}
		t.Kind = "step"
		g.steps = append(g.steps, t)
	}
	for _, g := range groups {
		if g.deposit != nil {
			for _, s := range g.steps {
				s.Of = g.deposit.Target
			}
		}
	}
	return groups
}

func statusCmd(ctx context.Context, args []string, s streams) int {
	var (
		db          string
		asJSON      bool
		list        bool
		objects     bool
		stateFilter string
	)
	c := newCommand("status", "deposit status [--db FILE|URL] [--json] [--list [--state STATE] | --objects]", statusAbout, statusNotes)
	c.fs.StringVar(&db, "db", "deposit.db", "dedup store: a SQLite `FILE` or a postgres:// URL")
	c.fs.BoolVar(&asJSON, "json", false, "machine-readable output (an object; JSON Lines with --list)")
	c.fs.BoolVar(&list, "list", false, "list every stored row")
	c.fs.BoolVar(&objects, "objects", false, "list every object (a record kept by its identity): the version it holds and since when")
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

	if list && objects {
		return c.usageError(s, "--list and --objects list different things: give one")
	}
	out := bufio.NewWriterSize(s.stdout, 64<<10)
	if objects {
		err = listObjects(ctx, store, asJSON, out)
	} else if list {
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

// objectJSON is one object of `status --objects --json`.
type objectJSON struct {
	Target     string `json:"target"`
	Object     string `json:"object"`
	Identifier string `json:"identifier"`
	Version    string `json:"version"`
	AppliedAt  string `json:"applied_at,omitempty"`
	Updates    int    `json:"updates"`
	Stale      int    `json:"stale"`
	Pending    string `json:"pending,omitempty"`
}

// listObjects streams every object the store holds.
func listObjects(ctx context.Context, store statusStore, asJSON bool, w io.Writer) error {
	target, first := "", true
	for o, err := range store.ListObjects(ctx, "") {
		if err != nil {
			return err
		}
		applied := ""
		if !o.AppliedAt.IsZero() {
			applied = o.AppliedAt.UTC().Format(time.RFC3339)
		}
		if asJSON {
			b, err := json.Marshal(objectJSON{Target: credential.Digest(o.Target), Object: o.Key, Identifier: credential.Strip(o.Identifier),
				Version: o.Version, AppliedAt: applied, Updates: o.Updates, Stale: o.Stale, Pending: o.Pending})
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "%s\n", b)
			continue
		}
		if first || o.Target != target {
			target, first = o.Target, false
			fmt.Fprintf(w, "target %s\n", redact(target))
		}
		fmt.Fprintf(w, "  %s %s version %s since %s, %d %s, %d stale", o.Key, credential.Strip(o.Identifier), o.Version, applied,
			o.Updates, pick(o.Updates, "update", "updates"), o.Stale)
		if o.Pending != "" {
			fmt.Fprintf(w, ", update to %s pending", o.Pending)
		}
		fmt.Fprintln(w)
	}
	return nil
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

// summarize prints counts of deposits per target and in total, each
// target's steps beneath it, then the failures.
func summarize(ctx context.Context, store statusStore, db string, asJSON bool, w io.Writer) error {
	counts, err := store.CountByTarget(ctx)
	if err != nil {
		return err
	}
	groups := groupTargets(counts)
	var total countsJSON // deposits, and the notes to search again
	var steps stepCounts
	targets := make([]*targetJSON, 0, len(counts))
	for _, g := range groups {
		if d := g.deposit; d != nil {
			targets = append(targets, d)
			total.Total += d.Total
			total.Pending += d.Pending
			total.Done += d.Done
			total.Failed += d.Failed
		}
		for _, s := range g.steps {
			targets = append(targets, s)
			steps.Total += s.Total
			steps.Pending += s.Pending + s.Recheck
			steps.Done += s.Done
			steps.Failed += s.Failed
			total.Recheck += s.Recheck
		}
	}
	objects, err := store.CountObjects(ctx, "")
	if err != nil {
		return err
	}
	if asJSON {
		obj := struct {
			countsJSON
			Steps   stepCounts    `json:"steps"`
			Objects *objectsJSON  `json:"objects,omitempty"`
			Targets []*targetJSON `json:"targets"`
		}{total, steps, objectsOf(objects), targets}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", b)
		return nil
	}
	fmt.Fprintf(w, "store %s: %s: %d done, %d failed, %d pending%s\n", showDB(db), plural(total.Total, "deposit"), total.Done, total.Failed, total.Pending, toSearchAgain(total.Recheck))
	for _, g := range groups {
		if d := g.deposit; d != nil {
			fmt.Fprintf(w, "  %s: %s: %d done, %d failed, %d pending\n", redact(d.Target), plural(d.Total, "deposit"), d.Done, d.Failed, d.Pending)
		} else {
			proto, _, rest := protocol.Step(g.steps[0].Target)
			fmt.Fprintf(w, "  %s: no deposits, only steps\n", redact(proto+" "+rest))
		}
		for _, s := range g.steps {
			if protocol.IsRecheck(s.Target) {
				fmt.Fprintf(w, "    step %s: %d done, %d failed%s\n", s.Step, s.Done, s.Failed, toSearchAgain(s.Recheck))
				continue
			}
			fmt.Fprintf(w, "    step %s: %d done, %d failed, %d pending\n", s.Step, s.Done, s.Failed, s.Pending)
		}
	}
	if objects.Objects > 0 {
		fmt.Fprintf(w, "  objects: %d, %s applied (%d first, %d %s), %s, %d %s pending, %d %s failed\n",
			objects.Objects, plural(objects.Versions, "version"), objects.Versions-objects.Updates, objects.Updates, pick(objects.Updates, "update", "updates"),
			plural(objects.Stale, "stale line"), objects.Pending, pick(objects.Pending, "update", "updates"), objects.Failed, pick(objects.Failed, "version", "versions"))
	}
	if total.Failed > 0 || steps.Failed > 0 {
		fmt.Fprintf(w, "\nfailures (refused by the server; re-sent only with run --retry-failed):\n")
		for rec, err := range store.List(ctx, "", dedup.StateFailed) {
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "  %s %s: status %d: %s\n", redact(rec.Target), rec.Key, rec.Status, rec.Problem)
		}
	}
	if total.Pending > 0 {
		fmt.Fprintf(w, "\n%s: a run was interrupted before the server's answer arrived; run the batch again to settle them\n", plural(total.Pending, "pending deposit"))
	}
	if total.Recheck > 0 {
		fmt.Fprintf(w, "\n%d to search again: records created after a search for them found nothing; the next run of the batch searches for each once more and reports a duplicate the search index hid\n", total.Recheck)
	}
	return nil
}

// objectsJSON counts the store's objects (records kept by identity): their versions
// applied, the updates among them, the stale lines, the updates in flight
// and the versions refused.
type objectsJSON struct {
	Objects  int `json:"objects"`
	Versions int `json:"versions"`
	Updates  int `json:"updates"`
	Stale    int `json:"stale"`
	Pending  int `json:"pending"`
	Failed   int `json:"failed"`
}

// objectsOf is c for --json, nil for a store that holds no object.
func objectsOf(c dedup.ObjectCounts) *objectsJSON {
	if c.Objects == 0 {
		return nil
	}
	return &objectsJSON{Objects: c.Objects, Versions: c.Versions, Updates: c.Updates, Stale: c.Stale, Pending: c.Pending, Failed: c.Failed}
}

// toSearchAgain is ", N to search again", or "" for none.
func toSearchAgain(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d to search again", n)
}
