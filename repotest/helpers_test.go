package repotest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answer is a response read to the end.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// send performs one request and reads the whole answer; err is a transport error.
func send(c *http.Client, method, url, body string, hdr ...string) (answer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return answer{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// mustSend is send for requests that must get an answer.
func mustSend(t testing.TB, c *http.Client, method, url, body string, hdr ...string) answer {
	t.Helper()
	a, err := send(c, method, url, body, hdr...)
	require.NoError(t, err)
	return a
}

func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := NewServer(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// field returns a string member of a JSON object body.
func field(t testing.TB, body []byte, name string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "body %q", body)
	s, _ := m[name].(string)
	return s
}

// fieldOf is field for goroutines other than the test's: a body that is
// not a JSON object is reported with t.Errorf, and the member read as "".
func fieldOf(t testing.TB, body []byte, name string) string {
	t.Helper()
	var m map[string]any
	assert.NoError(t, json.Unmarshal(body, &m), "body %q", body)
	s, _ := m[name].(string)
	return s
}

// problemDetail checks that a is a problem+json answer with the given status.
func requireProblem(t testing.TB, status int, a answer) {
	t.Helper()
	require.Equal(t, status, a.status, "body %s", a.body)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
	var p struct {
		Status int    `json:"status"`
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(a.body, &p))
	require.Equal(t, status, p.Status)
	require.NotEmpty(t, p.Detail)
}

// clock is a settable clock for TTL tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
