package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/driver"
	"github.com/depositkit/deposit/drivertest"
	"github.com/depositkit/deposit/internal/peertest"
	"github.com/depositkit/deposit/target/s3"
)

// partsFileSize is the size of the large file of the multipart chaos
// test: 160 MiB (32 parts of 5 MiB) keeps it under a minute on two shared
// cores; DEPOSIT_PARTS_FILE_MIB runs it at another size (1024 by hand).
func partsFileSize(t *testing.T) int64 {
	mib := int64(160)
	if s := os.Getenv("DEPOSIT_PARTS_FILE_MIB"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		mib = n
	}
	return mib << 20
}

// writeLargeFile writes size bytes that depend on their offset to path,
// and returns their SHA-256 in hex.
func writeLargeFile(t *testing.T, path string, size int64) string {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	w := io.MultiWriter(f, h)
	block := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(block)) {
		for i := 0; i < len(block); i += 8 {
			v := uint64(off+int64(i)) * 0x9e3779b97f4a7c15
			for j := range 8 {
				block[i+j] = byte(v >> (8 * j))
			}
		}
		_, err := w.Write(block[:min(int64(len(block)), size-off)])
		require.NoError(t, err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// partsCounter forwards to versitygw and counts the UploadPart requests
// versitygw answered 200: the parts it stored, those whose answer a kill
// or a drop withheld included.
type partsCounter struct {
	proxy *httputil.ReverseProxy
	parts atomic.Int64
}

func (c *partsCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w}
	c.proxy.ServeHTTP(sw, r.WithContext(context.WithoutCancel(r.Context())))
	if r.URL.Query().Has("partNumber") && sw.status == http.StatusOK {
		c.parts.Add(1)
	}
}

// A large dataset file on a real S3 server (versitygw) in 5 MiB parts,
// its runs SIGKILLed at three random writes (a part stored, its answer
// never sent, or the upload's begin or completion), then run until exit
// 0 (issue 44); then the same with 503s and dropped answers on the writes
// too. The object holds the file's bytes, once; versitygw stored no more
// parts than the file has plus one for each kill and each dropped answer
// (what was in flight then: parts go one at a time); and no multipart
// upload is left open.
func TestKilledS3DatasetRunsStoreALargeFileOnce(t *testing.T) {
	versity := peertest.Versity(t)
	size := partsFileSize(t)
	data := t.TempDir()
	sum := writeLargeFile(t, filepath.Join(data, "big.bin"), size)
	require.NoError(t, os.WriteFile(filepath.Join(data, "README"), []byte("a large file in parts\n"), 0o644))
	parts := (size + s3.MinPartSize - 1) / s3.MinPartSize

	u, err := url.Parse(versity.Endpoint)
	require.NoError(t, err)
	d, err := s3.Target{Endpoint: versity.Endpoint + "/" + versity.Bucket, AWS: s3.Credentials{
		AccessKeyID: versity.AccessKeyID, SecretAccessKey: versity.SecretAccessKey, Region: versity.Region}}.Driver()
	require.NoError(t, err)
	signed := &http.Client{Transport: d.(driver.TransportWrapper).WrapTransport(http.DefaultTransport)}
	bucket := versity.Endpoint + "/" + versity.Bucket
	env := append([]string{"PATH=" + os.Getenv("PATH")}, versity.Env()...)

	for i, faults := range []string{"", "drop=0.05,503=0.05:retry-after=0"} {
		name := map[bool]string{true: "kills", false: "kills, drops and 503s"}[faults == ""]
		ok := t.Run(name, func(t *testing.T) {
			counter := &partsCounter{proxy: httputil.NewSingleHostReverseProxy(u)}
			line := fmt.Sprintf(`{"metadata":{"title":"large","run":%d},"files":["big.bin","README"]}`, i)
			var key string
			report := drivertest.Harness{
				Handler:  counter,
				Faults:   drivertest.Faults{Spec: faults, Seed: int64(44 + i)},
				Payloads: [][]byte{[]byte(line)},
				Command: func(c drivertest.Child) *exec.Cmd {
					cmd := exec.Command(binary, "run", "--protocol", "s3", "--endpoint", c.Endpoint+"/"+versity.Bucket,
						"--datasets", data, "--part-size", "5MiB", "--max-attempts", "8", "--db", c.Store, "--json", c.Input)
					cmd.Env = env
					return cmd
				},
				KillAt: drivertest.RandomKills(uint64(44+i), 3, parts),
				Check: func([][]byte) error {
					var err error
					key, err = datasetKeyOf(signed, bucket)
					return err
				},
			}.Run(t)
			require.Equal(t, 3, report.Kills, "every kill struck a run")
			drops := report.Stats.FaultsByKind["drop"]
			t.Logf("%d runs, %d killed; versitygw stored %d parts of %d; faults %v", report.Runs, report.Kills, counter.parts.Load(), parts, report.Stats.FaultsByKind)

			resp, err := signed.Get(bucket + "/" + key + "/big.bin")
			require.NoError(t, err)
			h := sha256.New()
			_, err = io.Copy(h, resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, sum, hex.EncodeToString(h.Sum(nil)), "the object holds the file's bytes")
			require.LessOrEqual(t, counter.parts.Load(), parts+int64(report.Kills)+drops,
				"parts stored: at most the file's, and one for each kill and dropped answer")
			require.Empty(t, openS3Uploads(t, signed, bucket), "no upload left open")
		})
		if !ok {
			t.FailNow()
		}
	}
}

// datasetKeyOf finds the key of the one dataset document in the bucket
// whose files are not yet checked: the newest {key}.json.
func datasetKeyOf(hc *http.Client, bucket string) (string, error) {
	resp, err := hc.Get(bucket + "?list-type=2")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		Contents []struct {
			Key          string `xml:"Key"`
			LastModified string `xml:"LastModified"`
		} `xml:"Contents"`
	}
	if err := xml.Unmarshal(body, &r); err != nil {
		return "", fmt.Errorf("listing: %w: %s", err, body)
	}
	key, newest := "", ""
	for _, c := range r.Contents {
		if k, ok := strings.CutSuffix(c.Key, ".json"); ok && c.LastModified >= newest {
			key, newest = k, c.LastModified
		}
	}
	if key == "" {
		return "", fmt.Errorf("no dataset document in the bucket: %s", body)
	}
	return key, nil
}

// openS3Uploads lists the keys of the multipart uploads open in bucket.
func openS3Uploads(t *testing.T, hc *http.Client, bucket string) []string {
	t.Helper()
	resp, err := hc.Get(bucket + "?uploads")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var r struct {
		Uploads []struct {
			Key string `xml:"Key"`
		} `xml:"Upload"`
	}
	require.NoError(t, xml.Unmarshal(body, &r))
	var keys []string
	for _, up := range r.Uploads {
		keys = append(keys, up.Key)
	}
	return keys
}
