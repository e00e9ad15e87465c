package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTheCollectorRunsLessOftenUnlessGOGCIsSet counts the collections of a
// real `deposit key` process over 50,000 lines: without GOGC it collects
// less than half as often as with GOGC=100, Go's default, which a user
// setting GOGC gets.
func TestTheCollectorRunsLessOftenUnlessGOGCIsSet(t *testing.T) {
	input := filepath.Join(t.TempDir(), "in.jsonl")
	f, err := os.Create(input)
	require.NoError(t, err)
	w := bufio.NewWriter(f)
	for i := range 50_000 {
		fmt.Fprintf(w, `{"title":"Observation series %d","creators":[{"name":"Researcher %d"}],"n":%d}`+"\n", i, i%977, i)
	}
	require.NoError(t, w.Flush())
	require.NoError(t, f.Close())
	collections := func(env ...string) int {
		cmd := exec.Command(binary, "key", input)
		cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
		cmd.Env = append(cmd.Env, env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Run(), stderr.String())
		n := 0
		for line := range strings.Lines(stderr.String()) {
			if strings.HasPrefix(line, "gc ") {
				n++
			}
		}
		return n
	}
	tuned, dflt := collections("GOGC="), collections("GOGC=100")
	require.Greater(t, dflt, 4, "the input allocates enough for several collections")
	require.Less(t, 2*tuned, dflt, "collections without GOGC (%d) and with GOGC=100 (%d)", tuned, dflt)
}
