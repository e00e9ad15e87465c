package couchdb

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/canonical"
	"github.com/depositkit/deposit/driver"
)

// BenchmarkCouchDBDatasetBody is what a CouchDB dataset costs the client
// beside S3's raw upload of the same 64 MiB file: reading the inline body
// (base64, and the file's SHA-256 checked as it is read) against reading
// the file as S3 sends it; and keying the dataset with each file's MD5
// (which CouchDB's 409 check needs) against keying it without.
func BenchmarkCouchDBDatasetBody(b *testing.B) {
	const size = 64 << 20
	dir := b.TempDir()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7919 >> 3)
	}
	require.NoError(b, os.WriteFile(filepath.Join(dir, "big.bin"), data, 0o644))
	plain, err := canonical.NewKeyer(canonical.FormJCS, nil)
	require.NoError(b, err)
	withMD5 := plain.WithFileMD5() // what the engine makes for a FileMD5er
	k, err := withMD5.DatasetKey(dir, []byte(`{}`), []string{"big.bin"})
	require.NoError(b, err)
	files, err := driver.DatasetFiles(k.Body)
	require.NoError(b, err)

	b.Run("raw", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			fh, err := os.Open(filepath.Join(dir, "big.bin"))
			require.NoError(b, err)
			_, err = io.Copy(io.Discard, driver.SizedFile{File: fh, Size: size})
			fh.Close()
			require.NoError(b, err)
		}
	})
	b.Run("inline", func(b *testing.B) {
		head, tail, err := couchInlineFrame(files, k.Body)
		require.NoError(b, err)
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			body := newCouchInlineBody(dir, files, head, tail, 0)
			_, err := io.Copy(io.Discard, body)
			body.Close()
			require.NoError(b, err)
		}
	})
	for _, md5 := range []bool{false, true} {
		keyer, name := withMD5, "key+md5"
		if !md5 {
			keyer, name = plain, "key"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				_, err := keyer.DatasetKey(dir, []byte(`{}`), []string{"big.bin"})
				require.NoError(b, err)
			}
		})
	}
}
