package dedup

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// applicationID marks a SQLite file as a deposit store ("DPSK").
const applicationID = 0x4450534B

// sqliteMagic opens every SQLite 3 database file.
const sqliteMagic = "SQLite format 3\x00"

// identify checks, without writing to it, that the file at path is either
// new (missing, empty, or a SQLite file with no tables and no application
// id: a create that crashed) or a deposit store at a known schema version.
// Otherwise it returns an error wrapping ErrNotDepositStore or
// ErrNewerSchema that names the file and what is wrong.
func identify(path string) error {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("dedup: store %s: %w", path, err)
	case info.IsDir():
		return fmt.Errorf("%w: %s is a directory", ErrNotDepositStore, path)
	case !info.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrNotDepositStore, path)
	case info.Size() == 0:
		return nil
	}

	// A checkpoint in another process writes page 1 (with the new size)
	// before the pages that grow the file, so a size check can fail for a
	// moment on a healthy store; look again before calling it truncated.
	var h header
	for try := 0; ; try++ {
		h, err = readHeader(path)
		if err == nil || !errors.Is(err, errTruncated) || try == 2 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotDepositStore, path, err)
	}
	if h.applicationID != 0 && h.applicationID != applicationID {
		return fmt.Errorf("%w: %s is another program's SQLite database (application_id %#x)", ErrNotDepositStore, path, h.applicationID)
	}

	// The header on disk can lag behind the write-ahead log, so ask SQLite,
	// read-only, for the current application_id, version and tables.
	return identifySQL(path)
}

// header holds the fields of a SQLite file header identify needs.
type header struct {
	applicationID uint32
	userVersion   uint32
}

// errTruncated marks a file shorter than its header says.
var errTruncated = errors.New("file is truncated")

// readHeader reads and checks the 100-byte SQLite header of path.
func readHeader(path string) (header, error) {
	f, err := os.Open(path)
	if err != nil {
		return header{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return header{}, err
	}
	var b [100]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			if n := min(len(sqliteMagic), int(info.Size())); string(b[:n]) == sqliteMagic[:n] {
				return header{}, fmt.Errorf("%w: %d bytes, shorter than a SQLite header", errTruncated, info.Size())
			}
			return header{}, errors.New("not a SQLite database (no SQLite header)")
		}
		return header{}, err
	}
	if string(b[:16]) != sqliteMagic {
		return header{}, errors.New("not a SQLite database (no SQLite header)")
	}
	pageSize := int64(binary.BigEndian.Uint16(b[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return header{}, fmt.Errorf("corrupt SQLite header (page size %d)", pageSize)
	}
	if b[18] < 1 || b[18] > 2 || b[19] < 1 || b[19] > 2 || b[21] != 64 || b[22] != 32 || b[23] != 32 {
		return header{}, errors.New("corrupt SQLite header (file format bytes)")
	}
	if enc := binary.BigEndian.Uint32(b[56:60]); enc > 3 {
		return header{}, fmt.Errorf("corrupt SQLite header (text encoding %d)", enc)
	}
	size := info.Size()
	if size%pageSize != 0 {
		return header{}, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte pages", errTruncated, size, pageSize)
	}
	// The in-header page count is valid when the change counter equals the
	// version-valid-for number.
	if binary.BigEndian.Uint32(b[24:28]) == binary.BigEndian.Uint32(b[92:96]) {
		if pages := int64(binary.BigEndian.Uint32(b[28:32])); pages*pageSize > size {
			return header{}, fmt.Errorf("%w: %d bytes, the header says %d", errTruncated, size, pages*pageSize)
		}
	}
	return header{
		applicationID: binary.BigEndian.Uint32(b[68:72]),
		userVersion:   binary.BigEndian.Uint32(b[60:64]),
	}, nil
}

// identifySQL opens path read-only and reads its application_id, schema
// version and tables.
func identifySQL(path string) error {
	err := identifySQLMode(path, hasWAL(path))
	if err != nil && !errors.Is(err, ErrNewerSchema) && hasWAL(path) {
		// Read as immutable while another process was creating the store
		// (switching it to WAL): read it again through the log.
		err = identifySQLMode(path, true)
	}
	return err
}

// hasWAL reports whether path has a write-ahead log or rollback journal
// beside it, which means some process has it open for writing.
func hasWAL(path string) bool {
	for _, suffix := range []string{"-wal", "-journal"} {
		if _, err := os.Lstat(path + suffix); err == nil {
			return true
		}
	}
	return false
}

// identifySQLMode is identifySQL reading through the log (live) or, when
// there is none, as an immutable file, which creates no -wal or -shm files
// beside a file that may not be ours.
func identifySQLMode(path string, live bool) error {
	query := "mode=ro&immutable=1"
	if live {
		query = "mode=ro&_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driverName, fileDSN(path, query))
	if err != nil {
		return fmt.Errorf("dedup: store %s: %w", path, err)
	}
	defer db.Close()
	ctx := context.Background()
	notOurs := func(what string, err error) error {
		return fmt.Errorf("%w: %s: %s: %v", ErrNotDepositStore, path, what, err)
	}
	var appID int64
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return notOurs("cannot read it as SQLite", err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return notOurs("cannot read it as SQLite", err)
	}
	tables := map[string]bool{}
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_schema WHERE type = 'table'")
	if err != nil {
		return notOurs("cannot read its schema", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return notOurs("cannot read its schema", err)
		}
		tables[name] = true
	}
	if err := rows.Err(); err != nil {
		return notOurs("cannot read its schema", err)
	}

	switch {
	case uint32(appID) == 0 && len(tables) == 0:
		return nil
	case uint32(appID) != applicationID:
		if appID == 0 {
			return fmt.Errorf("%w: %s is another program's SQLite database (%d tables, no deposit application_id)", ErrNotDepositStore, path, len(tables))
		}
		return fmt.Errorf("%w: %s is another program's SQLite database (application_id %#x)", ErrNotDepositStore, path, uint32(appID))
	case version > schemaVersion():
		return fmt.Errorf("%w: %s has schema version %d, this program knows up to %d: use a newer deposit", ErrNewerSchema, path, version, schemaVersion())
	case version < 1:
		return fmt.Errorf("%w: %s has the deposit application_id but no schema version", ErrNotDepositStore, path)
	}
	for _, t := range []string{"schema_migrations", "settings", "records"} {
		if !tables[t] {
			return fmt.Errorf("%w: %s is missing its %s table", ErrNotDepositStore, path, t)
		}
	}
	return nil
}

// fileDSN returns a SQLite URI for path with the given query.
func fileDSN(path, query string) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return "file:" + (&url.URL{Path: p}).EscapedPath() + "?" + query
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
