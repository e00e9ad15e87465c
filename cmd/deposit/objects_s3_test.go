package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/target/s3"
)

// Objects on a real S3 server (versitygw) behind faults, with SIGKILLs
// mid-run (issue 41): three inputs of the same 300 objects, v1, then v2
// (30% changed) and v3 (30% of v2 changed again, a third of them changed
// twice), each run until it exits 0 on one store. The bucket holds one
// object per identity with its v3 bytes; versitygw applied 300 creates
// and exactly one update per change, in input order, a write whose answer
// was lost or whose sender was killed included. A v1 re-run writes
// nothing: each changed object's line is stale, the others replayed. A
// lost store and the v3 input again write nothing and exit 0.
func TestKilledS3ObjectRunsApplyEachChangeOnce(t *testing.T) {
	versity := peertest.Versity(t)
	ledger := newS3Ledger(t, versity)
	const objects = 300
	batches := newS3ObjectBatches(objects)
	changes := 0
	for i := range objects {
		changes += len(batches.history(i)) - 1
	}
	require.Equal(t, 180, changes, "90 objects changed in v2, 90 in v3, 30 of them twice")

	dir := t.TempDir()
	store := filepath.Join(dir, "deposit.db")
	env := []string{"PATH=" + os.Getenv("PATH")}
	env = append(env, versity.Env()...)
	command := func(endpoint, db, input string) *exec.Cmd {
		cmd := exec.Command(binary, "run", "--protocol", "s3", "--endpoint", endpoint+"/"+versity.Bucket,
			"--identity", "/id", "--concurrency", "8", "--db", db, "--json", input)
		cmd.Env = env
		return cmd
	}

	addr := "" // the proxy's, kept from batch to batch: the store's target names it
	for i, name := range []string{"v1", "v2", "v3"} {
		lines := batches[i]
		ok := t.Run(name, func(t *testing.T) {
			var payloads [][]byte
			for _, line := range lines {
				payloads = append(payloads, []byte(line))
			}
			within := int64(80) // the writes of v2 and v3: 90 updates
			if i == 0 {
				within = 280 // v1: 300 creates
			}
			report := drivertest.Harness{
				Handler: ledger,
				Faults: drivertest.Faults{Spec: "drop=0.08,reset=0.03,500=0.03,503=0.03:retry-after=1,reads",
					Seed: int64(41 + i)},
				Payloads: payloads,
				Command:  func(c drivertest.Child) *exec.Cmd { return command(c.Endpoint, c.Store, c.Input) },
				KillAt:   drivertest.RandomKills(uint64(41+i), 3, within),
				Store:    store,
				Addr:     addr,
				Check: func([][]byte) error {
					return ledger.bucketHolds(lines)
				},
			}.Run(t)
			addr = strings.TrimPrefix(report.Endpoint, "http://")
			require.Equal(t, 3, report.Kills, "every kill struck a run")
			st := report.Stats
			t.Logf("%s: %d runs, %d killed; %d writes and %d reads reached versitygw, %d faults %v",
				name, report.Runs, report.Kills, st.Writes, st.Reads, st.Faults, st.FaultsByKind)
		})
		if !ok {
			t.FailNow()
		}
	}

	// Every write versitygw applied: one create per object, then each of
	// its changes once, in the order of the inputs.
	l := ledger.snapshot()
	t.Logf("versitygw: %d PUTs (%d refused with 412), %d GETs; applied %d creates, %d updates",
		l.puts, l.refused, l.gets, l.creates, l.updates)
	require.Equal(t, objects, l.creates)
	require.Equal(t, changes, l.updates)
	require.Len(t, l.applied, objects, "one object per identity")
	seen := map[string]bool{}
	for key, bodies := range l.applied {
		id := s3ObjectID(t, bodies[0])
		require.False(t, seen[id], "two objects for %s", id)
		seen[id] = true
		require.Equal(t, batches.history(s3ObjectIndex(t, id)), bodies, "the writes applied to %s (object %s)", id, key)
	}

	// The batches' servers are closed: the proxy again on their address,
	// without faults, for the runs that must write nothing.
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(ledger)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	run := func(db string, lines []string, name string) summaryJSON {
		t.Helper()
		cmd := command(srv.URL, db, writeFile(t, dir, name, lines...))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code, err := exitCode(cmd.Run())
		require.NoError(t, err)
		require.Equal(t, exitDone, code, stderr.String())
		return summaryOf(t, stdout.String())
	}

	changed := 0
	for i := range objects {
		if batches[0][i] != batches[2][i] {
			changed++
		}
	}
	require.Equal(t, 150, changed)
	s := run(store, batches[0], "v1-again.jsonl")
	require.Equal(t, summaryJSON{Total: objects, Stale: changed, Replayed: objects - changed, ElapsedMS: s.ElapsedMS}, s,
		"v1 again: every changed object's line stale, the others replayed, no request")
	require.Equal(t, l, ledger.snapshot(), "v1 again sent nothing to versitygw")

	st := deposit(t, nil, "status", "--db", store, "--json")
	require.Equal(t, exitDone, st.code, st.stderr)
	var status struct {
		Objects objectsJSON `json:"objects"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &status))
	require.Equal(t, objectsJSON{Objects: objects, Versions: objects + changes, Updates: changes, Stale: changed}, status.Objects)

	s = run(filepath.Join(dir, "lost.db"), batches[2], "v3-lost-store.jsonl")
	require.Equal(t, objects, s.Existing, "a lost store finds each object holding its v3 line: %+v", s)
	after := ledger.snapshot()
	t.Logf("v3 on a lost store: %d requests: %d PUTs (%d refused with 412), %d GETs",
		s.Requests, after.puts-l.puts, after.refused-l.refused, after.gets-l.gets)
	require.Equal(t, l.creates, after.creates, "no create applied on a lost store")
	require.Equal(t, l.updates, after.updates, "no update applied on a lost store")
	require.Equal(t, l.applied, after.applied)
	require.NoError(t, ledger.bucketHolds(batches[2]))
}

// s3ObjectBatches are the three inputs: line i of each is object i.
type s3ObjectBatches [3][]string

// newS3ObjectBatches makes v1; v2 changes the objects i with i%10 in
// {0,1,2}, v3 those with i%10 in {2,3,4}: 90 each, 30 twice. Every line is
// in its canonical form, so the bytes deposited are the line's.
func newS3ObjectBatches(n int) s3ObjectBatches {
	var b s3ObjectBatches
	line := func(i, rev int) string {
		return fmt.Sprintf(`{"id":"reef-%03d","rev":%d,"title":"Reef survey %d, revision %d"}`, i, rev, i, rev)
	}
	for i := range n {
		rev := 1
		b[0] = append(b[0], line(i, rev))
		if i%10 <= 2 {
			rev++
		}
		b[1] = append(b[1], line(i, rev))
		if d := i % 10; d >= 2 && d <= 4 {
			rev++
		}
		b[2] = append(b[2], line(i, rev))
	}
	return b
}

// history is the distinct contents of object i, in input order: what the
// server must have applied to it, once each.
func (b s3ObjectBatches) history(i int) []string {
	h := []string{b[0][i]}
	for _, batch := range b[1:] {
		if batch[i] != h[len(h)-1] {
			h = append(h, batch[i])
		}
	}
	return h
}

func s3ObjectID(t *testing.T, body string) string {
	t.Helper()
	var p struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	return p.ID
}

func s3ObjectIndex(t *testing.T, id string) int {
	t.Helper()
	var i int
	_, err := fmt.Sscanf(id, "reef-%d", &i)
	require.NoError(t, err, id)
	return i
}

// s3Ledger is a reverse proxy to versitygw that counts what versitygw
// answered: a PUT it answered 2xx is a write that took effect, whether or
// not its answer then reached the client (the faults in front may drop it,
// the harness may kill the client); a 412 is a write refused. The request
// versitygw sees is not cancelled when the client goes, so that every PUT
// forwarded is answered and counted.
type s3Ledger struct {
	t      *testing.T
	s3     peertest.S3
	proxy  *httputil.ReverseProxy
	client *http.Client // signs as the s3 target does, straight to versitygw

	mu sync.Mutex
	l  ledgerCounts
}

// ledgerCounts is what an s3Ledger counted.
type ledgerCounts struct {
	puts, gets       int
	creates, updates int // PUTs answered 2xx, with If-None-Match and with If-Match
	refused          int // PUTs answered 412
	// applied is, per object name, the bodies of the PUTs answered 2xx in
	// the order versitygw answered them.
	applied map[string][]string
}

func newS3Ledger(t *testing.T, versity peertest.S3) *s3Ledger {
	u, err := url.Parse(versity.Endpoint)
	require.NoError(t, err)
	// The Director of NewSingleHostReverseProxy keeps the request's Host,
	// which the client's signature covers.
	proxy := httputil.NewSingleHostReverseProxy(u)
	d, err := s3.Target{Endpoint: versity.Endpoint + "/" + versity.Bucket, AWS: s3.Credentials{
		AccessKeyID: versity.AccessKeyID, SecretAccessKey: versity.SecretAccessKey, Region: versity.Region}}.Driver()
	require.NoError(t, err)
	client := &http.Client{Transport: d.(driver.TransportWrapper).WrapTransport(http.DefaultTransport)}
	return &s3Ledger{t: t, s3: versity, proxy: proxy, client: client, l: ledgerCounts{applied: map[string][]string{}}}
}

// statusWriter notes the status an answer is given (a write without
// WriteHeader is a 200), for the chaos tests' counting proxies.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (l *s3Ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithoutCancel(r.Context()))
	var body []byte
	if r.Method == http.MethodPut {
		var err error
		if body, err = io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest) // not forwarded
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	sw := &statusWriter{ResponseWriter: w}
	l.proxy.ServeHTTP(sw, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		l.l.gets++
	case http.MethodPut:
		l.l.puts++
		switch {
		case sw.status == http.StatusPreconditionFailed:
			l.l.refused++
		case sw.status >= 200 && sw.status < 300:
			switch {
			case r.Header.Get("If-None-Match") == "*":
				l.l.creates++
			case r.Header.Get("If-Match") != "":
				l.l.updates++
			default:
				l.t.Errorf("an unconditional PUT of %s was applied", r.URL.Path)
			}
			name := strings.TrimPrefix(r.URL.Path, "/"+l.s3.Bucket+"/")
			l.l.applied[name] = append(l.l.applied[name], string(body))
		}
	}
}

func (l *s3Ledger) snapshot() ledgerCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.l
	c.applied = map[string][]string{}
	for k, v := range l.l.applied {
		c.applied[k] = append([]string(nil), v...)
	}
	return c
}

// bucketHolds lists the bucket straight from versitygw and checks that it
// holds one object per line, each with the line's bytes.
func (l *s3Ledger) bucketHolds(lines []string) error {
	want := map[string]string{}
	for _, line := range lines {
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			return err
		}
		want[p.ID] = line
	}
	names, err := l.list()
	if err != nil {
		return err
	}
	if len(names) != len(want) {
		return fmt.Errorf("the bucket holds %d objects, not %d", len(names), len(want))
	}
	seen := map[string]bool{}
	for _, name := range names {
		body, err := l.get(name)
		if err != nil {
			return err
		}
		var p struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return fmt.Errorf("object %s: %w: %q", name, err, body)
		}
		if seen[p.ID] {
			return fmt.Errorf("two objects for %s", p.ID)
		}
		seen[p.ID] = true
		if string(body) != want[p.ID] {
			return fmt.Errorf("object %s holds %s, not %s", name, body, want[p.ID])
		}
	}
	return nil
}

// list is every object name in the bucket (ListObjectsV2, page by page).
func (l *s3Ledger) list() ([]string, error) {
	var names []string
	token := ""
	for page := 0; page < 100; page++ {
		q := url.Values{"list-type": {"2"}}
		if token != "" {
			q.Set("continuation-token", token)
		}
		body, err := l.fetch(l.s3.Endpoint + "/" + l.s3.Bucket + "?" + q.Encode())
		if err != nil {
			return nil, err
		}
		var res struct {
			Contents []struct {
				Key string `xml:"Key"`
			} `xml:"Contents"`
			IsTruncated           bool   `xml:"IsTruncated"`
			NextContinuationToken string `xml:"NextContinuationToken"`
		}
		if err := xml.Unmarshal(body, &res); err != nil {
			return nil, fmt.Errorf("ListObjectsV2: %w", err)
		}
		for _, c := range res.Contents {
			names = append(names, c.Key)
		}
		if !res.IsTruncated {
			return names, nil
		}
		token = res.NextContinuationToken
	}
	return nil, fmt.Errorf("ListObjectsV2: more than 100 pages")
}

func (l *s3Ledger) get(name string) ([]byte, error) {
	return l.fetch(l.s3.Endpoint + "/" + l.s3.Bucket + "/" + name)
}

func (l *s3Ledger) fetch(u string) ([]byte, error) {
	resp, err := l.client.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return body, err
}
