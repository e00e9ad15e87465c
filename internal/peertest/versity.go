package peertest

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// S3 is a running S3-compatible server, one bucket on it, and the
// credentials that sign requests to it with AWS Signature Version 4. A
// request that is not signed with them is refused (403 AccessDenied). S3
// is a plain value, safe to copy and to share between goroutines.
type S3 struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:PORT" with no
	// trailing slash. Objects are addressed path-style:
	// {Endpoint}/{Bucket}/{key}.
	Endpoint string
	// Bucket is an empty bucket owned by AccessKeyID.
	Bucket string
	// Region is the region that signatures name: "us-east-1".
	Region string
	// AccessKeyID and SecretAccessKey are the server's root credentials,
	// random for each server.
	AccessKeyID     string
	SecretAccessKey string
}

// Env returns the credentials and region as the AWS_* environment
// variables that SDKs and command-line tools read, in KEY=value form for
// os/exec.Cmd.Env.
func (s S3) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + s.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY=" + s.SecretAccessKey,
		"AWS_REGION=" + s.Region,
	}
}

// versityBucket is the bucket that Versity creates for a test.
const versityBucket = "deposit"

// Versity starts versitygw (Go module github.com/versity/versitygw) with
// its posix backend for tb, creates an empty bucket and returns the server
// and its credentials.
//
// A PutObject with If-None-Match: * answers 200 when it creates the object
// and 412 PreconditionFailed when the key exists. Objects are files under
// a temporary directory, one directory per bucket; a key's "/" separators
// become directories.
func Versity(tb testing.TB) S3 {
	tb.Helper()
	s := S3{Bucket: versityBucket, Region: "us-east-1", AccessKeyID: rand.Text(), SecretAccessKey: rand.Text() + rand.Text()}
	l, err := versityLaunch(peerDir(tb, "versitygw"), s)
	check(tb, err)
	s.Endpoint = serve(tb, l)
	_, err = versityAdmin(l.bin, s, "create-bucket", "--owner", s.AccessKeyID, "--bucket", s.Bucket)
	check(tb, err)
	return s
}

// versityLaunch finds versitygw and describes its start in dir with the
// credentials and region of s.
func versityLaunch(dir string, s S3) (launch, error) {
	bin, err := lookPath("Go module github.com/versity/versitygw", "versitygw")
	if err != nil {
		return launch{}, err
	}
	root := filepath.Join(dir, "posix")
	if err := os.Mkdir(root, 0o755); err != nil {
		return launch{}, err
	}
	args := func(port int) ([]string, error) {
		return []string{
			"--port", fmt.Sprintf("127.0.0.1:%d", port),
			"--access", s.AccessKeyID,
			"--secret", s.SecretAccessKey,
			"--region", s.Region,
			"--quiet",
			"posix", root,
		}, nil
	}
	return launch{name: "versitygw", bin: bin, dir: dir, args: args}, nil
}

// versityAdmin runs a versitygw admin command against s, signed with its
// credentials, and returns its output.
func versityAdmin(bin string, s S3, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, append([]string{
		"admin",
		"--access", s.AccessKeyID,
		"--secret", s.SecretAccessKey,
		"--region", s.Region,
		"--endpoint-url", s.Endpoint,
	}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("versitygw admin %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
