package datacite

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
)

// testPrefix is DataCite's test prefix.
const testPrefix = "10.5072"

// dcPayload is a complete set of DOI attributes, enough to publish.
func dcPayload(i int) []byte {
	return fmt.Appendf(nil, `{"titles":[{"title":"Reef temperature, station %d"}],"creators":[{"name":"Vega, A."}],"publisher":"Reef Institute","publicationYear":2026,"types":{"resourceTypeGeneral":"Dataset"},"url":"https://example.org/reef/%d"}`, i, i)
}

func TestDOIMatchesIndependentDerivation(t *testing.T) {
	t.Run("pinned vectors", func(t *testing.T) {
		for key, want := range map[string]string{
			strings.Repeat("00", 32): "10.5072/dk-aaaa-aaaa-aaaa-aaaa",
			strings.Repeat("ff", 32): "10.5072/dk-7777-7777-7777-7777",
			// SHA-256 of the empty string; hand-checked: e3b0c44298fc1c149afb
			// is 11100 01110 11000 01100 01000 10100 11000 11111 10000 01110
			// 00001 01001 00110 10111 11011 = 4oym iquy 7qob jgx3.
			"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855": "10.5072/dk-4oym-iquy-7qob-jgx3",
		} {
			got, err := DOI(testPrefix, key)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
	})
	t.Run("python3 base64.b32encode agrees", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("python3 is not installed: the independent derivation cannot run")
		}
		keyer, err := canonical.NewKeyer(canonical.FormJCS, nil)
		require.NoError(t, err)
		var keys []string
		for i := range 50 {
			k, err := keyer.Key(dcPayload(i))
			require.NoError(t, err)
			keys = append(keys, k.Key)
		}
		script := `import base64, sys
for k in sys.stdin.read().split():
    s = base64.b32encode(bytes.fromhex(k)[:10]).decode().lower()
    print("10.5072/dk-" + "-".join(s[i:i+4] for i in range(0, 16, 4)))`
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = strings.NewReader(strings.Join(keys, "\n"))
		out, err := cmd.Output()
		require.NoError(t, err)
		want := strings.Fields(string(out))
		require.Len(t, want, len(keys))
		for i, k := range keys {
			got, err := DOI(testPrefix, k)
			require.NoError(t, err)
			require.Equal(t, want[i], got, "key %s", k)
		}
	})
	t.Run("the DOI is lower case", func(t *testing.T) {
		got, err := DOI("10.5072", strings.Repeat("ab", 32))
		require.NoError(t, err)
		require.Equal(t, strings.ToLower(got), got)
	})
	t.Run("bad prefix or key is refused", func(t *testing.T) {
		for _, p := range []string{"", "10.", "11.5072", "10.50a2", "10.5072.", "10..1"} {
			_, err := DOI(p, strings.Repeat("00", 32))
			require.Error(t, err, "prefix %q", p)
		}
		_, err := DOI(testPrefix, "abc")
		require.Error(t, err)
	})
}

// BenchmarkDOI derives a DOI from a key.
func BenchmarkDOI(b *testing.B) {
	key := strings.Repeat("e3", 32)
	for b.Loop() {
		if _, err := DOI(testPrefix, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDataCiteRequest builds the create body for a payload: attributes
// parsed, DOI and key added, JSON:API document encoded.
func BenchmarkDataCiteRequest(b *testing.B) {
	d, err := Target{Endpoint: "http://127.0.0.1:1", Prefix: testPrefix}.Driver()
	if err != nil {
		b.Fatal(err)
	}
	body := dcPayload(1)
	key := strings.Repeat("e3", 32)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		steps, err := d.Steps(canonical.Keyed{Key: key, Body: body}, "")
		if err == nil {
			_, err = steps[0].Build(nil)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
