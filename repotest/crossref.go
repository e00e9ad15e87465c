package repotest

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CrossrefConfig configures a Crossref stub. The zero value checks no
// credentials, completes every upload at once, shows it to the download and
// the works view at once, allows 10,000 pending submissions and injects no
// faults. NewCrossref copies it; later changes have no effect.
type CrossrefConfig struct {
	// Login and Password, when Login is set, are the credentials every
	// deposit, result download and query must carry (see Crossref). The
	// password is never logged, counted or echoed.
	Login, Password string
	// LoginPage answers wrong credentials with status 200 and an HTML
	// login page, as Crossref's servlets do, instead of 401 (see
	// Crossref).
	LoginPage bool
	// QueueDelay is how long an upload waits in the queue ("queued"), and
	// ProcessDelay how long it is then "in_process"; it takes effect, and
	// its result is final, after both. Zero and zero: at once.
	QueueDelay, ProcessDelay time.Duration
	// UnknownFor is how long after an upload the result download still
	// answers unknown_submission for its file name, as Crossref does for a
	// while after a real upload.
	UnknownFor time.Duration
	// WorksLag is how long a registration takes to show in the works view
	// (GET /works/{doi}); until then it shows the previous version, or 404.
	WorksLag time.Duration
	// MaxPending is the most submissions that may wait (queued or in
	// process) at once; the next upload gets 429. Default 10,000,
	// Crossref's limit per user.
	MaxPending int
	// Faults is a fault spec in the grammar of FaultsHelp; "" injects none.
	// See Crossref for how each request is numbered.
	Faults string
	// Seed selects the fault sequence.
	Seed int64
	// Latency delays every upload before it is queued.
	Latency time.Duration

	now func() time.Time // clock; nil means time.Now
}

// CrossrefStats counts what a Crossref stub did. All counts start at zero;
// maps are copies. Its JSON form names each field in snake_case.
type CrossrefStats struct {
	Requests int64 `json:"requests"` // requests received, refused and faulted ones included
	Uploads  int64 `json:"uploads"`  // uploads queued (a 500 after queuing counts)
	// UploadsByFile counts the uploads queued per file name.
	UploadsByFile map[string]int64 `json:"uploads_by_file"`
	// Resent counts uploads under a file name already queued: Crossref
	// processes them, but the download keeps answering the first one's log.
	Resent    int64 `json:"resent"`
	Processed int64 `json:"processed"` // submissions completed
	// Registered counts the distinct DOIs registered; Updates the
	// re-deposits with a greater timestamp that replaced a record.
	Registered int64 `json:"registered"`
	Updates    int64 `json:"updates"`
	// Versions counts, per DOI (lower case), the deposits that took effect.
	Versions     map[string]int64 `json:"versions"`
	Conflicts    int64            `json:"conflicts"`     // records added or updated with conflict
	StaleRefused int64            `json:"stale_refused"` // records refused: timestamp not greater than the registered one
	Malformed    int64            `json:"malformed"`     // submissions refused whole (not well-formed, not a deposit)
	RateLimited  int64            `json:"rate_limited"`  // 429 answers for too many pending submissions
	Unauthorized int64            `json:"unauthorized"`  // wrong credentials answered (401, or the login page)
	Downloads    int64            `json:"downloads"`     // result or contents downloads answered
	Queries      int64            `json:"queries"`       // XML queries answered
	WorksReads   int64            `json:"works_reads"`   // works views answered
	Faults       int64            `json:"faults"`        // faults injected, all kinds
	// FaultsByKind counts injected faults by kind as written in the spec.
	FaultsByKind map[string]int64 `json:"faults_by_kind"`
}

// CrossrefRecord is one registered DOI.
type CrossrefRecord struct {
	DOI       string // as last deposited
	Timestamp uint64 // the <timestamp> of the deposit in effect
	Versions  int    // deposits that took effect
	FileName  string // of the upload in effect
	BatchID   string // doi_batch_id of the upload in effect
}

// Crossref is a stub of Crossref's deposit system as an http.Handler:
//
//   - POST /servlet/deposit, multipart/form-data with operation=doMDUpload,
//     the credentials as login_id and login_passwd (login_id may be
//     "user/role", the form for personal credentials) or as usr and pwd,
//     and the deposit XML as the file part fname (or mdFile), whose file
//     name tracks the submission. The answer 200 "SUCCESS ... Your batch
//     submission was successfully received." means queued, not applied
//     (https://www.crossref.org/documentation/member-setup/direct-deposit-xml/https-post/;
//     CDLUC3/ezid ezidapp/management/commands/proc-crossref.py tests for
//     that sentence). Wrong credentials answer 401, or with LoginPage
//     status 200 and an HTML login page (Crossref documents no answer to a
//     wrong login; its deposit servlet answers one 200, says
//     github.com/shivan2418/crossref_xml_parser's README, and a client
//     must read the text to tell), more than MaxPending
//     waiting submissions 429, an operation other than doMDUpload or a
//     missing file 400.
//   - Submissions are processed in upload order, QueueDelay plus
//     ProcessDelay after their upload. Each doi_data/doi of a deposit is
//     one record_diagnostic: Success "Successfully added" or "Successfully
//     updated"; Warning "Added with conflict" (or "Updated with conflict")
//     with conflict_id and dois_in_conflict when another DOI holds identical
//     metadata; Failure msg_id 4 "Record not processed because submitted
//     version: N is less or equal to previously submitted version (DOI
//     match)" (the words and msg_id of pkp/pkp-lib#2409) when the head's
//     <timestamp> is not greater than the registered one, which also fails
//     every repeat of a DOI within one batch (pkp/pkp-lib#3428).
//     Logs of 2023-24 end that message with the stored number instead
//     (hydroshare/hydroshare#5320, thoth-pub/thoth#475): a client should
//     match its prefix only.
//     A re-deposit with a greater timestamp replaces the record: the DOI is
//     the key, never a second record. A deposit that is not well-formed XML
//     (an encoding other than UTF-8 or US-ASCII among its faults) is one
//     Failure with an empty <doi/> and msg_id 29; one without a
//     doi_batch root, a doi_batch_id, a timestamp of at most 19 digits or a
//     DOI fails the same way with "Error validating schema".
//   - GET /servlet/submissionDownload?usr=&pwd=&file_name=&type=result
//     answers <doi_batch_diagnostic status="queued"> (a submission id, an
//     empty batch_id), then "in_process", then "completed" with one
//     record_diagnostic per DOI and batch_data counts; type=contents
//     answers the uploaded XML. A file name never uploaded, or uploaded less
//     than UnknownFor ago, is status "unknown_submission" (EZID notes it
//     after real uploads). A file name uploaded twice answers the first
//     upload's log. doi_batch_id= instead of file_name finds a submission
//     only once it is in process: Crossref records it when it parses the
//     file (https://support.crossref.org/hc/en-us/articles/217515926).
//   - GET /servlet/query?pid=&format=unixsd&id=DOI answers a
//     crossref_result whose query is "resolved" with
//     <crm-item name="deposit-timestamp" type="number"> for a registered
//     DOI, else "unresolved"
//     (https://www.crossref.org/documentation/retrieve-metadata/xml-api/).
//   - GET /works/{doi} is the REST API's view
//     (https://api.crossref.org/swagger-ui/index.html): the record as it was
//     WorksLag ago, else 404 "Resource not found.". Crossref's view lags
//     about an hour, at times a day; it shows the DOI and the deposited
//     date here, nothing else.
//
// Faults (Config.Faults) apply to uploads, numbered by the file's bytes
// (the same file uploaded again, under any name, is its next attempt, so
// that a client's own file names do not change which upload meets which
// fault): a 500,
// 502 or 504 strikes after the upload was queued, so it is processed anyway
// (pkp/pkp-lib#7442; the safe reading of any 5xx after the file was sent);
// a drop queues and hangs up; a slow answer queues and trickles; a reset,
// 409, 429 or 503 strikes before anything is queued, a 503 worded as
// HAProxy's "No server is available to handle this request."
// (CDLUC3/ezid#904). With the reads rule, downloads are numbered by the
// bytes of the file first uploaded under their file name (by the name
// while none was), queries and works views by DOI.
//
// What it leaves out: one user, whose login also queries; no XSD validation
// beyond the elements above, no metadata checks, no resource-only, delete or
// reference deposits, no emails, no prefix ownership (any DOI is
// accepted), no content negotiation or other query formats (format other
// than unixsd is a 400), no persistence, and not the separate
// /v2/deposits route whose 500 pkp/pkp-lib#7442 met. Conflicts compare the element that
// holds a doi_data (its text and attributes, the doi_data left out), not
// Crossref's own matching rules. The HTML of the deposit answers and the
// exact text of a 401, a 400 and unknown_submission are this stub's own.
//
// Crossref is safe for concurrent use.
type Crossref struct {
	cfg CrossrefConfig
	inj *injector

	stubLife                 // mu guards what follows
	subs     []*crSubmission // in upload order
	applied  int             // subs[:applied] are completed
	byFile   map[string]*crSubmission
	records  map[string]*crRecord // lower-case DOI ->
	sameMeta map[string][]string  // metadata fingerprint -> lower-case DOIs holding it
	conflict int64                // last conflict_id
	stats    CrossrefStats
}

// crSubmission is one upload. Its results are set when it completes.
type crSubmission struct {
	id         int64
	fileName   string
	contents   []byte
	deposit    crDeposit
	uploadedAt time.Time
	results    []crResult
}

// crDeposit is what the stub reads of a deposit XML. failure, when set,
// refuses the whole batch.
type crDeposit struct {
	batchID   string
	timestamp uint64
	records   []crDeposited
	failure   *crResult
}

type crDeposited struct {
	doi  string
	meta string // fingerprint of the metadata around the doi_data
}

// crResult is one record_diagnostic.
type crResult struct {
	Status     string   `xml:"status,attr"`
	MsgID      string   `xml:"msg_id,attr,omitempty"`
	DOI        string   `xml:"doi"`
	Msg        string   `xml:"msg"`
	ConflictID string   `xml:"conflict_id,omitempty"`
	InConflict []string `xml:"dois_in_conflict>doi,omitempty"`
}

// crRecord is a registered DOI with its history, for the works view.
type crRecord struct {
	doi       string
	timestamp uint64
	meta      string
	fileName  string
	batchID   string
	history   []crVersion
}

type crVersion struct {
	at        time.Time
	timestamp uint64
}

// NewCrossref returns a Crossref stub for cfg.
func NewCrossref(cfg CrossrefConfig) (*Crossref, error) {
	faults, err := ParseFaults(cfg.Faults)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.QueueDelay < 0 || cfg.ProcessDelay < 0 || cfg.UnknownFor < 0 || cfg.WorksLag < 0 || cfg.Latency < 0 || cfg.MaxPending < 0 {
		return nil, fmt.Errorf("%w: durations and MaxPending must not be negative", ErrConfig)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 10000
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	c := &Crossref{
		cfg: cfg, stubLife: newStubLife(),
		byFile: map[string]*crSubmission{}, records: map[string]*crRecord{}, sameMeta: map[string][]string{},
	}
	c.stats.UploadsByFile, c.stats.Versions = map[string]int64{}, map[string]int64{}
	c.inj = newInjector(faults, cfg.Seed, cfg.Latency, cfg.now, c.done, crRefuse, &c.mu)
	return c, nil
}

// Close ends every wait; later requests get 503. Close is idempotent.
func (c *Crossref) Close() error { return c.end() }

// Stats returns a snapshot of the counters, after processing every
// submission that is due.
func (c *Crossref) Stats() CrossrefStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.process(c.cfg.now())
	s := c.stats
	s.UploadsByFile, s.Versions = maps.Clone(s.UploadsByFile), maps.Clone(s.Versions)
	s.Faults, s.FaultsByKind = c.inj.count, maps.Clone(c.inj.byKind)
	return s
}

// Records returns every registered DOI, sorted by DOI, after processing
// every submission that is due.
func (c *Crossref) Records() []CrossrefRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.process(c.cfg.now())
	out := make([]CrossrefRecord, 0, len(c.records))
	for _, r := range c.records {
		out = append(out, CrossrefRecord{DOI: r.doi, Timestamp: r.timestamp, Versions: len(r.history), FileName: r.fileName, BatchID: r.batchID})
	}
	slices.SortFunc(out, func(a, b CrossrefRecord) int { return strings.Compare(a.DOI, b.DOI) })
	return out
}

// ServeHTTP answers one request.
func (c *Crossref) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.stats.Requests++
	closed := c.closed
	c.process(c.cfg.now())
	c.mu.Unlock()
	if closed {
		crRefuse(w, http.StatusServiceUnavailable)
		return
	}
	path := r.URL.Path
	switch {
	case path == "/servlet/deposit":
		if r.Method != http.MethodPost {
			crText(w, http.StatusMethodNotAllowed, "Method not allowed: the deposit takes POST.")
			return
		}
		c.deposit(w, r)
	case path == "/servlet/submissionDownload" || path == "/servlet/query" || strings.HasPrefix(path, "/works/"):
		if r.Method != http.MethodGet {
			crText(w, http.StatusMethodNotAllowed, "Method not allowed: this takes GET.")
			return
		}
		switch {
		case path == "/servlet/submissionDownload":
			c.download(w, r)
		case path == "/servlet/query":
			c.query(w, r)
		default:
			c.works(w, r)
		}
	default:
		crText(w, http.StatusNotFound, "Not found.")
	}
}

// authorized reports whether login and password are the configured
// credentials; login may be "user/role" for a role login.
func (c *Crossref) authorized(login, password string) bool {
	if c.cfg.Login == "" {
		return true
	}
	if _, role, ok := strings.Cut(login, "/"); ok {
		login = role
	}
	okLogin := subtle.ConstantTimeCompare([]byte(login), []byte(c.cfg.Login)) == 1
	okPassword := subtle.ConstantTimeCompare([]byte(password), []byte(c.cfg.Password)) == 1
	return okLogin && okPassword
}

// unauthorized answers 401, or with LoginPage the login page with status
// 200, without echoing anything the client sent.
func (c *Crossref) unauthorized(w http.ResponseWriter) {
	c.mu.Lock()
	c.stats.Unauthorized++
	c.mu.Unlock()
	if c.cfg.LoginPage {
		w.Header().Set("Content-Type", "text/html;charset=UTF-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(crLoginPage)))
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, crLoginPage)
		return
	}
	crText(w, http.StatusUnauthorized, "Unauthorized: wrong login or password.")
}

// crLoginPage is the answer to wrong credentials under LoginPage; its
// words are the stub's own.
const crLoginPage = `<!DOCTYPE html>
<html><head><title>Crossref Login</title></head>
<body><h2>Unauthorized</h2><p>Please log in.</p>
<form method="post" action="/servlet/login"><input type="text" name="usr"><input type="password" name="pwd"><input type="submit" value="Login"></form>
</body></html>
`

// deposit serves POST /servlet/deposit.
func (c *Crossref) deposit(w http.ResponseWriter, r *http.Request) {
	form, ok := readDepositForm(w, r)
	if !ok {
		return
	}
	defer func() { _ = form.RemoveAll() }()
	login, password := formValue(form, "login_id", "usr"), formValue(form, "login_passwd", "pwd")
	if !c.authorized(login, password) {
		c.unauthorized(w)
		return
	}
	if op := formValue(form, "operation"); op != "doMDUpload" {
		crText(w, http.StatusBadRequest, "Bad request: operation must be doMDUpload, got "+strconv.Quote(op)+".")
		return
	}
	name, contents, ok := depositFile(w, form)
	if !ok {
		return
	}
	ft, late := c.uploadFault(contents)
	if !late {
		if _, answered := c.inj.apply(w, ft); answered {
			return
		}
	}
	if !c.inj.delay() {
		crRefuse(w, http.StatusServiceUnavailable)
		return
	}
	if pending, queued := c.enqueue(name, contents); !queued {
		crText(w, http.StatusTooManyRequests, fmt.Sprintf("Too many requests: %d submissions are pending.", pending))
		return
	}
	if late {
		c.inj.counted(ft)
		crRefuse(w, ft.Status)
		return
	}
	w.Header().Set("Content-Type", "text/html;charset=UTF-8")
	c.inj.finish(w, r, ft, http.StatusOK, nil, []byte(crSuccessPage))
}

// crSuccessPage is the deposit's answer: queued, not yet processed.
const crSuccessPage = `<html><head><title>SUCCESS</title></head><body><h2>SUCCESS</h2>` +
	`<p>Your batch submission was successfully received.</p></body></html>`

// uploadFault numbers an upload by its file's bytes and draws its fault;
// late reports a 500, 502 or 504, which strikes after the upload is
// queued.
func (c *Crossref) uploadFault(contents []byte) (fault, bool) {
	file := digest(string(contents))
	c.mu.Lock()
	ak := "deposit\x00" + file
	c.inj.attempts[ak]++
	attempt := c.inj.attempts[ak]
	c.mu.Unlock()
	ft, _ := c.inj.faults.Draw(c.inj.seed, "deposit", file, attempt)
	switch ft.Status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusGatewayTimeout:
		return ft, true
	}
	return ft, false
}

// enqueue queues an upload, unless MaxPending submissions wait already:
// then it returns how many wait, and false. The XML is read now, the results are set when
// the submission completes.
func (c *Crossref) enqueue(name string, contents []byte) (int, bool) {
	dep := parseDeposit(contents)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.now()
	c.process(now)
	if pending := len(c.subs) - c.applied; pending >= c.cfg.MaxPending {
		c.stats.RateLimited++
		return pending, false
	}
	sub := &crSubmission{
		id: 1400000000 + int64(len(c.subs)) + 1, fileName: name, contents: contents,
		deposit: dep, uploadedAt: now,
	}
	c.subs = append(c.subs, sub)
	c.stats.Uploads++
	c.stats.UploadsByFile[name]++
	if _, seen := c.byFile[name]; seen {
		c.stats.Resent++
	} else {
		c.byFile[name] = sub
	}
	c.process(now)
	return 0, true
}

// readDepositForm parses a multipart deposit, answering 400 or 413 when it
// cannot.
func readDepositForm(w http.ResponseWriter, r *http.Request) (*multipart.Form, bool) {
	r.Body = http.MaxBytesReader(w, r.Body, DefaultMaxBodyBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		crText(w, http.StatusBadRequest, "Bad request: the deposit must be multipart/form-data.")
		return nil, false
	}
	form, err := mr.ReadForm(DefaultMaxBodyBytes)
	if err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			crText(w, http.StatusRequestEntityTooLarge, "Request entity too large.")
		} else {
			crText(w, http.StatusBadRequest, "Bad request: the multipart body cannot be read.")
		}
		return nil, false
	}
	return form, true
}

// formValue is the first non-empty value of the first of names that has one.
func formValue(form *multipart.Form, names ...string) string {
	for _, n := range names {
		if v := form.Value[n]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// depositFile reads the deposit's file part: its file name and bytes.
func depositFile(w http.ResponseWriter, form *multipart.Form) (string, []byte, bool) {
	var fh *multipart.FileHeader
	for _, n := range []string{"fname", "mdFile"} {
		if fs := form.File[n]; len(fs) > 0 {
			fh = fs[0]
			break
		}
	}
	if fh == nil || fh.Filename == "" {
		crText(w, http.StatusBadRequest, "Bad request: no file part fname with a file name.")
		return "", nil, false
	}
	f, err := fh.Open()
	if err != nil {
		crText(w, http.StatusBadRequest, "Bad request: the file part cannot be read.")
		return "", nil, false
	}
	defer f.Close()
	contents, err := io.ReadAll(f)
	if err != nil {
		crText(w, http.StatusBadRequest, "Bad request: the file part cannot be read.")
		return "", nil, false
	}
	return fh.Filename, contents, true
}

// process completes, in upload order, every submission due by now.
// c.mu is held.
func (c *Crossref) process(now time.Time) {
	for c.applied < len(c.subs) {
		sub := c.subs[c.applied]
		if now.Before(c.doneAt(sub)) {
			return
		}
		c.apply(sub, now)
		c.applied++
		c.stats.Processed++
	}
}

func (c *Crossref) doneAt(sub *crSubmission) time.Time {
	return sub.uploadedAt.Add(c.cfg.QueueDelay + c.cfg.ProcessDelay)
}

// apply registers the records of one submission and sets its results.
// c.mu is held.
func (c *Crossref) apply(sub *crSubmission, now time.Time) {
	dep := sub.deposit
	if dep.failure != nil {
		c.stats.Malformed++
		sub.results = []crResult{*dep.failure}
		return
	}
	for _, d := range dep.records {
		sub.results = append(sub.results, c.register(d, sub, now))
	}
}

// register applies one record of a deposit. c.mu is held.
func (c *Crossref) register(d crDeposited, sub *crSubmission, now time.Time) crResult {
	key := strings.ToLower(d.doi)
	ts := sub.deposit.timestamp
	rec := c.records[key]
	if rec != nil && ts <= rec.timestamp {
		c.stats.StaleRefused++
		return crResult{Status: "Failure", MsgID: "4", DOI: d.doi, Msg: fmt.Sprintf(
			"Record not processed because submitted version: %d is less or equal to previously submitted version (DOI match)", ts)}
	}
	verb := "added"
	if rec == nil {
		rec = &crRecord{}
		c.records[key] = rec
		c.stats.Registered++
	} else {
		verb = "updated"
		c.stats.Updates++
		c.sameMeta[rec.meta] = slices.DeleteFunc(c.sameMeta[rec.meta], func(k string) bool { return k == key })
	}
	res := crResult{Status: "Success", DOI: d.doi, Msg: "Successfully " + verb}
	if others := c.sameMeta[d.meta]; len(others) > 0 {
		c.conflict++
		c.stats.Conflicts++
		res.Status, res.Msg = "Warning", strings.ToUpper(verb[:1])+verb[1:]+" with conflict"
		res.ConflictID = strconv.FormatInt(c.conflict, 10)
		for _, o := range others {
			res.InConflict = append(res.InConflict, c.records[o].doi)
		}
	}
	c.sameMeta[d.meta] = append(c.sameMeta[d.meta], key)
	rec.doi, rec.timestamp, rec.meta, rec.fileName, rec.batchID = d.doi, ts, d.meta, sub.fileName, sub.deposit.batchID
	rec.history = append(rec.history, crVersion{at: now, timestamp: ts})
	c.stats.Versions[key]++
	return res
}

// download serves GET /servlet/submissionDownload.
func (c *Crossref) download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !c.authorized(q.Get("usr"), q.Get("pwd")) {
		c.unauthorized(w)
		return
	}
	kind := q.Get("type")
	if kind != "result" && kind != "contents" {
		crText(w, http.StatusBadRequest, `Bad request: type must be "result" or "contents".`)
		return
	}
	name, batchID := q.Get("file_name"), q.Get("doi_batch_id")
	if name == "" && batchID == "" {
		crText(w, http.StatusBadRequest, "Bad request: give file_name (or doi_batch_id).")
		return
	}
	numbered := name
	c.mu.Lock()
	if sub := c.byFile[name]; sub != nil {
		numbered = digest(string(sub.contents))
	}
	c.mu.Unlock()
	ft, answered := c.inj.early(w, "read", "download\x00"+numbered+"\x00"+batchID)
	if answered {
		return
	}
	c.mu.Lock()
	c.stats.Downloads++
	now := c.cfg.now()
	c.process(now) // what is due by now is completed, with its results
	sub := c.find(name, batchID, now)
	var body []byte
	switch {
	case sub != nil && kind == "contents":
		body = bytes.Clone(sub.contents)
	default:
		body = c.diagnostic(sub, now)
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	c.inj.finish(w, r, ft, http.StatusOK, nil, body)
}

// find returns the first submission the download names and may see now:
// by file name once UnknownFor has passed, by doi_batch_id once it is in
// process. c.mu is held.
func (c *Crossref) find(name, batchID string, now time.Time) *crSubmission {
	if name != "" {
		sub := c.byFile[name]
		if sub == nil || now.Before(sub.uploadedAt.Add(c.cfg.UnknownFor)) {
			return nil
		}
		return sub
	}
	for _, sub := range c.subs {
		inProcess := !now.Before(sub.uploadedAt.Add(c.cfg.QueueDelay))
		if inProcess && sub.deposit.batchID == batchID && !now.Before(sub.uploadedAt.Add(c.cfg.UnknownFor)) {
			return sub
		}
	}
	return nil
}

// crDiagnostic is the result download's document.
type crDiagnostic struct {
	XMLName      xml.Name     `xml:"doi_batch_diagnostic"`
	Status       string       `xml:"status,attr"`
	SP           string       `xml:"sp,attr"`
	SubmissionID *int64       `xml:"submission_id"`
	BatchID      *string      `xml:"batch_id"`
	Records      []crResult   `xml:"record_diagnostic"`
	BatchData    *crBatchData `xml:"batch_data"`
}

// crBatchData counts the record diagnostics of a completed submission.
type crBatchData struct {
	RecordCount  int `xml:"record_count"`
	SuccessCount int `xml:"success_count"`
	WarningCount int `xml:"warning_count"`
	FailureCount int `xml:"failure_count"`
}

// diagnostic renders the result of sub as it stands now; nil is
// unknown_submission. c.mu is held.
func (c *Crossref) diagnostic(sub *crSubmission, now time.Time) []byte {
	d := crDiagnostic{Status: "unknown_submission", SP: "repotest"}
	if sub != nil {
		id, batchID := sub.id, ""
		d.SubmissionID, d.BatchID = &id, &batchID
		switch {
		case now.Before(sub.uploadedAt.Add(c.cfg.QueueDelay)):
			d.Status = "queued"
		case now.Before(c.doneAt(sub)):
			d.Status, batchID = "in_process", sub.deposit.batchID
		default:
			d.Status, batchID, d.Records = "completed", sub.deposit.batchID, sub.results
			d.BatchData = &crBatchData{RecordCount: len(sub.results)}
			for _, res := range sub.results {
				switch res.Status {
				case "Success":
					d.BatchData.SuccessCount++
				case "Warning":
					d.BatchData.WarningCount++
				default:
					d.BatchData.FailureCount++
				}
			}
		}
	}
	out, _ := xml.MarshalIndent(d, "", "   ")
	return append([]byte(xml.Header), out...)
}

// query serves GET /servlet/query: the unixsd record of one DOI.
func (c *Crossref) query(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	login, password, _ := strings.Cut(q.Get("pid"), ":")
	if q.Get("pid") == "" || !c.authorized(login, password) {
		c.unauthorized(w)
		return
	}
	if f := q.Get("format"); f != "unixsd" {
		crText(w, http.StatusBadRequest, "Bad request: format must be unixsd, got "+strconv.Quote(f)+".")
		return
	}
	doi := strings.TrimPrefix(q.Get("id"), "doi:")
	if doi == "" {
		crText(w, http.StatusBadRequest, "Bad request: id must name a DOI.")
		return
	}
	ft, answered := c.inj.early(w, "read", "query\x00"+strings.ToLower(doi))
	if answered {
		return
	}
	c.mu.Lock()
	c.stats.Queries++
	rec := c.records[strings.ToLower(doi)]
	var b strings.Builder
	b.WriteString(xml.Header)
	b.WriteString(`<crossref_result xmlns="http://www.crossref.org/qrschema/3.0" version="3.0">` +
		"\n<query_result>\n<head><doi_batch_id>none</doi_batch_id></head>\n<body>\n")
	if rec == nil {
		fmt.Fprintf(&b, "<query status=\"unresolved\"><doi>%s</doi></query>\n", xmlEscape(doi))
	} else {
		fmt.Fprintf(&b, "<query status=\"resolved\"><doi>%s</doi>\n"+
			"<crm-item name=\"deposit-timestamp\" type=\"number\">%d</crm-item>\n</query>\n",
			xmlEscape(rec.doi), rec.timestamp)
	}
	b.WriteString("</body>\n</query_result>\n</crossref_result>\n")
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	c.inj.finish(w, r, ft, http.StatusOK, nil, []byte(b.String()))
}

// works serves GET /works/{doi}: the record as it was WorksLag ago.
func (c *Crossref) works(w http.ResponseWriter, r *http.Request) {
	doi, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/works/"))
	if err != nil || doi == "" {
		crText(w, http.StatusNotFound, "Resource not found.")
		return
	}
	ft, answered := c.inj.early(w, "read", "works\x00"+strings.ToLower(doi))
	if answered {
		return
	}
	c.mu.Lock()
	c.stats.WorksReads++
	var seen *crVersion
	rec := c.records[strings.ToLower(doi)]
	if rec != nil {
		horizon := c.cfg.now().Add(-c.cfg.WorksLag)
		for i := range rec.history {
			if !rec.history[i].at.After(horizon) {
				seen = &rec.history[i]
			}
		}
	}
	var body []byte
	if seen != nil {
		body, _ = json.Marshal(map[string]any{
			"status": "ok", "message-type": "work", "message-version": "1.0.0",
			"message": map[string]any{
				"DOI": strings.ToLower(rec.doi),
				"deposited": map[string]any{
					"date-time": seen.at.UTC().Format(time.RFC3339), "timestamp": seen.at.UnixMilli(),
				},
			},
		})
	}
	c.mu.Unlock()
	if seen == nil {
		crText(w, http.StatusNotFound, "Resource not found.")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	c.inj.finish(w, r, ft, http.StatusOK, nil, body)
}

// crText answers a plain-text message.
func crText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(msg)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

// crRefuse answers an injected or closing status: a 503 as HAProxy words
// it in front of Crossref (CDLUC3/ezid#904), others as a short HTML page.
func crRefuse(w http.ResponseWriter, status int) {
	body := "<html><body><h1>" + strconv.Itoa(status) + " " + html.EscapeString(http.StatusText(status)) + "</h1>\n"
	if status == http.StatusServiceUnavailable {
		body += "No server is available to handle this request.\n"
	}
	body += "</body></html>\n"
	w.Header().Set("Content-Type", "text/html")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// digest is the lowercase hex SHA-256 of s.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// crNode is one element of a deposit XML, as far as the stub reads it.
type crNode struct {
	name     string // local name
	attrs    []xml.Attr
	text     strings.Builder
	children []*crNode
}

// parseDeposit reads what the stub needs of a deposit: doi_batch_id,
// timestamp, and each doi_data/doi with a fingerprint of the metadata
// around it. A deposit it cannot use carries the batch's failure.
func parseDeposit(contents []byte) crDeposit {
	root, err := parseCRTree(contents)
	if err != nil {
		return crDeposit{failure: &crResult{Status: "Failure", MsgID: "29", Msg: "Deposit is not well-formed XML: " + err.Error()}}
	}
	schema := func(what string) crDeposit {
		return crDeposit{failure: &crResult{Status: "Failure", Msg: "Error validating schema crossref5.3.1.xsd : " + what}}
	}
	if root.name != "doi_batch" {
		return schema("the root element is " + root.name + ", not doi_batch")
	}
	head := root.child("head")
	if head == nil {
		return schema("doi_batch has no head")
	}
	dep := crDeposit{}
	if b := head.child("doi_batch_id"); b != nil {
		dep.batchID = strings.TrimSpace(b.text.String())
	}
	if dep.batchID == "" {
		return schema("head has no doi_batch_id")
	}
	ts := ""
	if t := head.child("timestamp"); t != nil {
		ts = strings.TrimSpace(t.text.String())
	}
	n, err := strconv.ParseUint(ts, 10, 64)
	if err != nil || len(ts) > 19 || strings.TrimLeft(ts, "0123456789") != "" {
		return schema("head/timestamp " + strconv.Quote(ts) + " is not a number of at most 19 digits")
	}
	dep.timestamp = n
	root.collectDOIs(&dep.records)
	if len(dep.records) == 0 {
		return schema("no doi_data/doi in the body")
	}
	return dep
}

// parseCRTree parses well-formed XML into a tree of elements. It reads
// UTF-8, and US-ASCII, a subset of it, as a Java parser does: a byte above
// 0x7F under a US-ASCII declaration is not well-formed. Crossref takes no
// other encoding
// (https://www.crossref.org/documentation/register-maintain-records/direct-deposit-xml/).
func parseCRTree(contents []byte) (*crNode, error) {
	dec := xml.NewDecoder(bytes.NewReader(contents))
	dec.CharsetReader = func(label string, r io.Reader) (io.Reader, error) {
		switch strings.ToLower(label) {
		case "us-ascii", "ascii", "iso-ir-6", "ansi_x3.4-1968", "ansi_x3.4-1986", "iso_646.irv:1991", "iso646-us", "us", "ibm367", "cp367", "csascii":
		default:
			return nil, fmt.Errorf("encoding %q is not UTF-8", label)
		}
		if i := bytes.IndexFunc(contents, func(r rune) bool { return r >= 0x80 }); i >= 0 {
			return nil, fmt.Errorf("byte 0x%X at offset %d is not US-ASCII", contents[i], i)
		}
		return r, nil
	}
	var root *crNode
	var open []*crNode
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			n := &crNode{name: t.Name.Local, attrs: slices.Clone(t.Attr)}
			switch {
			case len(open) > 0:
				top := open[len(open)-1]
				top.children = append(top.children, n)
			case root != nil:
				line, _ := dec.InputPos()
				return nil, fmt.Errorf("line %d: a second root element %s", line, t.Name.Local)
			default:
				root = n
			}
			open = append(open, n)
		case xml.EndElement:
			open = open[:len(open)-1]
		case xml.CharData:
			if len(open) > 0 {
				open[len(open)-1].text.Write(t)
			} else if len(bytes.TrimSpace(t)) > 0 {
				line, _ := dec.InputPos()
				return nil, fmt.Errorf("line %d: content outside the root element", line)
			}
		}
	}
	if root == nil {
		return nil, errors.New("no root element")
	}
	return root, nil
}

// child is n's first child element named name, or nil.
func (n *crNode) child(name string) *crNode {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	return nil
}

// collectDOIs appends, in document order, each doi_data/doi under n with
// the fingerprint of the element that holds the doi_data.
func (n *crNode) collectDOIs(out *[]crDeposited) {
	for _, c := range n.children {
		if c.name != "doi_data" {
			c.collectDOIs(out)
			continue
		}
		if d := c.child("doi"); d != nil {
			if doi := strings.TrimSpace(d.text.String()); doi != "" {
				var b strings.Builder
				n.fingerprint(&b)
				*out = append(*out, crDeposited{doi: doi, meta: digest(b.String())})
			}
		}
	}
}

// fingerprint writes n's names, sorted attributes and trimmed text, every
// doi_data left out, so that two records that differ only in their DOI and
// resource write the same.
func (n *crNode) fingerprint(b *strings.Builder) {
	attrs := make([]string, 0, len(n.attrs))
	for _, a := range n.attrs {
		attrs = append(attrs, a.Name.Local+"="+strconv.Quote(a.Value))
	}
	slices.Sort(attrs)
	fmt.Fprintf(b, "<%s %s>%q", n.name, strings.Join(attrs, " "), strings.TrimSpace(n.text.String()))
	for _, c := range n.children {
		if c.name != "doi_data" {
			c.fingerprint(b)
		}
	}
	b.WriteString("</>")
}

// CrossrefServer is a Crossref stub listening on 127.0.0.1 with a random
// port, for tests: deposit to URL + "/servlet/deposit", download results
// from URL + "/servlet/submissionDownload", query URL + "/servlet/query"
// and read URL + "/works/{doi}", then Close it. It is safe for concurrent
// use by multiple goroutines.
type CrossrefServer struct {
	// URL is the server's root, "http://127.0.0.1:PORT", standing for
	// https://doi.crossref.org and https://api.crossref.org at once.
	URL string

	c  *Crossref
	lo *loopback
}

// NewCrossrefServer starts a Crossref stub for cfg on 127.0.0.1.
func NewCrossrefServer(cfg CrossrefConfig) (*CrossrefServer, error) {
	c, err := NewCrossref(cfg)
	if err != nil {
		return nil, err
	}
	lo, err := startLoopback(c, func(w http.ResponseWriter, _ *http.Request) {
		crRefuse(w, http.StatusServiceUnavailable)
	})
	if err != nil {
		return nil, err
	}
	return &CrossrefServer{URL: lo.url, c: c, lo: lo}, nil
}

// Client returns an HTTP client for the server. Its idle connections are
// closed by Close.
func (s *CrossrefServer) Client() *http.Client { return s.lo.client }

// Stats returns a snapshot of the stub's counters.
func (s *CrossrefServer) Stats() CrossrefStats { return s.c.Stats() }

// Records returns every registered DOI, sorted by DOI.
func (s *CrossrefServer) Records() []CrossrefRecord { return s.c.Records() }

// Close ends every wait, closes the listener and every connection, and
// waits for the handlers to return. Close is idempotent.
func (s *CrossrefServer) Close() { s.lo.close(s.c.Close, nil) }
