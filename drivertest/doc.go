// Package drivertest provides what a target's author needs to test it as
// the built-in targets are tested: faults around any handler, the step
// rules the engine enforces, and a harness that kills batches.
package drivertest
