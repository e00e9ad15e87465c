package drivertest

import (
	"fmt"
	"slices"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/steprules"
)

// CheckSteps reports whether a deposit's steps keep the rules the engine
// enforces before a deposit's first request (the package driver doc lists
// them under "Rules for a list of steps"): it is the engine's own check,
// and its error names the step and the rule. A run whose steps break a
// rule stops (client.ErrStopRun) before anything is sent.
func CheckSteps(steps []driver.Step) error { return steprules.Check(steps) }

// CheckDriver checks the steps d returns for each payload (a JSON
// document, keyed as the engine keys it by default: canonical.FormJCS,
// nothing ignored; not a dataset): that Steps accepts it, that the steps
// keep the rules of [CheckSteps], and that their store rows are named as
// the engine expects: the primary step's by [driver.Driver.Name] and the
// deposit key, every other durable step's by one of
// [driver.Driver.StepTargets], whose settings the engine guards.
func CheckDriver(d driver.Driver, payloads ...[]byte) error {
	keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
	if err != nil {
		return err
	}
	for i, payload := range payloads {
		k, err := keyer.Key(payload)
		if err != nil {
			return fmt.Errorf("payload %d: %w", i+1, err)
		}
		steps, err := d.Steps(k, "")
		if err != nil {
			return fmt.Errorf("payload %d: Steps: %w", i+1, err)
		}
		if err := CheckSteps(steps); err != nil {
			return fmt.Errorf("payload %d: %w", i+1, err)
		}
		if err := checkRows(d, k.Key, steps); err != nil {
			return fmt.Errorf("payload %d: %w", i+1, err)
		}
	}
	return nil
}

// checkRows checks the store rows of steps against d's names.
func checkRows(d driver.Driver, key string, steps []driver.Step) error {
	others := d.StepTargets()
	for i, s := range steps {
		switch {
		case s.Primary && (s.Target != d.Name() || s.Key != key):
			return fmt.Errorf("steps: step %d is primary but its row is (%s, %s), not the driver's Name and the deposit key (%s, %s)",
				i+1, s.Target, s.Key, d.Name(), key)
		case s.Durable && !s.Primary && !slices.Contains(others, s.Target):
			return fmt.Errorf("steps: step %d (%s) is durable under target %q, which StepTargets does not name: the engine would not guard its key settings",
				i+1, s.Label, s.Target)
		}
	}
	return nil
}
