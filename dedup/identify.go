package dedup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/depositkit/deposit/internal/sqlitefile"
)

// applicationID marks a SQLite file as a deposit store ("DPSK").
const applicationID = 0x4450534B

// identify checks, without writing to it or creating anything beside it,
// that the file at path is either blank (missing, empty, or a SQLite file
// with no application id and an empty schema: a create that crashed) or a
// deposit store at a known schema version, and returns what it found.
// Otherwise it returns an error wrapping ErrNotDepositStore or
// ErrNewerSchema that names the file and what is wrong.
func identify(path string) (sqlitefile.File, error) {
	f, err := sqlitefile.Identify(path, applicationID)
	switch {
	case errors.Is(err, sqlitefile.ErrNotDatabase):
		return f, fmt.Errorf("%w: %s: %w", ErrNotDepositStore, path, err)
	case err != nil:
		return f, fmt.Errorf("dedup: store %s: %w", path, err)
	case f.Blank():
		return f, nil
	case f.ApplicationID == 0:
		return f, fmt.Errorf("%w: %s is another program's SQLite database (%d tables, no deposit application_id)", ErrNotDepositStore, path, len(f.Tables))
	case f.ApplicationID != applicationID:
		return f, fmt.Errorf("%w: %s is another program's SQLite database (application_id %#x)", ErrNotDepositStore, path, f.ApplicationID)
	case f.UserVersion > SchemaVersion():
		return f, fmt.Errorf("%w: %s has schema version %d, this program knows up to %d: use a newer deposit", ErrNewerSchema, path, f.UserVersion, SchemaVersion())
	case f.UserVersion < 1:
		return f, fmt.Errorf("%w: %s has the deposit application_id but no schema version", ErrNotDepositStore, path)
	}
	for _, t := range []string{"schema_migrations", "settings", "records"} {
		if _, found := slices.BinarySearch(f.Tables, t); !found {
			return f, fmt.Errorf("%w: %s is missing its %s table", ErrNotDepositStore, path, t)
		}
	}
	return f, nil
}

// checkWritable reports a clear error when the store at path, existing or to
// be created, could not be written: a read-only file or directory.
func checkWritable(path string) error {
	dir := filepath.Dir(path)
	dinfo, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("dedup: store %s: directory: %w", path, err)
	}
	if dinfo.Mode().Perm()&0o222 == 0 {
		return fmt.Errorf("dedup: store %s: directory %s is read-only (the store needs to create its -wal and -shm files there)", path, dir)
	}
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", path, err)
	}
	if info.Mode().Perm()&0o222 == 0 {
		return fmt.Errorf("dedup: store %s: file is read-only", path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("dedup: store %s: cannot open it for writing: %w", path, err)
	}
	return f.Close()
}
