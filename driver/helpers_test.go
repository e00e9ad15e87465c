package driver

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Two spellings of one repository give one endpoint, so one store target;
// the query stays, and no error shows a credential.
func TestEndpointNormalisesWhatNamesTheSameResource(t *testing.T) {
	for raw, want := range map[string]string{
		"HTTP://Repo.Example:80/recs/":       "http://repo.example/recs",
		"https://repo.example:443/a%7eb%2fc": "https://repo.example/a~b%2Fc",
		"https://user:pw@repo.example/x#top": "https://repo.example/x",
		" http://[::1]:8080/x?tok=%7e1 ":     "http://[::1]:8080/x?tok=~1",
	} {
		got, err := Endpoint("t.Endpoint", raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
	_, err := Endpoint("put.Target.Endpoint", "  ")
	require.EqualError(t, err, "put.Target.Endpoint is required")
	for _, raw := range []string{"ftp://repo.example/x?token=s3cret", "http:///x?token=s3cret", "http://%zz?token=s3cret"} {
		_, err := Endpoint("t.Endpoint", raw)
		require.Error(t, err, raw)
		require.NotContains(t, err.Error(), "s3cret", raw)
	}
}

func TestRedactURLDropsCredentialsQueryAndFragment(t *testing.T) {
	require.Equal(t, "https://repo.example/recs/1", RedactURL("https://u:pw@repo.example/recs/1?access_token=t#f"))
	require.Equal(t, "(unparsable url)", RedactURL("http://%zz"))
}

// The identifier rule: a pointer's string, else Location resolved against
// the request URL without its credentials, else the record URL.
func TestIdentifierFollowsTheRule(t *testing.T) {
	ptrs := []string{"/id", "/identifier"}
	require.Equal(t, "10.5072/x", Identifier([]byte(`{"identifier":"10.5072/x"}`), nil, ptrs, "http://r/recs", "http://r/recs/k"))
	h := http.Header{"Location": {"/recs/7"}}
	require.Equal(t, "http://r/recs/7", Identifier([]byte(`{}`), h, ptrs, "http://r/recs?access_token=t", "http://r/recs/k"))
	require.Equal(t, "http://r/recs/k", Identifier(nil, nil, ptrs, "http://r/recs", "http://r/recs/k"))
}

func TestMissedPointerWarnsOnlyOfTheUsersOwnPointer(t *testing.T) {
	require.Contains(t, MissedPointer("/doi", []byte(`{"id":"1"}`)), `"/doi" names no string`)
	require.Empty(t, MissedPointer("", []byte(`{"id":"1"}`)), "no pointer chosen")
	require.Empty(t, MissedPointer("/id", []byte(`{"id":"1"}`)), "the pointer names a string")
	require.Empty(t, MissedPointer("/doi", []byte(`created`)), "not JSON")
}

func TestProblemSummarisesAnErrorBodyInOneLine(t *testing.T) {
	jsonType := http.Header{"Content-Type": {"application/problem+json"}}
	require.Equal(t, "Bad Request: the title is missing",
		Problem(jsonType, []byte(`{"title":"Bad Request","detail":"the title is missing"}`)))
	require.Equal(t, "/data/attributes/doi: This DOI has already been taken; titles: can't be blank",
		Problem(jsonType, []byte(`{"errors":[{"source":{"pointer":"/data/attributes/doi"},"title":"This DOI has already been taken"},{"source":"titles","title":"can't be blank"}]}`)))
	require.Equal(t, "first line", Problem(nil, []byte("  first   line\nsecond")))
	require.Empty(t, Problem(nil, nil))
	long := Problem(nil, []byte(strings.Repeat("é", 200)))
	require.True(t, strings.HasSuffix(long, "..."), long)
	require.LessOrEqual(t, len(long), 303)
}

func TestPointersAreTheUsersElseTheDefaults(t *testing.T) {
	got, err := Pointers("", "/id", "/identifier")
	require.NoError(t, err)
	require.Equal(t, []string{"/id", "/identifier"}, got)
	got, err = Pointers("/data/doi", "/id")
	require.NoError(t, err)
	require.Equal(t, []string{"/data/doi"}, got)
	_, err = Pointers("doi", "/id")
	require.ErrorContains(t, err, `IDPointer "doi"`)
}

// The Idempotency-Key is the same bytes for the same inputs, and another
// for another target, key or secret; a secret is never shown.
func TestIdempotencyKeyIsStableAndSecretShaped(t *testing.T) {
	k := IdempotencyKey("http://r/jobs", "abc", nil)
	require.Equal(t, k, IdempotencyKey("http://r/jobs", "abc", nil))
	require.Regexp(t, `^"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$`, k)
	require.NotEqual(t, k, IdempotencyKey("http://r/jobs", "abd", nil))
	require.NotEqual(t, k, IdempotencyKey("http://r/other", "abc", nil))
	require.NotEqual(t, k, IdempotencyKey("http://r/jobs", "abc", []byte("s3cret")))
	fp := SecretFingerprint([]byte("s3cret"))
	require.Len(t, fp, 16)
	require.Equal(t, fp, SecretFingerprint([]byte("s3cret")))
	require.NotEqual(t, fp, SecretFingerprint([]byte("other")))
	require.NotContains(t, fp, "s3cret")
	require.Empty(t, SecretFingerprint(nil))
}

func TestDatasetFilesReadsTheFileList(t *testing.T) {
	files, err := DatasetFiles([]byte(`{"dataset":[{"path":"a/b.csv","sha256":"00ff","size":3}],"metadata":{}}`))
	require.NoError(t, err)
	require.Equal(t, []DatasetFile{{Path: "a/b.csv", SHA256: "00ff", Size: 3}}, files)
	for _, doc := range []string{`{"dataset":[]}`, `{"title":"x"}`, `[1]`} {
		_, err := DatasetFiles([]byte(doc))
		require.Error(t, err, doc)
	}
	path := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(path, []byte("abc"), 0o600))
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	require.Equal(t, 3, SizedFile{File: fh, Size: 3}.Len())
}

func TestJSONKindNamesTheValue(t *testing.T) {
	for body, want := range map[string]string{
		`{}`: "an object", `[]`: "an array", `"s"`: "a string", `1`: "a number",
		`true`: "true", `false`: "false", `null`: "null", ``: "nothing",
	} {
		require.Equal(t, want, JSONKind([]byte(body)), body)
	}
}

func TestGuardedReservesTheConditionalHeaders(t *testing.T) {
	for _, name := range []string{"if-none-match", "If-Match", "IDEMPOTENCY-KEY"} {
		require.True(t, Guarded(name), name)
	}
	require.False(t, Guarded("Authorization"))
}

// Many APIs answer a numeric id: it is read as the integer's decimal
// text, by the payload parser and by encoding/json alike (a body with a
// member named twice goes the second way), and a fraction is no id.
func TestStringAtReadsAnIntegerID(t *testing.T) {
	for body, want := range map[string]string{
		`{"id":42}`:                   "42",
		`{"id":-0}`:                   "0",
		`{"id":12345678901234567890}`: "12345678901234567890", // beyond a double: the digits as sent
		`{"id":1e3}`:                  "1000",
		`{"id":2.0}`:                  "2",
		`{"id":7,"id":8}`:             "8",
		`{"id":12345678901234567890,"id":12345678901234567891}`: "12345678901234567891",
		`{"id":1.5,"identifier":"x"}`:                           "x",
		`{"id":1e999999999}`:                                    "",
		`{"id":true}`:                                           "",
	} {
		got, ok := StringAt([]byte(body), []string{"/id", "/identifier"})
		require.Equal(t, want, got, body)
		require.Equal(t, want != "", ok, body)
	}
	require.Equal(t, "17", Identifier([]byte(`{"article":{"id":17}}`), nil, []string{"/article/id"}, "http://r/a", "http://r/a/k"))
	require.Empty(t, MissedPointer("/id", []byte(`{"id":17}`)), "an integer id is an id")
}

func TestProblemReadsAMessageAndItsCode(t *testing.T) {
	h := http.Header{"Content-Type": {"application/json"}}
	require.Equal(t, "already published (E_PUBLISHED)", Problem(h, []byte(`{"message":"already published","code":"E_PUBLISHED"}`)))
	require.Equal(t, "quota exceeded (4031)", Problem(h, []byte(`{"code":4031,"message":"quota exceeded"}`)))
	require.Equal(t, "no code", Problem(h, []byte(`{"message":"no code"}`)))
	require.Equal(t, `{"code":"E_ONLY"}`, Problem(h, []byte(`{"code":"E_ONLY"}`)), "a code without a message: the body's line")
}

func TestClassAndFindingKindHaveNames(t *testing.T) {
	names := map[Class]string{Created: "created", Exists: "exists", Conflict: "conflict", Retry: "retry", Ambiguous: "ambiguous",
		Terminal: "terminal", Stop: "stop", Canceled: "canceled", Accepted: "accepted", Class(42): "Class(42)", Class(-1): "Class(-1)"}
	for c, want := range names {
		require.Equal(t, want, c.String())
	}
	require.Equal(t, "class ambiguous", fmt.Sprintf("class %v", Ambiguous))
	for k, want := range map[FindingKind]string{Present: "present", Absent: "absent", Foreign: "foreign", Unknown: "unknown", Pending: "pending", FindingKind(9): "FindingKind(9)"} {
		require.Equal(t, want, k.String())
	}
}

// FallbackID is FallbackFrom's, given the earlier steps' identifiers, else
// the fixed Fallback.
func TestFallbackIDIsComputedFromTheEarlierSteps(t *testing.T) {
	s := Step{Fallback: "fixed"}
	require.Equal(t, "fixed", s.FallbackID([]string{"7"}))
	s.FallbackFrom = func(prior []string) string { return "http://r/articles/" + prior[0] }
	require.Equal(t, "http://r/articles/7", s.FallbackID([]string{"7"}))
}

// A step's store target is the deposit's with "-step" after the protocol,
// and StepOf finds the deposit target back, but only one the store holds.
func TestStepTargetNamesAStepOfTheDepositsTarget(t *testing.T) {
	name := TargetName("articles", "https://r.example/api?token=s3cret")
	publish := StepTarget(name, "publish")
	require.Equal(t, "articles-publish "+name[len("articles "):], publish)
	require.Equal(t, TargetName("invenio-file", "https://r.example"), StepTarget(TargetName("invenio", "https://r.example"), "file"))
	has := func(targets ...string) func(string) bool {
		return func(s string) bool {
			for _, t := range targets {
				if s == t {
					return true
				}
			}
			return false
		}
	}
	d, step, ok := StepOf(publish, has(name))
	require.True(t, ok)
	require.Equal(t, name, d)
	require.Equal(t, "publish", step)
	_, _, ok = StepOf(publish, has())
	require.False(t, ok, "no deposit target in the store: the rows are deposits")
	_, _, ok = StepOf(name, has(name))
	require.False(t, ok)
	// "idempotency-key e" is a deposit unless "idempotency e" is a target.
	_, _, ok = StepOf("idempotency-key e", has("idempotency-key e"))
	require.False(t, ok)
	d, step, ok = StepOf("lab-sys-file-part e", has("lab e", "lab-sys e"))
	require.True(t, ok)
	require.Equal(t, "lab-sys e", d, "the longest protocol")
	require.Equal(t, "file-part", step)
	_, _, ok = StepOf("lab- e", has("lab e"))
	require.False(t, ok, "no step name")
}
