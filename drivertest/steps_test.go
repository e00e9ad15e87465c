package drivertest_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/target/invenio"
	"github.com/depositkit/deposit/target/put"
)

// twoSteps is a driver of a create and a publish; mutate breaks its steps.
type twoSteps struct{ mutate func([]driver.Step) }

func (twoSteps) Name() string              { return "two http://127.0.0.1/x" }
func (twoSteps) StepTargets() []string     { return []string{"two http://127.0.0.1/x publish"} }
func (twoSteps) SecretFingerprint() string { return "" }
func (twoSteps) Guards(string) bool        { return false }
func (d twoSteps) Steps(k canonical.Keyed, _ string) ([]driver.Step, error) {
	build := func([]string) (driver.Request, error) {
		return driver.Request{Method: http.MethodPost, URL: "http://127.0.0.1/x"}, nil
	}
	judge := func(driver.Answer) driver.Verdict { return driver.Verdict{Class: driver.Created} }
	look := &driver.Check{Build: build, Judge: func(driver.Answer) driver.Finding { return driver.Finding{Kind: driver.Absent} }}
	steps := []driver.Step{
		{Target: d.Name(), Key: k.Key, Primary: true, Durable: true, Check: look, Build: build, Judge: judge},
		{Label: "publish", Target: d.StepTargets()[0], Key: k.Key, Durable: true, Check: look, Build: build, Judge: judge},
	}
	if d.mutate != nil {
		d.mutate(steps)
	}
	return steps, nil
}

// CheckDriver passes the built-in targets and a driver that keeps the
// rules, and names the rule a broken one breaks.
func TestCheckDriverNamesTheRuleBroken(t *testing.T) {
	payload := []byte(`{"metadata":{"title":"x"}}`)
	for name, target := range map[string]interface {
		Driver() (driver.Driver, error)
	}{"put": put.Target{Endpoint: "http://127.0.0.1/x"}, "invenio": invenio.Target{Endpoint: "http://127.0.0.1/api"}} {
		d, err := target.Driver()
		require.NoError(t, err)
		require.NoError(t, drivertest.CheckDriver(d, payload), name)
	}
	require.NoError(t, drivertest.CheckDriver(twoSteps{}, payload))
	for rule, mutate := range map[string]func([]driver.Step){
		"no check":                        func(s []driver.Step) { s[1].Check = nil },
		"no primary step":                 func(s []driver.Step) { s[0].Primary = false; s[0].Label = "create" },
		"not the driver's Name":           func(s []driver.Step) { s[0].Target = "other" },
		"which StepTargets does not name": func(s []driver.Step) { s[1].Target = "two publish" },
	} {
		err := drivertest.CheckDriver(twoSteps{mutate: mutate}, payload)
		require.ErrorContains(t, err, rule)
		require.ErrorContains(t, err, "payload 1: ")
	}
	require.ErrorContains(t, drivertest.CheckDriver(twoSteps{}, []byte(`{`)), "payload 1")
}

// A step that nothing guards breaks a rule: with no store row and no
// server that refuses a second effect, a retry could write twice.
func ExampleCheckSteps() {
	build := func([]string) (driver.Request, error) {
		return driver.Request{Method: http.MethodPost, URL: "http://127.0.0.1/records"}, nil
	}
	judge := func(driver.Answer) driver.Verdict { return driver.Verdict{Class: driver.Created} }
	err := drivertest.CheckSteps([]driver.Step{{Primary: true, Build: build, Judge: judge}})
	fmt.Println(err)
	// Output:
	// steps: step 1 (the record) is primary but not durable: the primary step's row is the deposit's intent
}
