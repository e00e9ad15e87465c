package canonical

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// requirePeersEnv, set to 1 (as CI sets it), makes a missing reference
// program a failure instead of a skip.
const requirePeersEnv = "DEPOSIT_REQUIRE_PEERS"

// missingReference skips t because the program a differential test compares
// against is not installed, or fails it when requirePeersEnv is 1.
func missingReference(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv(requirePeersEnv) == "1" {
		t.Fatalf(format+" (%s=1 makes it a failure)", append(args, requirePeersEnv)...)
	}
	t.Skipf(format, args...)
}

// runNode feeds payloads to testdata/jcs.js, RFC 8785 written in
// ECMAScript over JSON.stringify, and returns its output lines.
func runNode(t *testing.T, payloads [][]byte) []string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingReference(t, "node not found on PATH, so the differential test against JSON.stringify cannot run (.ci/peers installs it): %v", err)
	}
	var in bytes.Buffer
	for _, p := range payloads {
		require.NotContains(t, string(p), "\n", "payloads travel one per line")
		in.Write(p)
		in.WriteByte('\n')
	}
	cmd := exec.Command(node, "testdata/jcs.js")
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", stderr.String())
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Equal(t, len(payloads), len(lines))
	return lines
}

// jcsEdges are inputs where ECMAScript's number and string forms, or the
// UTF-16 order of names, are easy to get wrong.
var jcsEdges = []string{
	`[-0,-0.0,0e5,1e21,1e20,999999999999999900000,1e-6,1e-7,0.000001,123e-9]`,
	`[5e-324,-5e-324,1.7976931348623157e308,2.2250738585072014e-308,4.35,0.1,0.30000000000000004]`,
	`[9007199254740991,9007199254740992,9007199254740993,-9007199254740993,295147905179352830000]`,
	`[1E2,1e+2,1e-02,100.000,0.5e1,1.5e300,3.3333333333333333333333e-300]`,
	`{"\u20ac":1,"\ud83d\ude00":2,"\ue000":3,"\uffff":4,"\u0080":5,"":6,"a":7,"A":8}`,
	`{"\ud800\udc00":1,"\ufb33":2,"😂":3,"é":4,"e\u0301":5}`,
	`["\u0000\u001f\u007f\u0080\u2028\u2029\ufeff","\"\\\/\b\f\n\r\t","</script>"]`,
	`{"__proto__":{"constructor":1},"toString":2,"10":3,"2":4,"-1":5}`,
	`[[],{},[{}],{"a":[]},"",0,true,false,null]`,
}

func TestJCSMatchesJSONStringifyByteForByte(t *testing.T) {
	g := newPayloadGen(20261201, false)
	var payloads [][]byte
	for range 4000 {
		payloads = append(payloads, g.payload())
	}
	for _, e := range jcsEdges {
		payloads = append(payloads, []byte(e))
	}
	payloads = append(payloads, []byte(strings.Repeat(`{"a":[`, MaxDepth/2)+"1"+strings.Repeat("]}", MaxDepth/2)))
	want := runNode(t, payloads)
	for i, p := range payloads {
		require.NotContains(t, want[i], "ERROR", "payload %d: node refused %s", i, p)
		got, err := JCS(p)
		require.NoError(t, err, "payload %d: %s", i, p)
		if want[i] != string(got) {
			t.Fatalf("payload %d differs from RFC 8785 over JSON.stringify: %s", i, firstDifference(want[i], string(got)))
		}
	}
}

// What JSON.parse reads but RFC 8785 cannot canonicalize, because it is not
// I-JSON (RFC 7493): lone surrogates, duplicate names, numbers beyond a
// double. Node reads each (the script only refuses the infinite number),
// and JCS must refuse all of them.
func TestJCSRejectsWhatJSONParseAcceptsButIsNotIJSON(t *testing.T) {
	payloads := [][]byte{
		[]byte(`{"a":1,"a":2}`), []byte(`"\ud800"`), []byte(`"\udc00\ud800"`), []byte(`["\ud83d"]`),
		[]byte(`1e400`), []byte(`[-1e400]`),
	}
	got := runNode(t, payloads)
	for i, p := range payloads {
		if !strings.HasPrefix(got[i], "ERROR RangeError: not a finite number") {
			require.NotContains(t, got[i], "ERROR", "node's JSON.parse refuses %s", p)
		}
		_, err := JCS(p)
		var se *SyntaxError
		require.ErrorAs(t, err, &se, "JCS accepted %s, which JSON.parse reads as %s", p, got[i])
	}
}
