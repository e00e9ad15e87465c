package crossref_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/backoff"
	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/client"
	"github.com/depositkit/deposit/dedup"
	"github.com/depositkit/deposit/repotest"
	"github.com/depositkit/deposit/target/crossref"
)

const (
	login    = "lab-role"
	password = "Pw-crossref-7Qx!z"
)

// workXML is a deposit of one dataset: its title is the metadata, so two
// DOIs with the same title are in conflict at the stub.
func workXML(doi, title string, timestamp uint64, batchID string) string {
	return `<?xml version="1.0" encoding="UTF-8"?>
<doi_batch version="5.3.1" xmlns="http://www.crossref.org/schema/5.3.1">
<head><doi_batch_id>` + batchID + `</doi_batch_id><timestamp>` + fmt.Sprint(timestamp) + `</timestamp>
<depositor><depositor_name>Lab</depositor_name><email_address>lab@example.org</email_address></depositor><registrant>Lab</registrant></head>
<body><database><database_metadata><titles><title>Lab data</title></titles></database_metadata>
<dataset><titles><title>` + title + `</title></titles>
<doi_data><doi>` + doi + `</doi><resource>https://example.org/` + doi + `</resource></doi_data></dataset></database></body>
</doi_batch>
`
}

// line is one input line with the work's XML inline.
func line(doi, title string, timestamp uint64, batchID string) []byte {
	b, err := json.Marshal(map[string]string{"doi": doi, "xml": workXML(doi, title, timestamp, batchID)})
	if err != nil {
		panic(err)
	}
	return b
}

// env is a stub, a store and a way to run batches on them.
type env struct {
	t    *testing.T
	srv  *repotest.CrossrefServer
	db   string
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newEnv(t *testing.T, cfg repotest.CrossrefConfig) *env {
	cfg.Login, cfg.Password = login, password
	srv, err := repotest.NewCrossrefServer(cfg)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, db: filepath.Join(t.TempDir(), "deposit.db"), logs: &syncBuffer{}}
}

func (e *env) target() crossref.Target {
	return crossref.Target{Endpoint: e.srv.URL + "/servlet/deposit", Login: login, Password: password,
		Settle: 20 * time.Millisecond}
}

// run deposits lines as one batch on the env's store and returns each
// line's result, by line number from 1.
func (e *env) run(lines ...[]byte) ([]client.ItemResult, client.Summary) {
	t := e.t
	store, err := dedup.Open(e.db)
	require.NoError(t, err)
	defer store.Close()
	c, err := client.New(client.Config{Target: e.target(), Store: store,
		Retry:  backoff.Policy{Base: 2 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 8, MaxElapsed: 30 * time.Second},
		Logger: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	var mu sync.Mutex
	results := make([]client.ItemResult, len(lines))
	items := func(yield func(client.Item) bool) {
		for i, l := range lines {
			if !yield(client.Item{Line: int64(i + 1), Payload: l}) {
				return
			}
		}
	}
	sum, err := c.Run(context.Background(), items, client.BatchOptions{Concurrency: 4, OnResult: func(r client.ItemResult) {
		mu.Lock()
		defer mu.Unlock()
		results[r.Line-1] = r
	}})
	require.NoError(t, err)
	return results, sum
}

func outcomes(rs []client.ItemResult) []client.Outcome {
	var out []client.Outcome
	for _, r := range rs {
		out = append(out, r.Outcome)
	}
	return out
}

func batch(n int, title string, timestamp uint64, batchID string) [][]byte {
	var out [][]byte
	for i := range n {
		out = append(out, line(fmt.Sprintf("10.5555/w%02d", i), fmt.Sprintf("%s %d", title, i), timestamp, batchID))
	}
	return out
}

func TestEachWorkIsRegisteredOnceThroughTheQueue(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{QueueDelay: 15 * time.Millisecond, ProcessDelay: 15 * time.Millisecond, UnknownFor: 5 * time.Millisecond})
	rs, sum := e.run(batch(6, "Reef", 20260101000000000, "b-1")...)
	require.Equal(t, 6, sum.Created, outcomes(rs))
	for i, r := range rs {
		require.Equal(t, fmt.Sprintf("10.5555/w%02d", i), r.Identifier)
	}
	st := e.srv.Stats()
	require.Equal(t, int64(6), st.Uploads)
	require.Equal(t, int64(6), st.Registered)
	require.Zero(t, st.Resent)
}

func TestAReplayOfAFinishedBatchSendsNothing(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	lines := batch(5, "Reef", 20260101000000000, "b-1")
	_, sum := e.run(lines...)
	require.Equal(t, 5, sum.Created)
	before := e.srv.Stats().Requests
	rs, sum := e.run(lines...)
	require.Equal(t, 5, sum.Replayed, outcomes(rs))
	require.Equal(t, before, e.srv.Stats().Requests, "a replay sends nothing")
}

func TestARegeneratedBatchWithANewClockAndBatchIDSendsNothing(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	_, sum := e.run(batch(5, "Reef", 20260101000000000, "b-1")...)
	require.Equal(t, 5, sum.Created)
	before := e.srv.Stats().Requests
	rs, sum := e.run(batch(5, "Reef", 20260301000000000, "b-2")...)
	require.Equal(t, 5, sum.Replayed, outcomes(rs))
	require.Equal(t, before, e.srv.Stats().Requests, "a regenerated file is the same deposit")
}

func TestAChangedWorkIsDepositedOnceAsANewVersion(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	_, sum := e.run(batch(4, "Reef", 20260101000000000, "b-1")...)
	require.Equal(t, 4, sum.Created)
	changed := batch(4, "Reef", 20260301000000000, "b-2")
	changed[2] = line("10.5555/w02", "Reef 2, revised", 20260301000000000, "b-2")
	rs, _ := e.run(changed...)
	require.Equal(t, []client.Outcome{"replayed", "replayed", "updated", "replayed"}, outcomes(rs))
	rs, _ = e.run(changed...)
	require.Equal(t, []client.Outcome{"replayed", "replayed", "replayed", "replayed"}, outcomes(rs))
	st := e.srv.Stats()
	require.Equal(t, int64(5), st.Uploads)
	require.Equal(t, map[string]int64{"10.5555/w00": 1, "10.5555/w01": 1, "10.5555/w02": 2, "10.5555/w03": 1}, st.Versions)
	for _, r := range e.srv.Records() {
		if r.DOI == "10.5555/w02" {
			require.Equal(t, uint64(20260301000000000), r.Timestamp)
		}
	}
}

func TestALostStoreRegistersNoNewVersion(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	lines := batch(4, "Reef", 20260101000000000, "b-1")
	_, sum := e.run(lines...)
	require.Equal(t, 4, sum.Created)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		require.NoError(t, os.RemoveAll(e.db+suffix))
	}
	rs, sum := e.run(lines...)
	require.Equal(t, 4, sum.Created+sum.Existing, outcomes(rs))
	st := e.srv.Stats()
	require.Equal(t, map[string]int64{"10.5555/w00": 1, "10.5555/w01": 1, "10.5555/w02": 1, "10.5555/w03": 1}, st.Versions)
	require.Zero(t, st.Updates)
}

// A store lost while the same work is deposited from a file with the same
// timestamp under another name (another key's file, a copy): the query
// before the upload shows that timestamp registered, which Crossref's rule
// would refuse beside it: existing, and nothing is uploaded.
func TestALostStoreFindsAnEqualTimestampRegisteredAndUploadsNothing(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	_, sum := e.run(line("10.5555/a", "Reef", 20260101000000000, "b-1"))
	require.Equal(t, 1, sum.Created)
	require.NoError(t, os.RemoveAll(filepath.Dir(e.db)))
	require.NoError(t, os.MkdirAll(filepath.Dir(e.db), 0o755))
	queries := e.srv.Stats().Queries
	// Another batch id in another form changes nothing the key covers,
	// but whitespace in the XML does: a new file name, the same version.
	x := strings.Replace(workXML("10.5555/a", "Reef", 20260101000000000, "b-9"), "<body>", "<body>\n", 1)
	b, err := json.Marshal(map[string]string{"doi": "10.5555/a", "xml": x})
	require.NoError(t, err)
	rs, _ := e.run(b)
	require.Equal(t, client.OutcomeExisting, rs[0].Outcome, rs[0].Err)
	require.Equal(t, "10.5555/a", rs[0].Identifier)
	st := e.srv.Stats()
	require.Equal(t, int64(1), st.Uploads, "nothing uploaded after the lost store")
	require.Zero(t, st.StaleRefused)
	require.Equal(t, queries+1, st.Queries, "one read: the registered timestamp")
	require.Equal(t, map[string]int64{"10.5555/a": 1}, st.Versions)
}

// An older file than the version the store applied is stale from the
// store: nothing is read or sent, and the newer deposit stands.
func TestAnOlderVersionIsStaleAndNeverSent(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	rs, sum := e.run(line("10.5555/a", "Reef, newest", 20260301000000000, "b-2"))
	require.Equal(t, 1, sum.Created)
	newest := rs[0].Key
	requests := e.srv.Stats().Requests
	old := line("10.5555/a", "Reef, older", 20260101000000000, "b-1")
	for range 2 {
		rs, _ = e.run(old)
		require.Equal(t, client.OutcomeStale, rs[0].Outcome, rs[0].Err)
		require.NoError(t, rs[0].Err)
		require.Equal(t, newest, rs[0].Current)
	}
	require.Equal(t, requests, e.srv.Stats().Requests, "nothing sent, nothing read")
	require.Equal(t, uint64(20260301000000000), e.srv.Records()[0].Timestamp, "the newer deposit stands")
}

// v1 then v2 of one DOI, the store lost, v1 again: the query before the
// upload shows v2's greater timestamp registered, so v1 is stale and is
// not uploaded (Crossref would refuse it by its timestamp rule); a later
// run reads again and sends nothing.
func TestALostStoreReportsAnOlderFileStaleAndUploadsNothing(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	v1 := line("10.5555/a", "Reef", 20260101000000000, "b-1")
	v2 := line("10.5555/a", "Reef, revised", 20260201000000000, "b-2")
	_, sum := e.run(v1)
	require.Equal(t, 1, sum.Created)
	_, sum = e.run(v2)
	require.Equal(t, 1, sum.Updated)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		require.NoError(t, os.RemoveAll(e.db+suffix))
	}
	uploads := e.srv.Stats().Uploads
	for range 2 {
		rs, sum := e.run(v1)
		require.Equal(t, client.OutcomeStale, rs[0].Outcome, rs[0].Err)
		require.Zero(t, sum.Created+sum.Failed)
	}
	st := e.srv.Stats()
	require.Equal(t, uploads, st.Uploads, "not uploaded")
	require.Zero(t, st.StaleRefused)
	require.Equal(t, uint64(20260201000000000), e.srv.Records()[0].Timestamp, "v2 stands")
}

func TestAConflictIsDoneAndNamesTheDOIsInConflict(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	_, sum := e.run(line("10.5555/a", "Same title", 20260101000000000, "b-1"))
	require.Equal(t, 1, sum.Created)
	rs, _ := e.run(line("10.5555/b", "Same title", 20260101000000000, "b-1"))
	require.Equal(t, client.OutcomeCreated, rs[0].Outcome, rs[0].Err)
	require.Equal(t, int64(1), e.srv.Stats().Conflicts)
	require.Contains(t, e.logs.String(), "in conflict with 10.5555/a")
}

func TestADepositXMLCrossrefRefusesWholeIsFailedWithItsProblem(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	x := strings.ReplaceAll(workXML("10.5555/a", "Reef", 20260101000000000, "b-1"), "doi_batch", "batch")
	x = strings.Replace(x, "<batch_id>", "<doi_batch_id>", 1)
	x = strings.Replace(x, "</batch_id>", "</doi_batch_id>", 1)
	b, err := json.Marshal(map[string]string{"doi": "10.5555/a", "xml": x})
	require.NoError(t, err)
	rs, _ := e.run(b)
	require.Equal(t, client.OutcomeFailed, rs[0].Outcome)
	require.ErrorContains(t, rs[0].Err, "Crossref refused the deposit XML of 10.5555/a: Error validating schema")
}

func TestAFileWithSeveralWorksIsInvalid(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	two := strings.Replace(workXML("10.5555/a", "Reef", 1, "b"), "</dataset>",
		"</dataset><dataset><titles><title>Kelp</title></titles><doi_data><doi>10.5555/b</doi><resource>https://example.org/b</resource></doi_data></dataset>", 1)
	b, err := json.Marshal(map[string]string{"doi": "10.5555/a", "xml": two})
	require.NoError(t, err)
	rs, _ := e.run(b)
	require.Equal(t, client.OutcomeInvalid, rs[0].Outcome)
	require.ErrorContains(t, rs[0].Err, "holds 2 works (doi_data: 10.5555/a, 10.5555/b): a line is one work")
	require.Zero(t, e.srv.Stats().Requests)
}

// A deposit file declared US-ASCII (a subset of UTF-8) is registered as
// one declared UTF-8; one declared ISO-8859-1 is invalid, saying Crossref
// takes UTF-8 only, and nothing is sent for it.
func TestADepositDeclaredUSASCIIIsRegisteredAndOneDeclaredLatin1IsInvalid(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	declared := func(doi, enc string) []byte {
		x := strings.Replace(workXML(doi, "Reef", 1, "b-1"), `encoding="UTF-8"`, `encoding="`+enc+`"`, 1)
		b, err := json.Marshal(map[string]string{"doi": doi, "xml": x})
		require.NoError(t, err)
		return b
	}
	rs, _ := e.run(declared("10.5555/ascii", "US-ASCII"), declared("10.5555/latin", "ISO-8859-1"))
	require.Equal(t, client.OutcomeCreated, rs[0].Outcome, rs[0].Err)
	require.Equal(t, client.OutcomeInvalid, rs[1].Outcome)
	require.ErrorContains(t, rs[1].Err, `declares encoding "ISO-8859-1": Crossref takes UTF-8 only`)
	st := e.srv.Stats()
	require.Equal(t, int64(1), st.Uploads)
	require.Equal(t, map[string]int64{"10.5555/ascii": 1}, st.Versions)
}

func TestAWorkInAFileBesideTheInputKeysAsInline(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.xml"), []byte(workXML("10.5555/a", "Reef", 1, "b-1")), 0o644))
	drv, err := crossref.Target{Dir: dir}.Driver()
	require.NoError(t, err)
	keyer := mustKeyer(t)
	fromFile, err := client.KeyPayload(keyer, drv, []byte(`{"doi":"10.5555/a","xml_file":"a.xml"}`))
	require.NoError(t, err)
	inline, err := client.KeyPayload(keyer, drv, line("10.5555/a", "Reef", 2, "b-2"))
	require.NoError(t, err)
	require.Equal(t, inline.Key, fromFile.Key)
	require.Contains(t, string(fromFile.Body), `<timestamp>1</timestamp>`, "the file's own bytes are the body")
	_, err = client.KeyPayload(keyer, drv, []byte(`{"doi":"10.5555/a","xml_file":"../a.xml"}`))
	require.ErrorIs(t, err, crossref.ErrInvalidWork)
}

// A run that left its upload queued left the intent pending with the
// file's first bytes. The file is then regenerated with a new clock: the
// next run polls the first upload's result, sends nothing, and the
// version registered is the first one's.
func TestAResumedDepositPollsTheFirstUploadAndNeverSendsTheRegeneratedFile(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{QueueDelay: time.Second})
	store, err := dedup.Open(e.db)
	require.NoError(t, err)
	tg := e.target()
	tg.Poll = time.Millisecond
	c, err := client.New(client.Config{Target: tg, Store: store, Retry: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond}})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), line("10.5555/a", "Reef", 1, "b-1"))
	require.ErrorIs(t, err, client.ErrUnresolved)
	require.ErrorContains(t, err, "not yet settled")
	require.ErrorContains(t, err, "queued at Crossref")
	require.NoError(t, store.Close())

	rs, sum := e.run(line("10.5555/a", "Reef", 2, "b-2"))
	require.Equal(t, client.OutcomeCreated, rs[0].Outcome, rs[0].Err)
	require.Equal(t, 1, sum.Recovered)
	st := e.srv.Stats()
	require.Equal(t, int64(1), st.Uploads, "the queued upload is never sent again")
	require.Equal(t, uint64(1), e.srv.Records()[0].Timestamp, "the first bytes' version, not the regenerated one")
}

// An upload cut off before it was queued (a connection reset) leaves the
// deposit uncertain: its run looks, waits Settle, looks again and, out of
// attempts, leaves it. The next run starts more than Settle after the
// upload's intent was recorded, so it trusts its first look and uploads
// again at once: Settle is counted from the upload, not from each run's
// first look.
func TestSettleIsCountedFromTheUploadNotFromEachRun(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{Faults: "nth=1:reset"})
	w := line("10.5555/a", "Reef", 1, "b-1")
	store, err := dedup.Open(e.db)
	require.NoError(t, err)
	tg := e.target()
	tg.Settle = 300 * time.Millisecond
	c, err := client.New(client.Config{Target: tg, Store: store, Retry: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 1}})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), w)
	require.ErrorIs(t, err, client.ErrUnresolved)
	require.NoError(t, store.Close())
	st := e.srv.Stats()
	require.Zero(t, st.Uploads, "the reset queued nothing")
	require.Equal(t, int64(2), st.Downloads, "a look, Settle, and a look again")

	store, err = dedup.Open(e.db)
	require.NoError(t, err)
	defer store.Close()
	c, err = client.New(client.Config{Target: tg, Store: store, Retry: backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 4}})
	require.NoError(t, err)
	res, err := c.Deposit(context.Background(), w)
	require.NoError(t, err)
	require.Equal(t, client.OutcomeCreated, res.Outcome)
	require.True(t, res.Recovered)
	st = e.srv.Stats()
	require.Equal(t, int64(1), st.Uploads)
	require.Equal(t, int64(2+1+1), st.Downloads, "one look before the upload, trusted; one poll after it")
}

func mustKeyer(t *testing.T) *canonical.Keyer {
	k, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(t, err)
	return k
}

// The password travels in the deposit's form (login_passwd), the
// download's query (pwd) and the query's pid: it is in nothing the run
// writes, faults, retries, a wrong login and a debug log included.
func TestThePasswordIsInNothingTheRunWrites(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{Faults: "drop=0.2,500=0.15,503=0.15,slow=0.1:every=1ms,reads", Seed: 5,
		QueueDelay: 5 * time.Millisecond, UnknownFor: 5 * time.Millisecond})
	lines := batch(12, "Reef", 20260101000000000, "b-1")
	lines = append(lines, line("10.5555/w00", "Reef 0, older", 1, "b-0")) // stale
	rs, _ := e.run(lines...)
	require.NoError(t, os.RemoveAll(e.db)) // the lost store: equal timestamps, queries
	rs2, _ := e.run(lines...)

	var written []string
	for _, r := range append(rs, rs2...) {
		written = append(written, r.Identifier, r.Key, fmt.Sprint(r.Err))
	}
	written = append(written, e.logs.String())
	entries, err := os.ReadDir(filepath.Dir(e.db))
	require.NoError(t, err)
	for _, f := range entries {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(e.db), f.Name()))
		require.NoError(t, err)
		written = append(written, f.Name(), string(b))
	}
	store, err := dedup.Open(e.db)
	require.NoError(t, err)
	defer store.Close()
	tg, err := e.target().Driver()
	require.NoError(t, err)
	written = append(written, tg.Name())

	// A wrong password stops the run with an error that names neither.
	wrong := e.target()
	wrong.Password = "Wrong-pass-9Kd"
	c, err := client.New(client.Config{Target: wrong, Store: store})
	require.NoError(t, err)
	_, err = c.Deposit(context.Background(), line("10.5555/new", "New", 1, "b"))
	require.ErrorIs(t, err, client.ErrStopRun)
	written = append(written, err.Error())

	all := strings.Join(written, "\n")
	require.Contains(t, outcomes(rs2), client.OutcomeStale, "the older file is stale")
	require.NotEmpty(t, e.srv.Stats().Faults, "faults were met")
	for _, secret := range []string{password, "Pw-crossref-7Qx%21z", "Pw-crossref-7Qx", "Wrong-pass-9Kd"} {
		require.NotContains(t, all, secret)
	}
}

// DOIs are case-insensitive: lines naming 10.5555/Reef-1 and
// 10.5555/REEF-1 are one work, the second one's newer file its update.
func TestADOIInAnotherCaseIsTheSameWork(t *testing.T) {
	e := newEnv(t, repotest.CrossrefConfig{})
	rs, _ := e.run(line("10.5555/Reef-1", "Reef", 20260101000000000, "b-1"),
		line("10.5555/REEF-1", "Reef, corrected", 20260201000000000, "b-2"))
	require.Equal(t, []client.Outcome{"created", "updated"}, outcomes(rs))
	require.Equal(t, rs[0].Object, rs[1].Object, "one object")
	require.Equal(t, map[string]int64{"10.5555/reef-1": 2}, e.srv.Stats().Versions)
}
