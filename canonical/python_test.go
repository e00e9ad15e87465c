package canonical

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pythonDumps is the reference: one process reads JSON texts, one per line,
// and writes what json.dumps makes of each.
const pythonDumps = `
import json, sys
out = sys.stdout
for line in sys.stdin.buffer:
    try:
        out.write(json.dumps(json.loads(line.rstrip(b"\n")), sort_keys=True, separators=(",", ":")))
    except Exception as e:
        out.write("ERROR %s: %s" % (type(e).__name__, str(e)[:100]))
    out.write("\n")
`

// runPython feeds payloads to python3 and returns its output lines.
func runPython(t *testing.T, payloads [][]byte) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		missingReference(t, "python3 not found on PATH, so the differential test against Python's json.dumps cannot run: %v", err)
	}
	var in bytes.Buffer
	for _, p := range payloads {
		require.NotContains(t, string(p), "\n", "payloads travel one per line")
		in.Write(p)
		in.WriteByte('\n')
	}
	cmd := exec.Command(py, "-c", pythonDumps)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "python3: %s", stderr.String())
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Equal(t, len(payloads), len(lines))
	return lines
}

func TestPythonFormMatchesPythonJSONDumpsByteForByte(t *testing.T) {
	g := newPayloadGen(20261130, true)
	var payloads [][]byte
	for range 4000 {
		payloads = append(payloads, g.payload())
	}
	// Edges: the deepest nesting both accept, Python's longest integer.
	payloads = append(payloads,
		[]byte(strings.Repeat(`{"a":[`, MaxDepth/2)+"1"+strings.Repeat("]}", MaxDepth/2)),
		[]byte("["+strings.Repeat("7", maxIntDigits)+",-"+strings.Repeat("8", maxIntDigits)+"]"),
	)
	want := runPython(t, payloads)
	for i, p := range payloads {
		got, err := Python(p)
		require.NoError(t, err, "payload %d: %s", i, p)
		if want[i] != string(got) {
			t.Fatalf("payload %d differs from Python's json.dumps: %s", i, firstDifference(want[i], string(got)))
		}
	}
}

// firstDifference shows where two long strings part ways.
func firstDifference(want, got string) string {
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	from := max(0, i-60)
	return fmt.Sprintf("at byte %d:\n want ...%s\n  got ...%s", i, want[from:min(len(want), i+60)], got[from:min(len(got), i+60)])
}

func TestPythonFormRejectsWhatPythonAcceptsButIsNotIJSON(t *testing.T) {
	payloads := [][]byte{
		[]byte(`[NaN]`), []byte(`[Infinity]`), []byte(`[-Infinity]`),
		[]byte(`{"a":1,"a":2}`), []byte(`"\ud800"`), []byte(`"\udc00\ud800"`),
		[]byte(`1e400`),
	}
	got := runPython(t, payloads)
	for i, p := range payloads {
		require.NotContains(t, got[i], "ERROR", "python3 accepts %s", p)
		_, err := Python(p)
		var se *SyntaxError
		require.ErrorAs(t, err, &se, "python form accepted %s, which Python reads as %s", p, got[i])
	}
}
