package s3

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/smithy-go/aws-http-auth/credentials"
	"github.com/aws/smithy-go/aws-http-auth/sigv4"
	v4 "github.com/aws/smithy-go/aws-http-auth/v4"
)

// Credentials are the credentials and region requests to an S3-compatible
// store are signed with (AWS Signature V4). The fields mirror the usual
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION
// environment variables, which the client itself never reads.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken is set for temporary credentials only.
	SessionToken string
	// Region is the bucket's signing region; default us-east-1, which
	// S3-compatible servers (MinIO, versitygw, Ceph) accept unless configured
	// otherwise.
	Region string
}

// defaultRegion is the signing region when Credentials.Region is empty.
const defaultRegion = "us-east-1"

// emptySHA256 is the hex SHA-256 of no bytes, the payload hash of a request
// without a body.
var emptySHA256 = func() string { s := sha256.Sum256(nil); return hex.EncodeToString(s[:]) }()

// newSigningTransport returns a transport that signs every request with
// creds before next sends it. The payload hash is taken from the request's
// X-Amz-Content-Sha256 header, which the s3 target sets once per step, so a
// retry never hashes the body again.
func newSigningTransport(next http.RoundTripper, creds Credentials) *signingTransport {
	region := creds.Region
	if region == "" {
		region = defaultRegion
	}
	return &signingTransport{
		next: next,
		signer: sigv4.New(func(o *v4.SignerOptions) {
			// S3 canonicalises the path as sent, escaped once, and
			// wants the payload hash in X-Amz-Content-Sha256.
			o.DisableDoublePathEscape = true
			o.AddPayloadHashHeader = true
		}),
		creds: credentials.Credentials{
			AccessKeyID:     creds.AccessKeyID,
			SecretAccessKey: creds.SecretAccessKey,
			SessionToken:    creds.SessionToken,
		},
		region: region,
	}
}

// signingTransport signs each attempt just before it is sent, so every retry
// carries a fresh X-Amz-Date.
type signingTransport struct {
	next   http.RoundTripper
	signer *sigv4.Signer
	creds  credentials.Credentials
	region string
}

func (t *signingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// A RoundTripper must not modify the caller's request: sign a clone
	// (same body, copied headers).
	r := req.Clone(req.Context())
	hash, err := payloadHash(r)
	if err == nil {
		err = t.signer.SignRequest(&sigv4.SignRequestInput{
			Request:     r,
			PayloadHash: hash,
			Service:     "s3",
			Region:      t.region,
			Credentials: t.creds,
		})
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("sign request: %w", err)
	}
	return t.next.RoundTrip(r)
}

// payloadHash returns the SHA-256 of r's body as X-Amz-Content-Sha256 names
// it, or of no bytes for a request without a body. A request with a body
// but no such header is refused: reading the body here would defeat
// streaming.
func payloadHash(r *http.Request) ([]byte, error) {
	h := r.Header.Get("X-Amz-Content-Sha256")
	if h == "" {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			return nil, errors.New("request with a body but no X-Amz-Content-Sha256")
		}
		h = emptySHA256
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("X-Amz-Content-Sha256 %q is not a hex SHA-256", h)
	}
	return b, nil
}

// awsEscapePath escapes an object key for the URL path the way AWS
// canonicalises it: every byte except A-Z a-z 0-9 - . _ ~ and / as %XX with
// upper-case hex. Go's own path escaping leaves + $ & , ; = : @ as they are,
// which S3 servers then sign differently (403 SignatureDoesNotMatch).
func awsEscapePath(key string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}
