// Package steprules provides the rules a deposit's list of steps must
// keep: the engine (package client) checks every deposit's steps with
// Check before its first request, and package drivertest exports the same
// check for a driver's own tests.
package steprules

import (
	"errors"
	"fmt"

	"github.com/depositkit/deposit/driver"
)

// A deposit is a sequence of steps (create; upload file P; publish; send an
// event), which a target returns for each payload (driver.Step). The engine
// guards every step the same way; a step only says what to send and what an
// answer means. These are the rules a list of steps must follow; nothing
// here sends a request or touches the store.

// Check refuses a list of steps the engine could not guard as its
// target means. Each rule names a mistake that would otherwise pass
// silently: the engine would guard something other than what the target
// declared. It runs before a deposit's first request, so a target's mistake
// is that deposit's error and nothing is sent.
func Check(steps []driver.Step) error {
	if len(steps) == 0 {
		return errors.New("steps: none: a deposit sends at least one request")
	}
	primary := -1
	for i := range steps {
		s := &steps[i]
		if err := checkStep(i, s); err != nil {
			return err
		}
		if s.Primary {
			if primary >= 0 {
				return fmt.Errorf("steps: %s and %s are both primary: exactly one step's row is the deposit's intent and its identifier the deposit's", stepName(primary, &steps[primary]), stepName(i, s))
			}
			primary = i
		}
		for j := range i {
			if o := &steps[j]; s.Durable && o.Durable && s.Target == o.Target && s.Key == o.Key {
				return fmt.Errorf("steps: %s and %s share one store row (%s, %s): each durable step is guarded by a row of its own", stepName(j, o), stepName(i, s), s.Target, s.Key)
			}
		}
	}
	if primary < 0 {
		return errors.New("steps: no primary step: exactly one step's row is the deposit's intent and its identifier the deposit's")
	}
	return nil
}

// checkStep applies the rules that concern one step alone.
func checkStep(i int, s *driver.Step) error {
	name := stepName(i, s)
	switch {
	case (s.Build == nil && s.Parts == nil) || s.Judge == nil:
		return fmt.Errorf("steps: %s: a step needs both build and judge", name)
	case !s.Primary && s.Label == "":
		return fmt.Errorf("steps: step %d has no label: every step but the primary one is named in errors", i+1)
	case s.Primary && !s.Durable:
		return fmt.Errorf("steps: %s is primary but not durable: the primary step's row is the deposit's intent", name)
	case s.Durable && (s.Target == "" || s.Key == ""):
		return fmt.Errorf("steps: %s is durable without a store row (target and key)", name)
	case s.KeepBody && !s.Primary:
		return fmt.Errorf("steps: %s keeps its body but is not primary: only the primary step's first body is kept, by the deposit's claim", name)
	case !s.Durable && !s.Arbitrated:
		return fmt.Errorf("steps: %s is neither durable nor arbitrated: with no row, nothing would record that it may have been sent, and the server would not refuse a second effect", name)
	case s.Durable && !s.Arbitrated && s.Check == nil:
		return fmt.Errorf("steps: %s is not arbitrated and has no check: after an ambiguous answer nothing could tell whether it took effect", name)
	case s.Accepts && (s.Check == nil || !s.Durable):
		return fmt.Errorf("steps: %s may be accepted to settle later but has no check or is not durable: its check is how it is polled, and its row is what keeps a later run from sending it again", name)
	case s.Recheck != "" && (s.Check == nil || s.Arbitrated):
		return fmt.Errorf("steps: %s has a recheck row but no check, or is arbitrated: a recheck looks again for what a check missed", name)
	case s.RecordID && !s.Durable:
		return fmt.Errorf("steps: %s names the record id but is not durable: a replay could not answer it from the store", name)
	case s.Parts != nil && (!s.Arbitrated || s.Durable):
		return fmt.Errorf("steps: %s is sent in parts but is durable or not arbitrated: its upload is journaled in the store, and its completion must be the server's to refuse twice", name)
	case s.Parts != nil && !partsComplete(s.Parts):
		return fmt.Errorf("steps: %s is sent in parts but lacks one of Parts' functions, or has no part", name)
	}
	return nil
}

// stepName names step i of a list in Check's errors.
func stepName(i int, s *driver.Step) string {
	if s.Label == "" {
		return fmt.Sprintf("step %d (the record)", i+1)
	}
	return fmt.Sprintf("step %d (%s)", i+1, s.Label)
}

// partsComplete reports whether p has every function the engine calls
// and at least one part.
func partsComplete(p *driver.Parts) bool {
	return p.Count >= 1 && p.PartSize >= 1 && p.Begin != nil && p.JudgeBegin != nil && p.Part != nil && p.List != nil &&
		p.ReadList != nil && p.Complete != nil && p.Abort != nil && p.JudgeOther != nil
}
