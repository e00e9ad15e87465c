package s3

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// testCreds are AWS's documented example credentials.
var testCreds = Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", Region: "eu-west-2"}

func TestAWSEscapePath(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"hex keys are unchanged", "0123abcdef", "0123abcdef"},
		{"slashes separate segments", "key/dir/file.txt", "key/dir/file.txt"},
		{"reserved characters are escaped", "a+b=c&d;e,f:g@h$i", "a%2Bb%3Dc%26d%3Be%2Cf%3Ag%40h%24i"},
		{"spaces and UTF-8 are escaped with upper-case hex", "dir with space/é", "dir%20with%20space/%C3%A9"},
		{"unreserved punctuation is kept", "a-b.c_d~e", "a-b.c_d~e"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, awsEscapePath(tt.in))
		})
	}
}

// BenchmarkSigV4 is the signing alone: what each S3 attempt adds.
func BenchmarkSigV4(b *testing.B) {
	rt := newSigningTransport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}), testCreds)
	req, err := http.NewRequest(http.MethodPut, "http://127.0.0.1:9000/bucket/0123456789abcdef", nil)
	require.NoError(b, err)
	req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
	req.Header.Set("If-None-Match", "*")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.RoundTrip(req); err != nil {
			b.Fatal(err)
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
