package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/target/couchdb"
	"github.com/depositkit/deposit/target/put"
	"github.com/depositkit/deposit/target/s3"
	"github.com/depositkit/deposit/target/webdav"
)

// These tests run the storage profiles against the programs users run
// (internal/peertest starts them on 127.0.0.1). They skip, saying what to
// install, where a program is missing; CI installs them with .ci/peers and
// sets DEPOSIT_REQUIRE_PEERS=1, which makes a skip a failure.

// versityAWS is the signing configuration of a versitygw server.
func versityAWS(s peertest.S3) s3.Credentials {
	return s3.Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey, Region: s.Region}
}

// peerClient is a client of target with its own fresh store.
func peerClient(t testing.TB, target Target) *Client {
	t.Helper()
	c, err := New(Config{Target: target, Store: storageStore(t), Retry: quickRetry})
	require.NoError(t, err)
	return c
}

// signedClient is a plain keep-alive HTTP client whose requests are signed
// with creds, for reading S3 objects back.
func signedClient(creds s3.Credentials) *http.Client {
	hc := copyOrDefault(nil)
	d, err := s3.Target{Endpoint: "http://127.0.0.1:1/bucket", AWS: creds}.Driver()
	if err != nil {
		panic(err)
	}
	hc.Transport = d.(driver.TransportWrapper).WrapTransport(hc.Transport)
	return hc
}

// get fetches url with hc and returns the status and body.
func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	require.NoError(t, err)
	body, _ := readAnswer(resp, false)
	return resp.StatusCode, string(body)
}

func TestWebDAVOnApache(t *testing.T) {
	t.Parallel()
	base := peertest.Apache(t)
	req, err := http.NewRequest("MKCOL", base+"/records", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = readAnswer(resp, false)
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	t.Run("the first deposit creates, a second with a fresh store finds it existing", func(t *testing.T) {
		ctx := context.Background()
		first, err := peerClient(t, webdav.Target{Endpoint: base + "/records"}).Deposit(ctx, []byte(storagePayload))
		require.NoError(t, err)
		require.Equal(t, OutcomeCreated, first.Outcome)
		require.Equal(t, http.StatusCreated, first.Status)
		require.Equal(t, base+"/records/"+first.Key, first.Identifier)

		second, err := peerClient(t, webdav.Target{Endpoint: base + "/records"}).Deposit(ctx, []byte(`{"year":2024, "title":"Kelp Canopy Survey"}`))
		require.NoError(t, err)
		require.Equal(t, OutcomeExisting, second.Outcome)
		require.Equal(t, http.StatusPreconditionFailed, second.Status)
		require.Equal(t, first.Identifier, second.Identifier)
		require.Equal(t, 1, second.Requests, "no read-back: a storage target mints nothing")

		status, body := get(t, http.DefaultClient, first.Identifier)
		require.Equal(t, http.StatusOK, status)
		require.JSONEq(t, storagePayload, body)
	})

	t.Run("a missing collection stops the run and says so", func(t *testing.T) {
		c := peerClient(t, webdav.Target{Endpoint: base + "/missing"})
		sum, err := c.Run(context.Background(), payloadItems(3, "missing"), BatchOptions{Concurrency: 1})
		require.ErrorIs(t, err, ErrStopRun)
		require.ErrorContains(t, err, "409 Conflict: the collection "+base+"/missing/ does not exist")
		require.Equal(t, 0, sum.Created+sum.Failed, "nothing created, nothing recorded as failed")
	})
}

// payloadItems yields n distinct payloads of a run named run.
func payloadItems(n int, run string) iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for i := range n {
			p := fmt.Sprintf(`{"run":%q,"n":%d,"title":"Sample %d"}`, run, i, i)
			if !yield(Item{Line: int64(i + 1), Payload: []byte(p)}) {
				return
			}
		}
	}
}

func TestS3OnVersity(t *testing.T) {
	t.Parallel()
	s := peertest.Versity(t)
	bucket := s.Endpoint + "/" + s.Bucket

	t.Run("sixteen writers of one key: exactly one creates, the others find it existing", func(t *testing.T) {
		const writers = 16
		clients := make([]*Client, writers)
		for i := range clients {
			clients[i] = peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)})
		}
		results := make([]Result, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range clients {
			wg.Go(func() {
				<-start
				results[i], errs[i] = c.Deposit(context.Background(), []byte(`{"title":"Contended","writers":16}`))
			})
		}
		close(start)
		wg.Wait()
		outcomes := map[Outcome]int{}
		for i := range writers {
			require.NoError(t, errs[i])
			outcomes[results[i].Outcome]++
			require.Equal(t, results[0].Identifier, results[i].Identifier)
		}
		require.Equal(t, map[Outcome]int{OutcomeCreated: 1, OutcomeExisting: writers - 1}, outcomes)
	})

	t.Run("a batch of 1000 objects, then its replay with zero requests", func(t *testing.T) {
		c := peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)})
		const n = 1000
		sum, err := c.Run(context.Background(), payloadItems(n, "batch"), BatchOptions{Concurrency: 16})
		require.NoError(t, err)
		require.Equal(t, n, sum.Created)
		require.Equal(t, n, sum.Requests)

		replay, err := c.Run(context.Background(), payloadItems(n, "batch"), BatchOptions{Concurrency: 16})
		require.NoError(t, err)
		require.Equal(t, n, replay.Replayed)
		require.Equal(t, 0, replay.Requests)

		// A fresh store finds every object existing: the server itself
		// refused the second create.
		again, err := peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)}).Run(context.Background(), payloadItems(20, "batch"), BatchOptions{Concurrency: 4})
		require.NoError(t, err)
		require.Equal(t, 20, again.Existing)
	})

	t.Run("the object holds the canonical bytes", func(t *testing.T) {
		c := peerClient(t, s3.Target{Endpoint: bucket, AWS: versityAWS(s)})
		res, err := c.Deposit(context.Background(), []byte(`{ "b": 2, "a": 1 }`))
		require.NoError(t, err)
		status, body := get(t, signedClient(versityAWS(s)), res.Identifier)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, `{"a":1,"b":2}`, body)
	})

	t.Run("a wrong secret stops the run with the server's reason", func(t *testing.T) {
		aws := versityAWS(s)
		aws.SecretAccessKey += "x"
		_, err := peerClient(t, s3.Target{Endpoint: bucket, AWS: aws}).Deposit(context.Background(), []byte(storagePayload))
		require.ErrorIs(t, err, ErrStopRun)
		require.ErrorContains(t, err, "403 Forbidden: SignatureDoesNotMatch")
	})

	t.Run("a missing bucket stops the run", func(t *testing.T) {
		_, err := peerClient(t, s3.Target{Endpoint: s.Endpoint + "/no-such-bucket", AWS: versityAWS(s)}).Deposit(context.Background(), []byte(storagePayload))
		require.ErrorIs(t, err, ErrStopRun)
		require.ErrorContains(t, err, "NoSuchBucket")
	})
}

func TestCouchDBOnPouchDB(t *testing.T) {
	t.Parallel()
	db := peertest.PouchDB(t)
	ctx := context.Background()

	first, err := peerClient(t, couchdb.Target{Endpoint: db}).Deposit(ctx, []byte(storagePayload))
	require.NoError(t, err)
	require.Equal(t, OutcomeCreated, first.Outcome)
	require.Equal(t, http.StatusCreated, first.Status)
	require.Equal(t, db+"/"+first.Key, first.Identifier)

	second, err := peerClient(t, couchdb.Target{Endpoint: db}).Deposit(ctx, []byte(storagePayload))
	require.NoError(t, err)
	require.Equal(t, OutcomeExisting, second.Outcome)
	require.Equal(t, http.StatusConflict, second.Status)
	require.Equal(t, first.Identifier, second.Identifier)
	require.Equal(t, 1, second.Requests)

	status, body := get(t, http.DefaultClient, first.Identifier)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"_id":"`+first.Key+`"`)
	require.Contains(t, body, `"title":"Kelp Canopy Survey"`)
}

func TestProbeOnRealServers(t *testing.T) {
	t.Parallel()
	type target struct {
		cfg      Config
		endpoint string       // the endpoint the probe URL is under
		reader   *http.Client // reads the probe URL after the probe; nil: plain
	}
	tests := []struct {
		name    string
		start   func(t *testing.T) target
		verdict ProbeVerdict
		first   int
		second  int
	}{
		{"apache mod_dav honours If-None-Match", func(t *testing.T) target {
			ep := peertest.Apache(t)
			return target{cfg: Config{Target: webdav.Target{Endpoint: ep}}, endpoint: ep}
		}, ProbeHonoured, 201, 412},
		{"nginx dav ignores If-None-Match: created twice", func(t *testing.T) target {
			ep := peertest.Nginx(t)
			return target{cfg: Config{Target: put.Target{Endpoint: ep}}, endpoint: ep}
		}, ProbeIgnored, 201, 204},
		{"versitygw honours If-None-Match", func(t *testing.T) target {
			s := peertest.Versity(t)
			ep := s.Endpoint + "/" + s.Bucket
			return target{cfg: Config{Target: s3.Target{Endpoint: ep, AWS: versityAWS(s)}}, endpoint: ep, reader: signedClient(versityAWS(s))}
		}, ProbeHonoured, 200, 412},
		{"pouchdb-server refuses a second create with 409", func(t *testing.T) target {
			ep := peertest.PouchDB(t)
			return target{cfg: Config{Target: couchdb.Target{Endpoint: ep}}, endpoint: ep}
		}, ProbeHonoured, 201, 409},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg := tt.start(t)
			p, err := NewProbe(tg.cfg)
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(p.URL, strings.TrimRight(tg.endpoint, "/")+"/deposit-probe-"), p.URL)
			rep, err := p.Run(context.Background())
			require.NoError(t, err)
			require.Equal(t, tt.verdict, rep.Verdict)
			require.Equal(t, tt.first, rep.First)
			require.Equal(t, tt.second, rep.Second)
			require.True(t, rep.Deleted, "deleted: %s", rep.DeleteProblem)
			reader := tg.reader
			if reader == nil {
				reader = http.DefaultClient
			}
			status, _ := get(t, reader, p.URL)
			require.Equal(t, http.StatusNotFound, status, "the probe record is gone")
		})
	}

	t.Run("a missing WebDAV collection is reported as such", func(t *testing.T) {
		t.Parallel()
		base := peertest.Apache(t)
		p, err := NewProbe(Config{Target: webdav.Target{Endpoint: base + "/missing"}})
		require.NoError(t, err)
		rep, err := p.Run(context.Background())
		require.ErrorIs(t, err, ErrStopRun)
		require.ErrorContains(t, err, "the collection "+base+"/missing/ does not exist")
		require.Equal(t, http.StatusConflict, rep.First)
		require.Equal(t, 0, rep.Second)
	})
}

// BenchmarkS3Deposit measures signed deposits against versitygw, so the cost
// of SigV4 shows beside the server's own: one new object per deposit.
func BenchmarkS3Deposit(b *testing.B) {
	s := peertest.Versity(b)
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			c := peerClient(b, s3.Target{Endpoint: s.Endpoint + "/" + s.Bucket, AWS: versityAWS(s)})
			run := fmt.Sprintf("s3-bench-%d", benchRun.Add(1)) // new objects in every run, -count included
			b.ResetTimer()
			sum, err := c.Run(context.Background(), payloadItems(b.N, run), BatchOptions{Concurrency: conc})
			b.StopTimer()
			if err != nil || sum.Created != b.N {
				b.Fatalf("created %d of %d: %v", sum.Created, b.N, err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "deposits/s")
		})
	}
}
