package client

import (
	"net/http"
	"time"

	"github.com/depositkit/deposit/backoff"
)

// defaultAttemptTimeout bounds one HTTP attempt when the caller gives no
// http.Client of its own.
const defaultAttemptTimeout = 30 * time.Second

// newHTTPClient returns the client requests go through: the caller's (its
// Transport wrapped, not modified) or a keep-alive one, with the rate limit
// applied to every request, retries and read-backs included.
func newHTTPClient(base *http.Client, rate float64) *http.Client {
	var hc http.Client
	if base != nil {
		hc = *base
	} else {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		hc.Transport = t
		hc.Timeout = defaultAttemptTimeout
	}
	if rate > 0 {
		rt := hc.Transport
		if rt == nil {
			rt = http.DefaultTransport
		}
		hc.Transport = &limitedTransport{next: rt, limiter: backoff.NewLimiter(rate)}
	}
	return &hc
}

// limitedTransport waits for the rate limiter before each request.
type limitedTransport struct {
	next    http.RoundTripper
	limiter *backoff.Limiter
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(req.Context()); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return t.next.RoundTrip(req)
}
