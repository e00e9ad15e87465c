package client

import "github.com/depositkit/deposit/driver"

// The engine speaks the step contract of package driver; these aliases keep
// its code short. Nothing here adds to the contract.
type (
	step        = driver.Step
	request     = driver.Request
	answer      = driver.Answer
	class       = driver.Class
	verdict     = driver.Verdict
	check       = driver.Check
	finding     = driver.Finding
	findingKind = driver.FindingKind
)
