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

// The built-in drivers' optional capabilities, checked when the package
// compiles: the engine finds a capability by a type assertion, so a method
// misnamed would silently turn it off.
var (
	_ driver.RateSetter       = dataciteDriver{}
	_ driver.RateSetter       = invenioDriver{}
	_ driver.TransportWrapper = invenioDriver{}
	_ driver.TransportWrapper = s3Driver{}
	_ driver.RequestPacer     = invenioDriver{}
	_ driver.Seeder           = invenioDriver{}
	_ driver.FileMD5er        = invenioDriver{}
	_ driver.FileMD5er        = couchdbDriver{}
)
