package repotest

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	crLogin    = "crtest"
	crPassword = "s3cret-pw!"
)

// startCrossref starts a stub with credentials and, when clk is not nil,
// that clock.
func startCrossref(t testing.TB, cfg CrossrefConfig, clk *clock) *CrossrefServer {
	t.Helper()
	cfg.Login, cfg.Password = crLogin, crPassword
	if clk != nil {
		cfg.now = clk.now
	}
	s, err := NewCrossrefServer(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// crArticle is one record of a test deposit.
type crArticle struct{ doi, title string }

// crXML is a deposit of articles in one database, under batch id and
// timestamp ts.
func crXML(batch string, ts uint64, articles ...crArticle) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<doi_batch version="5.3.1" xmlns="http://www.crossref.org/schema/5.3.1">
<head><doi_batch_id>%s</doi_batch_id><timestamp>%d</timestamp>
<depositor><depositor_name>t</depositor_name><email_address>t@example.org</email_address></depositor>
<registrant>t</registrant></head>
<body><database><database_metadata language="en"><titles><title>DB</title></titles></database_metadata>`, batch, ts)
	for _, a := range articles {
		fmt.Fprintf(&b, `
<dataset dataset_type="record"><titles><title>%s</title></titles>
<doi_data><doi>%s</doi><resource>https://example.org/%s</resource></doi_data></dataset>`, a.title, a.doi, a.doi)
	}
	b.WriteString("\n</database></body></doi_batch>\n")
	return b.String()
}

// crForm is a deposit as the multipart form fields (name, value pairs; nil
// for the usual credentials) plus the file part fname named file: the body
// and its Content-Type.
func crForm(t testing.TB, file, doc string, fields ...string) (string, string) {
	t.Helper()
	if fields == nil {
		fields = []string{"operation", "doMDUpload", "login_id", crLogin, "login_passwd", crPassword}
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for i := 0; i+1 < len(fields); i += 2 {
		require.NoError(t, mw.WriteField(fields[i], fields[i+1]))
	}
	fw, err := mw.CreateFormFile("fname", file)
	require.NoError(t, err)
	_, err = fw.Write([]byte(doc))
	require.NoError(t, err)
	require.NoError(t, mw.Close())
	return body.String(), mw.FormDataContentType()
}

// crUpload posts a deposit built by crForm.
func crUpload(t testing.TB, s *CrossrefServer, file, doc string, fields ...string) answer {
	t.Helper()
	body, ctype := crForm(t, file, doc, fields...)
	return mustSend(t, s.Client(), http.MethodPost, s.URL+"/servlet/deposit", body, "Content-Type", ctype)
}

// crDiag is the result download as a client reads it.
type crDiag struct {
	Status       string `xml:"status,attr"`
	SubmissionID string `xml:"submission_id"`
	BatchID      string `xml:"batch_id"`
	Records      []struct {
		Status     string   `xml:"status,attr"`
		MsgID      string   `xml:"msg_id,attr"`
		DOI        string   `xml:"doi"`
		Msg        string   `xml:"msg"`
		ConflictID string   `xml:"conflict_id"`
		InConflict []string `xml:"dois_in_conflict>doi"`
	} `xml:"record_diagnostic"`
	Counts struct {
		Records  int `xml:"record_count"`
		Success  int `xml:"success_count"`
		Warning  int `xml:"warning_count"`
		Failures int `xml:"failure_count"`
	} `xml:"batch_data"`
}

// crResultOf downloads the result log of file.
func crResultOf(t testing.TB, s *CrossrefServer, file string) crDiag {
	t.Helper()
	q := url.Values{"usr": {crLogin}, "pwd": {crPassword}, "file_name": {file}, "type": {"result"}}
	a := mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/submissionDownload?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	var d crDiag
	require.NoError(t, xml.Unmarshal(a.body, &d), string(a.body))
	return d
}

// crDepositTimestamp queries the deposit-timestamp of doi; "" when the
// query does not resolve it.
func crDepositTimestamp(t testing.TB, s *CrossrefServer, doi string) string {
	t.Helper()
	q := url.Values{"pid": {crLogin + ":" + crPassword}, "format": {"unixsd"}, "id": {doi}}
	a := mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/query?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	var res struct {
		Query struct {
			Status string `xml:"status,attr"`
			Items  []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:",chardata"`
			} `xml:"crm-item"`
		} `xml:"query_result>body>query"`
	}
	require.NoError(t, xml.Unmarshal(a.body, &res), string(a.body))
	for _, it := range res.Query.Items {
		if it.Name == "deposit-timestamp" {
			require.Equal(t, "resolved", res.Query.Status)
			return it.Value
		}
	}
	require.Equal(t, "unresolved", res.Query.Status)
	return ""
}

func TestCrossrefUploadIsQueuedThenProcessedAfterTheDelays(t *testing.T) {
	clk := newClock()
	s := startCrossref(t, CrossrefConfig{QueueDelay: time.Minute, ProcessDelay: time.Minute, UnknownFor: 10 * time.Second}, clk)
	a := crUpload(t, s, "b1.xml", crXML("batch-1", 20260101000000000, crArticle{"10.5555/One", "one"}))
	require.Equal(t, http.StatusOK, a.status, string(a.body))
	require.Contains(t, string(a.body), "SUCCESS")
	require.Contains(t, string(a.body), "Your batch submission was successfully received.")

	require.Equal(t, "unknown_submission", crResultOf(t, s, "b1.xml").Status, "right after a real upload")
	require.Empty(t, crDepositTimestamp(t, s, "10.5555/One"), "queued is not applied")

	clk.advance(10 * time.Second)
	d := crResultOf(t, s, "b1.xml")
	require.Equal(t, "queued", d.Status)
	require.NotEmpty(t, d.SubmissionID)
	require.Empty(t, d.BatchID, "a queued submission is not parsed yet")

	clk.advance(50 * time.Second)
	d = crResultOf(t, s, "b1.xml")
	require.Equal(t, "in_process", d.Status)
	require.Empty(t, d.Records)
	require.Empty(t, crDepositTimestamp(t, s, "10.5555/One"))

	clk.advance(time.Minute)
	d = crResultOf(t, s, "b1.xml")
	require.Equal(t, "completed", d.Status)
	require.Equal(t, "batch-1", d.BatchID)
	require.Len(t, d.Records, 1)
	require.Equal(t, "Success", d.Records[0].Status)
	require.Equal(t, "10.5555/One", d.Records[0].DOI)
	require.Equal(t, "Successfully added", d.Records[0].Msg)
	require.Equal(t, 1, d.Counts.Records)
	require.Equal(t, 1, d.Counts.Success)
	require.Equal(t, "20260101000000000", crDepositTimestamp(t, s, "10.5555/one"), "DOIs match without case")

	st := s.Stats()
	require.Equal(t, int64(1), st.Uploads)
	require.Equal(t, int64(1), st.Registered)
	require.Equal(t, map[string]int64{"10.5555/one": 1}, st.Versions)
}

func TestCrossrefUnknownFileNameIsUnknownSubmission(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	d := crResultOf(t, s, "never.xml")
	require.Equal(t, "unknown_submission", d.Status)
	require.Empty(t, d.Records)
}

func TestCrossrefIdenticalMetadataUnderAnotherDOIIsAddedWithConflict(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	require.Equal(t, http.StatusOK, crUpload(t, s, "a.xml", crXML("a", 1, crArticle{"10.5555/a", "same"})).status)
	require.Equal(t, http.StatusOK, crUpload(t, s, "b.xml", crXML("b", 1, crArticle{"10.5555/b", "same"})).status)
	require.Equal(t, http.StatusOK, crUpload(t, s, "c.xml", crXML("c", 1, crArticle{"10.5555/c", "different"})).status)

	d := crResultOf(t, s, "b.xml")
	require.Equal(t, "completed", d.Status)
	require.Len(t, d.Records, 1)
	rec := d.Records[0]
	require.Equal(t, "Warning", rec.Status)
	require.Equal(t, "Added with conflict", rec.Msg)
	require.NotEmpty(t, rec.ConflictID)
	require.Equal(t, []string{"10.5555/a"}, rec.InConflict)
	require.Equal(t, 1, d.Counts.Warning)
	require.Equal(t, "Success", crResultOf(t, s, "c.xml").Records[0].Status)

	st := s.Stats()
	require.Equal(t, int64(1), st.Conflicts)
	require.Equal(t, int64(3), st.Registered, "a conflict is still registered")
}

func TestCrossrefTimestampIsAnOptimisticVersion(t *testing.T) {
	clk := newClock()
	s := startCrossref(t, CrossrefConfig{}, clk)
	doi := "10.5555/v"
	crUpload(t, s, "v1.xml", crXML("v1", 100, crArticle{doi, "first"}))
	clk.advance(time.Second)
	crUpload(t, s, "v1-again.xml", crXML("v1", 100, crArticle{doi, "first"}))
	crUpload(t, s, "v0.xml", crXML("v0", 99, crArticle{doi, "older"}))
	crUpload(t, s, "v2.xml", crXML("v2", 101, crArticle{doi, "second"}))

	for _, file := range []string{"v1-again.xml", "v0.xml"} {
		d := crResultOf(t, s, file)
		require.Len(t, d.Records, 1, file)
		require.Equal(t, "Failure", d.Records[0].Status, file)
		require.True(t, strings.HasPrefix(d.Records[0].Msg, "Record not processed because submitted version: "), d.Records[0].Msg)
		require.Contains(t, d.Records[0].Msg, "is less or equal to previously submitted version")
		require.Equal(t, "4", d.Records[0].MsgID)
		require.Equal(t, 1, d.Counts.Failures, file)
	}
	d := crResultOf(t, s, "v2.xml")
	require.Equal(t, "Success", d.Records[0].Status)
	require.Equal(t, "Successfully updated", d.Records[0].Msg)
	require.Equal(t, "101", crDepositTimestamp(t, s, doi))

	recs := s.Records()
	require.Equal(t, []CrossrefRecord{{DOI: doi, Timestamp: 101, Versions: 2, FileName: "v2.xml", BatchID: "v2"}}, recs,
		"a greater timestamp replaces the record, never a second DOI")
	st := s.Stats()
	require.Equal(t, int64(1), st.Registered)
	require.Equal(t, int64(1), st.Updates)
	require.Equal(t, int64(2), st.StaleRefused)
	require.Equal(t, map[string]int64{doi: 2}, st.Versions)
}

func TestCrossrefSameDOITwiceInOneBatchFailsAllButTheFirst(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	crUpload(t, s, "dup.xml", crXML("dup", 7, crArticle{"10.5555/d", "x"}, crArticle{"10.5555/D", "y"}, crArticle{"10.5555/e", "z"}))
	d := crResultOf(t, s, "dup.xml")
	require.Len(t, d.Records, 3, "one record_diagnostic per DOI")
	got := []string{d.Records[0].Status, d.Records[1].Status, d.Records[2].Status}
	require.Equal(t, []string{"Success", "Failure", "Success"}, got)
	require.Equal(t, 3, d.Counts.Records)
	require.Equal(t, 2, d.Counts.Success)
	require.Equal(t, 1, d.Counts.Failures)
}

func TestCrossrefRefusesABatchItCannotRead(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	valid := crXML("b", 1, crArticle{"10.5555/x", "x"})
	cases := map[string]struct {
		doc, msgID, prefix string
	}{
		"not well-formed":      {`<doi_batch><head>`, "29", "Deposit is not well-formed XML"},
		"no timestamp":         {strings.Replace(valid, "<timestamp>1</timestamp>", "", 1), "", "Error validating schema"},
		"a 20-digit timestamp": {strings.Replace(valid, "<timestamp>1<", "<timestamp>12345678901234567890<", 1), "", "Error validating schema"},
		"no DOI":               {crXML("b", 1), "", "Error validating schema"},
		"ISO-8859-1":           {strings.Replace(valid, `encoding="UTF-8"`, `encoding="ISO-8859-1"`, 1), "29", "Deposit is not well-formed XML"},
		"a byte above 0x7F under US-ASCII": {strings.Replace(strings.Replace(valid, `encoding="UTF-8"`, `encoding="US-ASCII"`, 1), ">x<", ">\xe9<", 1),
			"29", "Deposit is not well-formed XML"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			file := strings.ReplaceAll(name, " ", "-") + ".xml"
			a := crUpload(t, s, file, tc.doc)
			require.Equal(t, http.StatusOK, a.status, "refused in the log, not at upload")
			d := crResultOf(t, s, file)
			require.Equal(t, "completed", d.Status)
			require.Len(t, d.Records, 1)
			require.Equal(t, "Failure", d.Records[0].Status)
			require.Empty(t, d.Records[0].DOI)
			require.Equal(t, tc.msgID, d.Records[0].MsgID)
			require.True(t, strings.HasPrefix(d.Records[0].Msg, tc.prefix), d.Records[0].Msg)
		})
	}
	st := s.Stats()
	require.Equal(t, int64(len(cases)), st.Malformed)
	require.Zero(t, st.Registered)
}

// US-ASCII is a subset of UTF-8: a deposit that declares it, under any
// of its names, is read as one that declares UTF-8.
func TestCrossrefTakesADepositDeclaredUSASCII(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	for i, enc := range []string{"US-ASCII", "ascii", "ANSI_X3.4-1968"} {
		doi := fmt.Sprintf("10.5555/ascii-%d", i)
		file := "ascii-" + enc + ".xml"
		crUpload(t, s, file, strings.Replace(crXML("b", 1, crArticle{doi, doi}), `encoding="UTF-8"`, `encoding="`+enc+`"`, 1))
		d := crResultOf(t, s, file)
		require.Len(t, d.Records, 1)
		require.Equal(t, "Success", d.Records[0].Status, d.Records[0].Msg)
	}
	require.Equal(t, int64(3), s.Stats().Registered)
}

func TestCrossrefResentFileNameKeepsTheFirstLog(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	crUpload(t, s, "same.xml", crXML("first", 1, crArticle{"10.5555/s", "s"}))
	crUpload(t, s, "same.xml", crXML("second", 2, crArticle{"10.5555/s", "s"}))
	d := crResultOf(t, s, "same.xml")
	require.Equal(t, "first", d.BatchID)
	require.Equal(t, "Successfully added", d.Records[0].Msg)
	require.Equal(t, "2", crDepositTimestamp(t, s, "10.5555/s"), "the second upload was processed all the same")

	st := s.Stats()
	require.Equal(t, int64(2), st.Uploads)
	require.Equal(t, map[string]int64{"same.xml": 2}, st.UploadsByFile)
	require.Equal(t, int64(1), st.Resent)
}

func TestCrossrefDownloadByBatchIDFindsOnlyParsedSubmissions(t *testing.T) {
	clk := newClock()
	s := startCrossref(t, CrossrefConfig{QueueDelay: time.Minute, ProcessDelay: time.Minute}, clk)
	crUpload(t, s, "f.xml", crXML("batch-x", 1, crArticle{"10.5555/f", "f"}))
	byBatch := func() string {
		q := url.Values{"usr": {crLogin}, "pwd": {crPassword}, "doi_batch_id": {"batch-x"}, "type": {"result"}}
		a := mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/submissionDownload?"+q.Encode(), "")
		require.Equal(t, http.StatusOK, a.status)
		var d crDiag
		require.NoError(t, xml.Unmarshal(a.body, &d))
		return d.Status
	}
	require.Equal(t, "queued", crResultOf(t, s, "f.xml").Status)
	require.Equal(t, "unknown_submission", byBatch(), "doi_batch_id is known only once parsed")
	clk.advance(time.Minute)
	require.Equal(t, "in_process", byBatch())
}

func TestCrossref500AfterQueuingIsProcessedAnyway(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{Faults: "nth=1:500"}, nil)
	a := crUpload(t, s, "x.xml", crXML("x", 5, crArticle{"10.5555/x", "x"}))
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Equal(t, "completed", crResultOf(t, s, "x.xml").Status)
	require.Equal(t, "5", crDepositTimestamp(t, s, "10.5555/x"), "the upload was queued before the 500")

	a = crUpload(t, s, "x.xml", crXML("x", 5, crArticle{"10.5555/x", "x"}))
	require.Equal(t, http.StatusOK, a.status, "the retry is the second attempt")
	st := s.Stats()
	require.Equal(t, int64(2), st.Uploads)
	require.Equal(t, int64(1), st.Resent)
	require.Equal(t, int64(1), st.StaleRefused, "a retry with the same timestamp fails in the log")
	require.Equal(t, map[string]int64{"500": 1}, st.FaultsByKind)
}

func TestCrossref503NoServerIsAvailableQueuesNothing(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{Faults: "nth=1:503"}, nil)
	a := crUpload(t, s, "y.xml", crXML("y", 5, crArticle{"10.5555/y", "y"}))
	require.Equal(t, http.StatusServiceUnavailable, a.status)
	require.Contains(t, string(a.body), "No server is available")
	require.Zero(t, s.Stats().Uploads)
	require.Equal(t, "unknown_submission", crResultOf(t, s, "y.xml").Status)
	require.Empty(t, crDepositTimestamp(t, s, "10.5555/y"))
}

func TestCrossrefDropQueuesThenHangsUp(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{Faults: "nth=1:drop"}, nil)
	body, ctype := crForm(t, "z.xml", crXML("z", 1, crArticle{"10.5555/z", "z"}), "operation", "doMDUpload", "usr", crLogin, "pwd", crPassword)
	_, err := send(s.Client(), http.MethodPost, s.URL+"/servlet/deposit", body, "Content-Type", ctype)
	require.Error(t, err, "no answer")
	require.Equal(t, int64(1), s.Stats().Uploads)
	require.Equal(t, "1", crDepositTimestamp(t, s, "10.5555/z"))
}

func TestCrossrefCredentialsAreCheckedAndNeverEchoed(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	doc := crXML("c", 1, crArticle{"10.5555/c", "c"})
	cases := []struct {
		name   string
		fields []string
		status int
	}{
		{"login_id and login_passwd", []string{"operation", "doMDUpload", "login_id", crLogin, "login_passwd", crPassword}, http.StatusOK},
		{"usr and pwd", []string{"operation", "doMDUpload", "usr", crLogin, "pwd", crPassword}, http.StatusOK},
		{"a personal login with its role", []string{"operation", "doMDUpload", "login_id", "me@example.org/" + crLogin, "login_passwd", crPassword}, http.StatusOK},
		{"a wrong password", []string{"operation", "doMDUpload", "login_id", crLogin, "login_passwd", crPassword + "x"}, http.StatusUnauthorized},
		{"no credentials", []string{"operation", "doMDUpload"}, http.StatusUnauthorized},
		{"another operation", []string{"operation", "doQueryUpload", "login_id", crLogin, "login_passwd", crPassword}, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := crUpload(t, s, "c.xml", doc, tc.fields...)
			require.Equal(t, tc.status, a.status, string(a.body))
			require.NotContains(t, string(a.body), crPassword)
		})
	}
	q := url.Values{"usr": {crLogin}, "pwd": {"wrong"}, "file_name": {"c.xml"}, "type": {"result"}}
	a := mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/submissionDownload?"+q.Encode(), "")
	require.Equal(t, http.StatusUnauthorized, a.status)
	q = url.Values{"pid": {crLogin + ":wrong"}, "format": {"unixsd"}, "id": {"10.5555/c"}}
	a = mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/query?"+q.Encode(), "")
	require.Equal(t, http.StatusUnauthorized, a.status)

	d := crResultOf(t, s, "c.xml")
	raw, err := json.Marshal(s.Stats())
	require.NoError(t, err)
	require.NotContains(t, string(raw), crPassword)
	require.Equal(t, int64(4), s.Stats().Unauthorized)
	require.Equal(t, int64(3), s.Stats().Uploads)
	require.Equal(t, "Success", d.Records[0].Status)
}

// With LoginPage, a wrong login is answered 200 with an HTML login page
// by the deposit, the result download and the query alike; nothing is
// queued, and the page echoes nothing the client sent.
func TestCrossrefLoginPageAnswersAWrongLoginWith200(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{LoginPage: true}, nil)
	wrong := crPassword + "x"
	up := crUpload(t, s, "c.xml", crXML("c", 1, crArticle{"10.5555/c", "c"}), "operation", "doMDUpload", "login_id", crLogin, "login_passwd", wrong)
	q := url.Values{"usr": {crLogin}, "pwd": {wrong}, "file_name": {"c.xml"}, "type": {"result"}}
	down := mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/submissionDownload?"+q.Encode(), "")
	q = url.Values{"pid": {crLogin + ":" + wrong}, "format": {"unixsd"}, "id": {"10.5555/c"}}
	query := mustSend(t, s.Client(), http.MethodGet, s.URL+"/servlet/query?"+q.Encode(), "")
	for _, a := range []answer{up, down, query} {
		require.Equal(t, http.StatusOK, a.status)
		require.Contains(t, string(a.body), `<input type="password"`)
		require.NotContains(t, string(a.body), "successfully received")
		require.NotContains(t, string(a.body), crLogin)
		require.NotContains(t, string(a.body), crPassword)
	}
	st := s.Stats()
	require.Equal(t, int64(3), st.Unauthorized)
	require.Zero(t, st.Uploads)
	crUpload(t, s, "c.xml", crXML("c", 1, crArticle{"10.5555/c", "c"}))
	require.Equal(t, "Success", crResultOf(t, s, "c.xml").Records[0].Status, "the right login is taken")
}

func TestCrossrefWorksViewLags(t *testing.T) {
	clk := newClock()
	s := startCrossref(t, CrossrefConfig{WorksLag: time.Hour}, clk)
	works := func() answer {
		return mustSend(t, s.Client(), http.MethodGet, s.URL+"/works/"+url.PathEscape("10.5555/W"), "")
	}
	crUpload(t, s, "w1.xml", crXML("w1", 1, crArticle{"10.5555/W", "w"}))
	first := clk.now()
	require.Equal(t, "1", crDepositTimestamp(t, s, "10.5555/W"), "the XML query sees it at once")
	a := works()
	require.Equal(t, http.StatusNotFound, a.status)
	require.Equal(t, "Resource not found.", string(a.body))

	clk.advance(time.Hour)
	crUpload(t, s, "w2.xml", crXML("w2", 2, crArticle{"10.5555/W", "w2"}))
	a = works()
	require.Equal(t, http.StatusOK, a.status)
	var doc struct {
		Message struct {
			DOI       string `json:"DOI"`
			Deposited struct {
				Timestamp int64 `json:"timestamp"`
			} `json:"deposited"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(a.body, &doc))
	require.Equal(t, "10.5555/w", doc.Message.DOI)
	require.Equal(t, first.UnixMilli(), doc.Message.Deposited.Timestamp, "the first version, the second lags")

	clk.advance(time.Hour)
	require.NoError(t, json.Unmarshal(works().body, &doc))
	require.Equal(t, first.Add(time.Hour).UnixMilli(), doc.Message.Deposited.Timestamp)
}

func TestCrossrefTooManyPendingSubmissionsGet429(t *testing.T) {
	clk := newClock()
	s := startCrossref(t, CrossrefConfig{QueueDelay: time.Minute, MaxPending: 2}, clk)
	for i := range 2 {
		a := crUpload(t, s, fmt.Sprintf("p%d.xml", i), crXML("p", uint64(i+1), crArticle{"10.5555/p", "p"}))
		require.Equal(t, http.StatusOK, a.status)
	}
	a := crUpload(t, s, "p2.xml", crXML("p", 3, crArticle{"10.5555/p", "p"}))
	require.Equal(t, http.StatusTooManyRequests, a.status)
	clk.advance(time.Minute)
	a = crUpload(t, s, "p2.xml", crXML("p", 3, crArticle{"10.5555/p", "p"}))
	require.Equal(t, http.StatusOK, a.status, "the queue drained")
	require.Equal(t, int64(1), s.Stats().RateLimited)
}

func TestCrossrefConcurrentUploadsWithFaultsRegisterEachDOIOnce(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{Faults: "500=0.3,503=0.3", Seed: 3}, nil)
	const n = 24
	bodies, ctypes := make([]string, n), make([]string, n)
	for i := range n {
		doc := crXML(fmt.Sprintf("c%d", i), 1, crArticle{fmt.Sprintf("10.5555/c%d", i%4), fmt.Sprintf("t%d", i%4)})
		bodies[i], ctypes[i] = crForm(t, fmt.Sprintf("c%d.xml", i), doc)
	}
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if a, err := send(s.Client(), http.MethodPost, s.URL+"/servlet/deposit", bodies[i], "Content-Type", ctypes[i]); err == nil {
				statuses[i] = a.status
			}
		})
	}
	wg.Wait()
	queued, dois := 0, map[string]bool{}
	for i, st := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusInternalServerError, http.StatusServiceUnavailable}, st, "upload %d", i)
		if st != http.StatusServiceUnavailable {
			queued++
			dois[fmt.Sprintf("10.5555/c%d", i%4)] = true
		}
	}
	stats := s.Stats()
	require.Positive(t, stats.FaultsByKind["500"], "the seed draws some 500s")
	require.Positive(t, stats.FaultsByKind["503"], "the seed draws some 503s")
	require.Equal(t, int64(queued), stats.Uploads, "a 500 was queued, a 503 was not")
	require.Equal(t, int64(len(dois)), stats.Registered)
	require.Len(t, s.Records(), len(dois))
	for doi := range dois {
		require.Equal(t, int64(1), stats.Versions[doi], "an equal timestamp never replaces %s", doi)
	}
	require.Equal(t, int64(queued-len(dois)), stats.StaleRefused)
}

func TestCrossrefRefusesNegativeConfig(t *testing.T) {
	for _, cfg := range []CrossrefConfig{{QueueDelay: -1}, {WorksLag: -1}, {MaxPending: -1}, {Faults: "nope=1"}} {
		_, err := NewCrossref(cfg)
		require.ErrorIs(t, err, ErrConfig)
	}
}

func TestCrossrefAnswersTheUploadedFileAndRefusesWhatItCannotServe(t *testing.T) {
	s := startCrossref(t, CrossrefConfig{}, nil)
	c := s.Client()
	doc := crXML("k", 1, crArticle{"10.5555/k", "k"})
	crUpload(t, s, "k.xml", doc)
	q := url.Values{"usr": {crLogin}, "pwd": {crPassword}, "file_name": {"k.xml"}, "type": {"contents"}}
	a := mustSend(t, c, http.MethodGet, s.URL+"/servlet/submissionDownload?"+q.Encode(), "")
	require.Equal(t, http.StatusOK, a.status)
	require.Equal(t, doc, string(a.body))

	q.Set("type", "")
	a = mustSend(t, c, http.MethodGet, s.URL+"/servlet/submissionDownload?"+q.Encode(), "")
	require.Equal(t, http.StatusBadRequest, a.status, "type is mandatory")
	a = mustSend(t, c, http.MethodGet, s.URL+"/servlet/deposit", "")
	require.Equal(t, http.StatusMethodNotAllowed, a.status)
	a = mustSend(t, c, http.MethodPost, s.URL+"/servlet/deposit", "operation=doMDUpload", "Content-Type", "application/x-www-form-urlencoded")
	require.Equal(t, http.StatusBadRequest, a.status, "not multipart")
	q = url.Values{"pid": {crLogin + ":" + crPassword}, "format": {"unixref"}, "id": {"10.5555/k"}}
	a = mustSend(t, c, http.MethodGet, s.URL+"/servlet/query?"+q.Encode(), "")
	require.Equal(t, http.StatusBadRequest, a.status, "only unixsd")
	require.Equal(t, int64(1), s.Stats().Uploads)
}

// A download reads the clock after the request's first look at the queue:
// a submission that falls due between the two is answered completed with
// its results, never completed and empty.
func TestCrossrefACompletedResultAlwaysCarriesItsRecords(t *testing.T) {
	for delay := 10; delay < 14; delay++ {
		var mu sync.Mutex
		tick := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		s := startCrossref(t, CrossrefConfig{ProcessDelay: time.Duration(delay)}, nil)
		s.c.cfg.now = func() time.Time { // every read a nanosecond later
			mu.Lock()
			defer mu.Unlock()
			tick = tick.Add(1)
			return tick
		}
		a := crUpload(t, s, "a.xml", crXML("b", 1, crArticle{"10.5555/a", "a"}))
		require.Equal(t, http.StatusOK, a.status)
		for {
			d := crResultOf(t, s, "a.xml")
			if d.Status == "completed" {
				require.Len(t, d.Records, 1, "process delay %dns", delay)
				break
			}
		}
	}
}
