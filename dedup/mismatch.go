package dedup

import "fmt"

// SettingsMismatchError is the error of CheckSettings for a target first
// used with other settings: it names both, so a caller can say which one
// differs in its own terms. It wraps ErrSettingsMismatch.
type SettingsMismatchError struct {
	Target   string
	Recorded Settings // the settings the target was first used with
	Given    Settings // the settings CheckSettings was called with
}

func (e *SettingsMismatchError) Error() string {
	return fmt.Sprintf("%v: target %s was first used with %s, now %s", ErrSettingsMismatch, e.Target, describe(e.Recorded), describe(e.Given))
}

func (e *SettingsMismatchError) Unwrap() error { return ErrSettingsMismatch }
