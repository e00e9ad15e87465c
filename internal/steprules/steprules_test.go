package steprules

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/driver"
)

// validSteps is a two-step deposit that keeps every rule: a draft the
// server does not arbitrate (checked), then the primary publish.
func validSteps() []driver.Step {
	build := func([]string) (driver.Request, error) {
		return driver.Request{Method: http.MethodPost, URL: "http://127.0.0.1/x"}, nil
	}
	judge := func(driver.Answer) driver.Verdict { return driver.Verdict{Class: driver.Created} }
	found := &driver.Check{Build: build, Judge: func(driver.Answer) driver.Finding { return driver.Finding{Kind: driver.Absent} }}
	return []driver.Step{
		{Label: "draft", Target: "t-draft", Key: "k", Durable: true, RecordID: true, Check: found, Recheck: "t-recheck", Build: build, Judge: judge},
		{Target: "t", Key: "k", Primary: true, Durable: true, Arbitrated: true, KeepBody: true, Build: build, Judge: judge},
	}
}

func TestCheckStepsNamesTheRuleABrokenListBreaks(t *testing.T) {
	require.NoError(t, Check(validSteps()))
	accepting := validSteps()
	accepting[0].Accepts = true
	require.NoError(t, Check(accepting), "a durable step with a check may be accepted")
	tests := []struct {
		name   string
		mutate func([]driver.Step) []driver.Step
		rule   string
	}{
		{"no steps", func([]driver.Step) []driver.Step { return nil }, "none"},
		{"no primary", func(s []driver.Step) []driver.Step {
			s[1].Primary, s[1].KeepBody = false, false
			s[1].Label = "publish"
			return s
		}, "no primary step"},
		{"two primaries", func(s []driver.Step) []driver.Step { s[0].Primary = true; return s }, "are both primary"},
		{"a primary that is not durable", func(s []driver.Step) []driver.Step { s[1].Durable = false; return s }, "primary but not durable"},
		{"keepBody on another step", func(s []driver.Step) []driver.Step { s[0].KeepBody = true; return s }, "keeps its body but is not primary"},
		{"a step without a label", func(s []driver.Step) []driver.Step { s[0].Label = ""; return s }, "has no label"},
		{"no build", func(s []driver.Step) []driver.Step { s[0].Build = nil; return s }, "needs both build and judge"},
		{"no judge", func(s []driver.Step) []driver.Step { s[1].Judge = nil; return s }, "needs both build and judge"},
		{"durable without a row", func(s []driver.Step) []driver.Step { s[0].Target = ""; return s }, "without a store row"},
		{"two steps on one row", func(s []driver.Step) []driver.Step { s[0].Target = s[1].Target; return s }, "share one store row"},
		{"neither durable nor arbitrated", func(s []driver.Step) []driver.Step { s[0].Durable, s[0].RecordID = false, false; return s }, "neither durable nor arbitrated"},
		{"unarbitrated without a check", func(s []driver.Step) []driver.Step { s[0].Check, s[0].Recheck = nil, ""; return s }, "no check"},
		{"a recheck without a check", func(s []driver.Step) []driver.Step { s[1].Recheck = "t-recheck"; return s }, "recheck row"},
		{"accepted without a check", func(s []driver.Step) []driver.Step { s[1].Accepts = true; return s }, "may be accepted to settle later but has no check"},
		{"accepted but not durable", func(s []driver.Step) []driver.Step {
			s[0].Accepts, s[0].Durable, s[0].Arbitrated, s[0].RecordID, s[0].Recheck = true, false, true, false, ""
			return s
		}, "or is not durable"},
		{"a record id not durable", func(s []driver.Step) []driver.Step {
			s[0].Durable, s[0].Arbitrated = false, true
			s[0].Recheck = ""
			return s
		}, "names the record id"},
		{"parts on a durable step", func(s []driver.Step) []driver.Step {
			s[1].Parts = fullParts()
			return s
		}, "sent in parts but is durable"},
		{"parts without their functions", func(s []driver.Step) []driver.Step {
			s[0].Durable, s[0].Arbitrated, s[0].RecordID, s[0].Check, s[0].Recheck = false, true, false, nil, ""
			s[0].Parts, s[0].Build = fullParts(), nil
			s[0].Parts.Abort = nil
			return s
		}, "lacks one of Parts' functions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(tt.mutate(validSteps()))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.rule)
		})
	}
}

// fullParts is a Parts with every function set.
func fullParts() *driver.Parts {
	req := func() (driver.Request, error) { return driver.Request{}, nil }
	judge := func(driver.Answer) driver.Verdict { return driver.Verdict{} }
	return &driver.Parts{Count: 1, PartSize: 1, Begin: req, JudgeBegin: judge,
		Part: func(string, int) (driver.Request, func(driver.Answer) driver.Verdict, error) {
			return driver.Request{}, judge, nil
		},
		List:       func(string, int) (driver.Request, error) { return req() },
		ReadList:   func(driver.Answer) ([]driver.HeldPart, int, bool, bool) { return nil, 0, false, true },
		Complete:   func(string, []string) (driver.Request, error) { return req() },
		Abort:      func(string) (driver.Request, error) { return req() },
		JudgeOther: judge}
}

func TestPartsStepNeedsNoBuild(t *testing.T) {
	s := validSteps()
	s[0].Durable, s[0].Arbitrated, s[0].RecordID, s[0].Check, s[0].Recheck = false, true, false, nil, ""
	s[0].Parts, s[0].Build = fullParts(), nil
	require.NoError(t, Check(s))
}
