package canonical

import (
	"bytes"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustKeyer(t *testing.T, form Form, ignore ...string) *Keyer {
	t.Helper()
	k, err := NewKeyer(form, ignore)
	require.NoError(t, err)
	return k
}

func TestKeyerKeyIsSHA256OfBodyWhenNothingIsIgnored(t *testing.T) {
	for _, form := range []Form{FormJCS, FormPython} {
		t.Run(string(form), func(t *testing.T) {
			k := mustKeyer(t, form, "/absent")
			got, err := k.Key([]byte(`{ "b": [1, 2.50], "a": "é" }`))
			require.NoError(t, err)
			want, err := form.Canonicalize([]byte(`{"a":"é","b":[1,2.50]}`))
			require.NoError(t, err)
			require.Equal(t, string(want), string(got.Body))
			sum := sha256.Sum256(got.Body)
			require.Equal(t, hex.EncodeToString(sum[:]), got.Key)
		})
	}
}

func TestKeyerLeavesIgnoredValuesOutOfTheKeyOnly(t *testing.T) {
	cases := []struct {
		name    string
		ignore  []string
		payload string
		keyOf   string // the payload whose canonical bytes the key must hash
	}{
		{"top-level member", []string{"/updated"}, `{"title":"x","updated":"2024-01-01"}`, `{"title":"x"}`},
		{"nested member", []string{"/meta/request_id"}, `{"meta":{"request_id":7,"v":1},"t":2}`, `{"meta":{"v":1},"t":2}`},
		{"tilde and slash escapes", []string{"/a~1b", "/c~0d", "/~01"}, `{"a/b":1,"c~d":2,"~1":3,"e":4}`, `{"e":4}`},
		{"array element by index", []string{"/items/1"}, `{"items":["a","b","c"]}`, `{"items":["a","c"]}`},
		{"member inside array elements", []string{"/items/0/ts", "/items/1/ts"}, `{"items":[{"ts":1,"v":"a"},{"ts":2,"v":"b"}]}`, `{"items":[{"v":"a"},{"v":"b"}]}`},
		{"indexes resolve against the payload as given", []string{"/a/0", "/a/1"}, `{"a":[1,2,3]}`, `{"a":[3]}`},
		{"escaped name in the payload", []string{"/é"}, `{"\u00e9":1,"e":2}`, `{"e":2}`},
		{"empty member name", []string{"/"}, `{"":1,"x":2}`, `{"x":2}`},
		{"absent pointers are no error", []string{"/nope", "/items/9", "/items/x", "/items/01", "/t/deeper"}, `{"items":[1],"t":"s"}`, `{"items":[1],"t":"s"}`},
		{"pointer into a scalar payload", []string{"/a"}, `"just a string"`, `"just a string"`},
		{"pointer naming a whole subtree", []string{"/volatile"}, `{"volatile":{"a":[1,2,{"b":3}]},"k":1}`, `{"k":1}`},
	}
	for _, form := range []Form{FormJCS, FormPython} {
		for _, c := range cases {
			t.Run(string(form)+" "+c.name, func(t *testing.T) {
				k := mustKeyer(t, form, c.ignore...)
				got, err := k.Key([]byte(c.payload))
				require.NoError(t, err)
				want, err := form.Canonicalize([]byte(c.keyOf))
				require.NoError(t, err)
				require.Equal(t, Key(want), got.Key)
				body, err := form.Canonicalize([]byte(c.payload))
				require.NoError(t, err)
				require.Equal(t, string(body), string(got.Body), "the body keeps ignored fields")
			})
		}
	}
}

func TestKeyerGivesPayloadsDifferingOnlyInIgnoredFieldsOneKey(t *testing.T) {
	k := mustKeyer(t, FormJCS, "/ts")
	a, err := k.Key([]byte(`{"doi":"10.5072/x","ts":"2024-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	b, err := k.Key([]byte(`{"ts":"2025-06-30T12:00:00Z",  "doi":"10.5072/x"}`))
	require.NoError(t, err)
	require.Equal(t, a.Key, b.Key)
	require.NotEqual(t, string(a.Body), string(b.Body))
}

func TestNewKeyerRefusesBadPointersAndForms(t *testing.T) {
	for _, p := range []string{"", "a/b", "/a~", "/a~2", "/~x", "/\xff"} {
		t.Run("pointer "+p, func(t *testing.T) {
			_, err := NewKeyer(FormJCS, []string{"/ok", p})
			require.ErrorIs(t, err, ErrInvalidPointer)
		})
	}
	_, err := NewKeyer("xml", nil)
	require.ErrorIs(t, err, ErrUnknownForm)
}

func TestKeyerReportsItsSettings(t *testing.T) {
	ignore := []string{"/b", "/a"}
	k := mustKeyer(t, "", ignore...)
	require.Equal(t, FormJCS, k.Form())
	got := k.Ignore()
	require.Equal(t, []string{"/b", "/a"}, got)
	got[0] = "/changed"
	ignore[1] = "/changed"
	require.Equal(t, []string{"/b", "/a"}, k.Ignore(), "the keyer keeps its own copy")
}

func TestKeyerKeyRejectsMalformedPayloads(t *testing.T) {
	_, err := mustKeyer(t, FormPython).Key([]byte(`{"a":NaN}`))
	var se *SyntaxError
	require.ErrorAs(t, err, &se)
	require.Equal(t, int64(5), se.Offset)
}

func TestKeyerIsSafeForConcurrentUse(t *testing.T) {
	k := mustKeyer(t, FormJCS, "/ts")
	want, err := k.Key([]byte(`{"a":[1,2,3],"ts":1}`))
	require.NoError(t, err)
	var wg sync.WaitGroup
	keys := make([]string, 8)
	for i := range keys {
		wg.Go(func() {
			got, err := k.Key([]byte(`{"ts":2,"a":[1,2,3]}`))
			if err == nil {
				keys[i] = got.Key
			}
		})
	}
	wg.Wait()
	for _, got := range keys {
		require.Equal(t, want.Key, got)
	}
}

// writeFiles creates files (path -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestDatasetKeyCoversFileBytesInTheDocumentedShape(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"b.csv": "x,y\n1,2\n", "data/a.bin": "\x00\x01", "données/é.txt": ""})
	k := mustKeyer(t, FormJCS)
	got, err := k.DatasetKey(dir, []byte(`{"title": "T", "year": 2024}`), []string{"./données/é.txt", "b.csv", "data/../data/a.bin"})
	require.NoError(t, err)
	want := `{"dataset":[` +
		`{"path":"b.csv","sha256":"` + sha256Hex("x,y\n1,2\n") + `","size":8},` +
		`{"path":"data/a.bin","sha256":"` + sha256Hex("\x00\x01") + `","size":2},` +
		`{"path":"données/é.txt","sha256":"` + sha256Hex("") + `","size":0}` +
		`],"metadata":{"title":"T","year":2024}}`
	require.Equal(t, want, string(got.Body))
	require.Equal(t, sha256Hex(want), got.Key)

	py, err := mustKeyer(t, FormPython).DatasetKey(dir, []byte(`{"title":"T","year":2024}`), []string{"b.csv", "data/a.bin", "données/é.txt"})
	require.NoError(t, err)
	require.Equal(t, strings.ReplaceAll(want, "données/é.txt", `donn\u00e9es/\u00e9.txt`), string(py.Body))
}

func TestDatasetKeyDependsOnContentNotListOrder(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a": "1", "b": "2"})
	k := mustKeyer(t, FormJCS, "/updated")
	first, err := k.DatasetKey(dir, []byte(`{"t":1,"updated":"monday"}`), []string{"a", "b"})
	require.NoError(t, err)
	second, err := k.DatasetKey(dir, []byte(`{"updated":"tuesday","t":1}`), []string{"b", "a"})
	require.NoError(t, err)
	require.Equal(t, first.Key, second.Key, "list order and ignored metadata do not count")

	writeFiles(t, dir, map[string]string{"b": "3"})
	changed, err := k.DatasetKey(dir, []byte(`{"t":1}`), []string{"a", "b"})
	require.NoError(t, err)
	require.NotEqual(t, first.Key, changed.Key, "file bytes count")
}

func TestDatasetKeyRefusesFilesItCannotVouchFor(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	writeFiles(t, dir, map[string]string{"ok": "1", "sub/f": "2"})
	writeFiles(t, outside, map[string]string{"secret": "s"})
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link-out")))
	require.NoError(t, os.Symlink("../"+filepath.Base(outside), filepath.Join(dir, "dir-out")))
	require.NoError(t, os.Symlink(filepath.Join(dir, "ok"), filepath.Join(dir, "link-absolute")))

	cases := []struct {
		name  string
		files []string
	}{
		{"empty list", nil},
		{"file listed twice", []string{"ok", "./ok"}},
		{"parent escape", []string{"../x"}},
		{"escape after cleaning", []string{"sub/../../x"}},
		{"absolute path", []string{filepath.ToSlash(filepath.Join(dir, "ok"))}},
		{"the folder itself", []string{"sub/.."}},
		{"a directory", []string{"sub"}},
		{"empty path", []string{""}},
		{"symlink out of the folder", []string{"link-out"}},
		{"path through a symlinked folder outside", []string{"dir-out/secret"}},
		{"absolute symlink, even to a file inside", []string{"link-absolute"}},
		{"missing file", []string{"missing"}},
		{"invalid UTF-8", []string{"\xff"}},
	}
	k := mustKeyer(t, FormJCS)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := k.DatasetKey(dir, []byte(`{}`), c.files)
			require.ErrorIs(t, err, ErrInvalidDataset)
		})
	}

	t.Run("missing file is also fs.ErrNotExist", func(t *testing.T) {
		_, err := k.DatasetKey(dir, []byte(`{}`), []string{"missing"})
		require.ErrorIs(t, err, fs.ErrNotExist)
	})
	t.Run("symlink inside the folder is followed", func(t *testing.T) {
		require.NoError(t, os.Symlink("sub/f", filepath.Join(dir, "link-in")))
		got, err := k.DatasetKey(dir, []byte(`{}`), []string{"link-in"})
		require.NoError(t, err)
		require.Contains(t, string(got.Body), `"sha256":"`+sha256Hex("2")+`"`)
	})
	t.Run("malformed metadata names its offset", func(t *testing.T) {
		_, err := k.DatasetKey(dir, []byte(`{"a":01}`), []string{"ok"})
		var se *SyntaxError
		require.ErrorAs(t, err, &se)
		require.Equal(t, int64(5), se.Offset)
	})
	t.Run("missing folder", func(t *testing.T) {
		_, err := k.DatasetKey(filepath.Join(dir, "nope"), []byte(`{}`), []string{"ok"})
		require.ErrorIs(t, err, fs.ErrNotExist)
	})
}

func TestDatasetKeyHashesInMemoryThatDoesNotGrowWithFileSize(t *testing.T) {
	dir := t.TempDir()
	writeRandomFile(t, filepath.Join(dir, "small"), 1<<20)
	writeRandomFile(t, filepath.Join(dir, "large"), 48<<20)
	k := mustKeyer(t, FormJCS)
	allocated := func(name string) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := k.DatasetKey(dir, []byte(`{}`), []string{name})
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := allocated("small"), allocated("large")
	require.Less(t, large, uint64(2<<20), "hashing 48 MiB allocated %d bytes", large)
	require.Less(t, large, small+(1<<20), "48 MiB: %d bytes, 1 MiB: %d bytes", large, small)
}

func TestDatasetMD5ComesFromTheSameReadAsTheKey(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o600))
	plain, err := NewKeyer(FormJCS, nil)
	require.NoError(t, err)
	k, err := plain.DatasetKey(dir, []byte(`{}`), []string{"a.txt"})
	require.NoError(t, err)
	require.Nil(t, k.MD5)
	withMD5, err := plain.WithFileMD5().DatasetKey(dir, []byte(`{}`), []string{"./a.txt"})
	require.NoError(t, err)
	require.Equal(t, k.Key, withMD5.Key, "MD5 changes no key")
	require.Equal(t, map[string]string{"a.txt": "5d41402abc4b2a76b9719d911017c592"}, withMD5.MD5)
}

func TestDatasetPartDigestsComeFromTheSameReadAsTheKey(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte("0123456789"), 25) // 250 bytes: parts of 100, 100, 50
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "small"), big[:100], 0o600))
	plain, err := NewKeyer(FormJCS, nil)
	require.NoError(t, err)
	k, err := plain.DatasetKey(dir, []byte(`{}`), []string{"big", "small"})
	require.NoError(t, err)
	require.Nil(t, k.Parts)
	parted, err := plain.WithFileParts(100).DatasetKey(dir, []byte(`{}`), []string{"big", "small"})
	require.NoError(t, err)
	require.Equal(t, k.Key, parted.Key, "part digests change no key")
	var want []PartSum
	for _, p := range [][]byte{big[:100], big[100:200], big[200:]} {
		want = append(want, PartSum{MD5: md5.Sum(p), SHA256: sha256.Sum256(p)})
	}
	require.Equal(t, map[string][]PartSum{"big": want}, parted.Parts, "a file no larger than a part has none")
}

// A file of many read buffers, its parts not aligned to them: the digests
// hashed side by side are those of its bytes, in order.
func TestDatasetPartDigestsOfALargeFile(t *testing.T) {
	dir := t.TempDir()
	big := make([]byte, 3<<20+12345)
	for i := range big {
		big[i] = byte(i * 31 >> 7)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), big, 0o600))
	const part = 1<<20 + 7
	parted, err := mustKeyer(t, FormJCS).WithFileMD5().WithFileParts(part).DatasetKey(dir, []byte(`{}`), []string{"big"})
	require.NoError(t, err)
	var want []PartSum
	for off := 0; off < len(big); off += part {
		p := big[off:min(off+part, len(big))]
		want = append(want, PartSum{MD5: md5.Sum(p), SHA256: sha256.Sum256(p)})
	}
	require.Equal(t, want, parted.Parts["big"])
	sum, whole := sha256.Sum256(big), md5.Sum(big)
	require.Contains(t, string(parted.Body), hex.EncodeToString(sum[:]))
	require.Equal(t, hex.EncodeToString(whole[:]), parted.MD5["big"])
}
