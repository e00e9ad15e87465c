package crossref

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

func testUpload() upload {
	return upload{w: work{DOI: "10.5555/reef", Timestamp: 20260101000000000}, fileName: "deposit-x-1.xml"}
}

// result is a completed download holding one record diagnostic.
func result(status, doi, msg string) []byte {
	return []byte(`<?xml version="1.0"?><doi_batch_diagnostic status="completed" sp="cr"><submission_id>1</submission_id>` +
		`<batch_id>b</batch_id><record_diagnostic status="` + status + `"><doi>` + doi + `</doi><msg>` + msg + `</msg>` +
		`<conflict_id>7</conflict_id><dois_in_conflict><doi>10.5555/kelp</doi></dois_in_conflict></record_diagnostic></doi_batch_diagnostic>`)
}

func TestJudgeResult(t *testing.T) {
	u := testUpload()
	for _, tc := range []struct {
		name    string
		status  int
		body    []byte
		kind    driver.FindingKind
		then    bool
		problem string
		warn    string
	}{
		{"queued is pending", 200, []byte(`<doi_batch_diagnostic status="queued"><submission_id>1</submission_id><batch_id/></doi_batch_diagnostic>`), driver.Pending, false, "queued", ""},
		{"in process is pending", 200, []byte(`<doi_batch_diagnostic status="in_process"/>`), driver.Pending, false, "in_process", ""},
		{"unknown_submission is absent", 200, []byte(`<doi_batch_diagnostic status="unknown_submission"/>`), driver.Absent, false, "", ""},
		{"success is present", 200, result("Success", "10.5555/REEF", "Successfully added"), driver.Present, false, "", ""},
		{"a conflict is present and names the DOIs in conflict", 200, result("Warning", "10.5555/reef", "Added with conflict"), driver.Present, false, "", "in conflict with 10.5555/kelp"},
		{"an update with conflict is present", 200, result("Warning", "10.5555/reef", "Updated with conflict"), driver.Present, false, "", "Updated with conflict"},
		{"a stale timestamp looks at the registered one", 200, result("Failure", "10.5555/reef",
			"Record not processed because submitted version: 20260101000000000 is less or equal to previously submitted version 20260101000000000"), driver.Absent, true, "", ""},
		{"another failure is terminal with Crossref's words", 200, result("Failure", "10.5555/reef", "Invalid ISSN"), driver.Foreign, false, "Invalid ISSN", ""},
		{"a batch failure names the XML problem", 200, result("Failure", "", "Error validating schema crossref5.3.1.xsd : bad"), driver.Foreign, false, "Error validating schema", ""},
		{"a result without this DOI is terminal", 200, result("Success", "10.5555/other", "Successfully added"), driver.Foreign, false, "names no record", ""},
		{"a body cut before its root is looked at again", 200, []byte(`<?xml version="1.0"?>`), driver.Unknown, false, "not a doi_batch_diagnostic", ""},
		{"an empty body is looked at again", 200, nil, driver.Unknown, false, "not a doi_batch_diagnostic", ""},
		{"a diagnostic cut short is looked at again", 200, result("Success", "10.5555/reef", "Successfully added")[:120], driver.Unknown, false, "not a doi_batch_diagnostic", ""},
		{"a 503 is looked at again", 503, nil, driver.Unknown, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := u.judgeResult(driver.Answer{Status: tc.status, Body: tc.body})
			require.Equal(t, tc.kind, f.Kind)
			if f.Kind == driver.Unknown {
				require.True(t, f.Class.Retryable(), "class %v", f.Class)
			}
			require.Equal(t, tc.then, f.Then != nil)
			require.Contains(t, f.Problem, tc.problem)
			require.Contains(t, f.Warn, tc.warn)
			if f.Kind == driver.Present {
				require.Equal(t, "10.5555/reef", f.ID)
			}
		})
	}
}

// loginPageHTML is a login page as a servlet answers a wrong login, with
// status 200: HTML that is not well-formed XML.
const loginPageHTML = `<!DOCTYPE html>
<html lang=en><head><meta charset=utf-8><title>Login</title></head>
<body><p>Unauthorized&nbsp;access<br>
<form method=post><input name=usr><input type=password name=pwd></form></body></html>`

// Only a doi_batch_diagnostic is a result, and only a crossref_result a
// query's answer: a login page, or any other root, whatever its status,
// stops the run as a 401 does.
func TestALoginPageStopsTheRun(t *testing.T) {
	u := testUpload()
	for _, tc := range []struct {
		name, body, root string
	}{
		{"an HTML login page", loginPageHTML, "<html>"},
		{"an HTML fragment", "<html>oops", "<html>"},
		{"another XML root", `<?xml version="1.0"?><error><msg>login required</msg></error>`, "<error>"},
		{"text", "Unauthorized: wrong login or password.", "text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range []driver.Finding{
				u.judgeResult(driver.Answer{Status: http.StatusOK, Body: []byte(tc.body)}),
				u.judgeLookup(driver.Answer{Status: http.StatusOK, Body: []byte(tc.body)}),
			} {
				require.Equal(t, driver.Unknown, f.Kind)
				require.Equal(t, driver.Stop, f.Class)
				require.Contains(t, f.Problem, "is "+tc.root+", not a ")
				require.Contains(t, f.Problem, "login page, its answer to a wrong login or password")
			}
		})
	}
	v := judgeUpload(driver.Answer{Status: http.StatusOK, Body: []byte(loginPageHTML)})
	require.Equal(t, driver.Stop, v.Class)
	require.Contains(t, v.Problem, "login page")
	f := u.judgeLookup(driver.Answer{Status: http.StatusOK, Body: query("20260101000000000")[:60]})
	require.Equal(t, driver.Ambiguous, f.Class, "a query answer cut short is looked at again")
}

func query(ts string) []byte {
	return []byte(`<?xml version="1.0"?><crossref_result xmlns="http://www.crossref.org/qrschema/3.0" version="3.0"><query_result>` +
		`<head><doi_batch_id>none</doi_batch_id></head><body><query status="resolved"><doi>10.5555/reef</doi>` +
		`<crm-item name="deposit-timestamp" type="number">` + ts + `</crm-item></query></body></query_result></crossref_result>`)
}

func TestJudgeLookup(t *testing.T) {
	u := testUpload()
	require.Equal(t, driver.Present, u.judgeLookup(driver.Answer{Status: 200, Body: query("20260101000000000")}).Kind, "our timestamp registered")
	f := u.judgeLookup(driver.Answer{Status: 200, Body: query("20260101000000001")})
	require.Equal(t, driver.Foreign, f.Kind)
	require.Contains(t, f.Problem, "superseded by a newer deposit")
	f = u.judgeLookup(driver.Answer{Status: 200, Body: []byte(`<crossref_result><query_result><body><query status="unresolved"><doi>x</doi></query></body></query_result></crossref_result>`)})
	require.Equal(t, driver.Unknown, f.Kind)
	require.True(t, f.Class.Retryable())
}

func TestJudgeUpload(t *testing.T) {
	ok := []byte(`<html><head><title>SUCCESS</title></head><body><h2>SUCCESS</h2><p>Your batch submission was successfully received.</p></body></html>`)
	require.Equal(t, driver.Accepted, judgeUpload(driver.Answer{Status: 200, Body: ok}).Class)
	require.Equal(t, driver.Ambiguous, judgeUpload(driver.Answer{Status: 200, Body: []byte("<html>FAILURE</html>")}).Class)
	require.Equal(t, driver.Ambiguous, judgeUpload(driver.Answer{Status: http.StatusInternalServerError}).Class)
	require.Equal(t, driver.Retry, judgeUpload(driver.Answer{Status: http.StatusServiceUnavailable}).Class)
	require.Equal(t, driver.Stop, judgeUpload(driver.Answer{Status: http.StatusUnauthorized}).Class)
}

// Each read of a line draws a file name of its own, under one key: the
// intent keeps the body, so one intent uploads under one name, and a
// deposit after a lost store under a name no earlier upload had. A body an
// older deposit kept, without the drawn part, keeps its name.
func TestEachReadOfALineDrawsAFileNameOfItsOwn(t *testing.T) {
	drv, err := Target{}.Driver()
	require.NoError(t, err)
	d := drv.(crossrefDriver)
	x := `<doi_batch><head><doi_batch_id>b</doi_batch_id><timestamp>12</timestamp></head><body><dataset><doi_data><doi>10.1/a</doi></doi_data></dataset></body></doi_batch>`
	text, err := json.Marshal(map[string]string{"doi": "10.1/a", "xml": x})
	require.NoError(t, err)
	nameOf := func(body []byte) string {
		steps, err := d.Steps(canonical.Keyed{Key: strings.Repeat("ab", 32), Body: body}, "")
		require.NoError(t, err)
		req, err := steps[0].Check.Build(nil)
		require.NoError(t, err)
		u, err := url.Parse(req.URL)
		require.NoError(t, err)
		return u.Query().Get("file_name")
	}
	b1, k1, err := d.Payload(text)
	require.NoError(t, err)
	b2, k2, err := d.Payload(text)
	require.NoError(t, err)
	require.Equal(t, k1, k2, "one key")
	n1, n2 := nameOf(b1), nameOf(b2)
	require.NotEqual(t, n1, n2)
	require.Regexp(t, `^deposit-(ab){16}-12-[0-9a-f]{16}\.xml$`, n1)
	require.Equal(t, "deposit-"+strings.Repeat("ab", 16)+"-12.xml", nameOf(text), "a body kept without a drawn part")
}

func TestKeyedXML(t *testing.T) {
	a := `<doi_batch><head><doi_batch_id>b-1</doi_batch_id><timestamp>1</timestamp></head><body><x:timestamp>keep</x:timestamp></body></doi_batch>`
	require.Equal(t, `<doi_batch><head><doi_batch_id></doi_batch_id><timestamp></timestamp></head><body><x:timestamp>keep</x:timestamp></body></doi_batch>`, keyedXML(a))
	b := `<cr:doi_batch><cr:head><cr:doi_batch_id id="1">b-2</cr:doi_batch_id ><cr:timestamp>2</cr:timestamp></cr:head></cr:doi_batch>`
	require.Equal(t, `<cr:doi_batch><cr:head><cr:doi_batch_id id="1"></cr:doi_batch_id ><cr:timestamp></cr:timestamp></cr:head></cr:doi_batch>`, keyedXML(b))
}

// US-ASCII is a subset of UTF-8: a file that declares it, under any of
// its names, is a work; a byte above 0x7F under it, or any other
// encoding, is invalid with words that say Crossref takes UTF-8 only.
func TestCheckWorkTakesUTF8AndUSASCIIOnly(t *testing.T) {
	body := `<doi_batch><head><doi_batch_id>b</doi_batch_id><timestamp>12</timestamp></head><body><dataset><doi_data><doi>10.1/a</doi></doi_data></dataset></body></doi_batch>`
	declared := func(enc string) string { return `<?xml version="1.0" encoding="` + enc + `"?>` + "\n" + body }
	for _, enc := range []string{"UTF-8", "utf-8", "US-ASCII", "us-ascii", "ASCII", "ascii", "ANSI_X3.4-1968", "ISO646-US", "csASCII"} {
		t.Run(enc+" is taken", func(t *testing.T) {
			w, err := checkWork("10.1/a", declared(enc))
			require.NoError(t, err)
			require.Equal(t, uint64(12), w.Timestamp)
		})
	}
	accented := strings.Replace(declared("US-ASCII"), "<dataset>", "<dataset>Caf\xc3\xa9", 1)
	for _, tc := range []struct{ name, xml, want string }{
		{"a byte above 0x7F under US-ASCII is refused", accented, fmt.Sprintf(
			`declares encoding "US-ASCII" but holds byte 0xC3 at offset %d, which US-ASCII has not: Crossref takes UTF-8 only`, strings.Index(accented, "\xc3"))},
		{"ISO-8859-1 is refused", declared("ISO-8859-1"), `declares encoding "ISO-8859-1": Crossref takes UTF-8 only`},
		{"windows-1252 is refused", declared("windows-1252"), `declares encoding "windows-1252": Crossref takes UTF-8 only`},
		{"UTF-16 is refused", declared("UTF-16"), `declares encoding "UTF-16": Crossref takes UTF-8 only`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkWork("10.1/a", tc.xml)
			require.ErrorIs(t, err, ErrInvalidWork)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "well-formed")
		})
	}
}

func TestCheckWork(t *testing.T) {
	head := `<head><doi_batch_id>b</doi_batch_id><timestamp>12</timestamp></head>`
	one := `<doi_batch>` + head + `<body><dataset><doi_data><doi>10.1/a</doi></doi_data></dataset></body></doi_batch>`
	w, err := checkWork("10.1/A", one)
	require.NoError(t, err)
	require.Equal(t, uint64(12), w.Timestamp)
	for _, tc := range []struct{ name, doi, xml, want string }{
		{"several works are refused", "10.1/a", `<doi_batch>` + head + `<body><doi_data><doi>10.1/a</doi></doi_data><doi_data><doi>10.1/b</doi></doi_data></body></doi_batch>`,
			"holds 2 works (doi_data: 10.1/a, 10.1/b): a line is one work"},
		{"another DOI is refused", "10.1/z", one, "is not the DOI of its XML's doi_data, 10.1/a"},
		{"no timestamp is refused", "10.1/a", strings.Replace(one, "<timestamp>12</timestamp>", "", 1), "never stamps a clock"},
		{"a clock that is no number is refused", "10.1/a", strings.Replace(one, ">12<", ">2026-01-01<", 1), "not a number of at most 19 digits"},
		{"XML that is not well-formed is refused", "10.1/a", strings.TrimSuffix(one, "</doi_batch>"), "not well-formed"},
		{"no doi_data is refused", "10.1/a", `<doi_batch>` + head + `</doi_batch>`, "has no doi_data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := checkWork(tc.doi, tc.xml)
			require.ErrorIs(t, err, ErrInvalidWork)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}
