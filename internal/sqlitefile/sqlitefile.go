// Package sqlitefile tells what a file that should hold a SQLite database
// holds, without writing to it or creating anything beside it.
//
// A program that keeps its state in a SQLite file the user names must not
// set a pragma, switch the journal mode or migrate before it knows the file
// is its own: any of these writes to the file. Identify answers that
// question read-only: whether the file exists, whether it is a sound SQLite
// database, its application_id and user_version, and which tables it has.
// Judging the answer (ours, another program's, a newer schema) is left to
// the caller, which owns its own errors and messages.
package sqlitefile

import (
	"bytes"
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
	"slices"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// magic opens every SQLite 3 database file.
const magic = "SQLite format 3\x00"

// ErrNotDatabase is wrapped by the errors of Identify and ReadHeader for a
// file that is not a sound SQLite database: a directory or other non-regular
// file, a file without the SQLite header, a truncated file, a corrupt header,
// or one SQLite cannot read. The message says which.
var ErrNotDatabase = errors.New("not a SQLite database")

// Header holds the fields of the 100-byte SQLite file header that identify
// a file. The header can lag behind the write-ahead log of a database in
// use; File has the values as SQLite reads them.
type Header struct {
	PageSize      int
	ApplicationID uint32
	UserVersion   int
}

// ReadHeader reads and checks the SQLite header of the file at path, read
// only. Besides the magic string and the format bytes it checks that the
// file is a whole number of pages and no shorter than the header says.
// (Identify goes further: a file shorter than its header with a
// write-ahead log beside it is judged by SQLite, through the log.)
func ReadHeader(path string) (Header, error) {
	h, err := readHeader(path)
	if err != nil {
		return Header{}, err
	}
	return h, nil
}

// HasHeader reports whether the file at path begins with the string that
// opens every SQLite 3 database, reading those 16 bytes and nothing else:
// any program's database, sound or not past them. A missing or unreadable
// file, a directory or a shorter file reports false.
func HasHeader(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var b [len(magic)]byte
	_, err = io.ReadFull(f, b[:])
	return err == nil && string(b[:]) == magic
}

// readHeader is ReadHeader, except that a file whose header is sound but
// which is shorter than the header says (or not a whole number of pages)
// gives an error wrapping errTruncated together with the header.
func readHeader(path string) (Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return Header{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return Header{}, err
	}
	if info.IsDir() {
		return Header{}, fmt.Errorf("%w: it is a directory", ErrNotDatabase)
	}
	size := info.Size()
	var b [100]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			return Header{}, err
		}
		if n := min(len(magic), int(size)); string(b[:n]) == magic[:n] {
			return Header{}, fmt.Errorf("%w: %w: %d bytes, shorter than a SQLite header", ErrNotDatabase, errTruncated, size)
		}
		return Header{}, fmt.Errorf("%w (no SQLite header)", ErrNotDatabase)
	}
	if string(b[:16]) != magic {
		return Header{}, fmt.Errorf("%w (no SQLite header)", ErrNotDatabase)
	}
	pageSize := int64(binary.BigEndian.Uint16(b[16:18]))
	if pageSize == 1 {
		pageSize = 65536
	}
	if pageSize < 512 || pageSize&(pageSize-1) != 0 {
		return Header{}, fmt.Errorf("%w: corrupt SQLite header (page size %d)", ErrNotDatabase, pageSize)
	}
	if b[18] < 1 || b[18] > 2 || b[19] < 1 || b[19] > 2 || b[21] != 64 || b[22] != 32 || b[23] != 32 {
		return Header{}, fmt.Errorf("%w: corrupt SQLite header (file format bytes)", ErrNotDatabase)
	}
	if enc := binary.BigEndian.Uint32(b[56:60]); enc > 3 {
		return Header{}, fmt.Errorf("%w: corrupt SQLite header (text encoding %d)", ErrNotDatabase, enc)
	}
	h := Header{
		PageSize:      int(pageSize),
		ApplicationID: binary.BigEndian.Uint32(b[68:72]),
		UserVersion:   int(int32(binary.BigEndian.Uint32(b[60:64]))),
	}
	if size%pageSize != 0 {
		return h, fmt.Errorf("%w: %w: %d bytes is not a whole number of %d-byte pages", ErrNotDatabase, errTruncated, size, pageSize)
	}
	// The in-header page count is valid when the change counter equals the
	// version-valid-for number.
	if binary.BigEndian.Uint32(b[24:28]) == binary.BigEndian.Uint32(b[92:96]) {
		if pages := int64(binary.BigEndian.Uint32(b[28:32])); pages*pageSize > size {
			return h, fmt.Errorf("%w: %w: %d bytes, the header says %d", ErrNotDatabase, errTruncated, size, pages*pageSize)
		}
	}
	return h, nil
}

// errTruncated marks a file shorter than its header says.
var errTruncated = errors.New("file is truncated")

// File is what Identify found at a path. The zero value is a missing file.
type File struct {
	// Exists is false when nothing is at the path.
	Exists bool
	// Size is the length of the file in bytes.
	Size int64
	// ApplicationID and UserVersion are as SQLite reads them, through the
	// write-ahead log if the database has one; when the header names an
	// application_id other than the one Identify was asked about, they are
	// the header's and the file was not opened in SQLite.
	ApplicationID uint32
	UserVersion   int
	// Tables are the names of the database's tables, sorted; Objects counts
	// every entry of its schema (tables, indexes, views, triggers). Both are
	// empty when the file was not opened in SQLite.
	Tables  []string
	Objects int
}

// Blank reports whether f holds nothing a program could lose: no file, an
// empty file, or a SQLite database with no application_id and an empty
// schema (what a create that crashed before its first commit leaves).
func (f File) Blank() bool {
	return !f.Exists || f.Size == 0 || (f.ApplicationID == 0 && f.Objects == 0)
}

// Identify reports what the file at path holds, without writing to it or
// creating anything beside it. A missing file is no error (Exists is false),
// nor an empty one; a file that is not a sound SQLite database gives an
// error wrapping ErrNotDatabase. A database whose header names an
// application_id other than 0 and own is not opened in SQLite at all, so
// another program's file is never even read by SQLite. A file shorter than
// its header says is a database when it has a write-ahead log that holds
// every page it lacks (what a checkpoint that failed on a full disk
// leaves): SQLite reads it through the log, read-only (PRAGMA quick_check,
// no checkpoint), and judges it. Other errors (a permission denied) are
// returned as they are.
func Identify(path string, own uint32) (File, error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return File{}, nil
	case err != nil:
		return File{}, err
	case info.IsDir():
		return File{}, fmt.Errorf("%w: it is a directory", ErrNotDatabase)
	case !info.Mode().IsRegular():
		return File{}, fmt.Errorf("%w: it is not a regular file", ErrNotDatabase)
	case info.Size() == 0:
		return File{Exists: true}, nil
	case interruptedCreate(path):
		// What a create killed before its first commit leaves: rolling the
		// journal back, as SQLite does on the next write access, empties
		// the file. A read-only open refuses such a file (SQLITE_READONLY_ROLLBACK).
		return File{Exists: true}, nil
	}

	// A checkpoint in another process writes page 1 (with the new size)
	// before the pages that grow the file, so a size check can fail for a
	// moment on a healthy database; look again before calling it truncated.
	// A checkpoint that failed (the disk was full) leaves the file so, its
	// pages in the write-ahead log: with a log beside it, SQLite reads
	// the file through the log and judges it.
	var h Header
	for try := 0; ; try++ {
		h, err = readHeader(path)
		if err == nil || !errors.Is(err, errTruncated) || try == 2 || hasLog(path) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	short := errors.Is(err, errTruncated) && hasLog(path)
	if err != nil && !short {
		return File{}, err
	}
	f := File{Exists: true, Size: info.Size(), ApplicationID: h.ApplicationID, UserVersion: h.UserVersion}
	if h.ApplicationID != 0 && h.ApplicationID != own {
		if short {
			return File{}, err
		}
		return f, nil
	}
	// The header can lag behind the write-ahead log, so ask SQLite for the
	// current application_id, version and schema.
	db, oerr := Open(path)
	if oerr != nil {
		return File{}, oerr
	}
	defer db.Close()
	rerr := db.Read(func(db *sql.DB) error {
		if short {
			if err := checkThroughLog(db, err); err != nil {
				return err
			}
		}
		return readSchema(db, &f)
	})
	return f, rerr
}

// hasLog reports whether path has a write-ahead log beside it.
func hasLog(path string) bool {
	_, err := os.Lstat(path + "-wal")
	return err == nil
}

// checkThroughLog checks every page of a database whose file is shorter
// than its header says (truncated, the error that says so) as SQLite reads
// it through its write-ahead log: sound when the log holds every page the
// file lacks. Otherwise it returns truncated with what SQLite found.
func checkThroughLog(db *sql.DB, truncated error) error {
	rows, err := db.Query("PRAGMA quick_check")
	if err != nil {
		return fmt.Errorf("%w; through its write-ahead log: %v", truncated, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("%w; through its write-ahead log: %v", truncated, err)
		}
		problems = append(problems, line)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w; through its write-ahead log: %v", truncated, err)
	}
	if len(problems) == 1 && problems[0] == "ok" {
		return nil
	}
	if len(problems) > 3 {
		problems = append(problems[:3], "...")
	}
	return fmt.Errorf("%w, and its write-ahead log does not complete it: %s", truncated, strings.Join(problems, "; "))
}

// readSchema reads application_id, user_version and the schema of db into
// f, all in one read transaction: read one statement at a time, a store
// that another process creates in between would show its tables but not yet
// its application_id.
func readSchema(db *sql.DB, f *File) error {
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("%w: cannot read it as SQLite: %v", ErrNotDatabase, err)
	}
	defer tx.Rollback()
	var appID int64
	if err := tx.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil {
		return fmt.Errorf("%w: cannot read it as SQLite: %v", ErrNotDatabase, err)
	}
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&f.UserVersion); err != nil {
		return fmt.Errorf("%w: cannot read it as SQLite: %v", ErrNotDatabase, err)
	}
	f.ApplicationID = uint32(appID)
	f.Tables, f.Objects = nil, 0
	rows, err := tx.QueryContext(ctx, "SELECT type, name FROM sqlite_schema")
	if err != nil {
		return fmt.Errorf("%w: cannot read its schema: %v", ErrNotDatabase, err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ, name string
		if err := rows.Scan(&typ, &name); err != nil {
			return fmt.Errorf("%w: cannot read its schema: %v", ErrNotDatabase, err)
		}
		f.Objects++
		if typ == "table" {
			f.Tables = append(f.Tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("%w: cannot read its schema: %v", ErrNotDatabase, err)
	}
	slices.Sort(f.Tables)
	return nil
}

// DB reads a SQLite database without writing to it. It never creates the
// file, never writes to it, and creates nothing beside a file that no
// process has open. It is safe for concurrent use by multiple goroutines.
//
// Opened on a file with no -wal or -journal file beside it, which no process
// has open for writing, DB reads it as an immutable file: SQLite then takes
// no locks and creates no -wal or -shm file. That view holds only while the
// file stays as it was: a read during or after which a writer opened or
// changed the file (a -wal or -journal file appeared, or its size or
// modification time changed) is run again through the log, and so are all
// later reads. Reading through the log is SQLite's read-only mode (mode=ro),
// which waits up to 10 s for a writer's lock, uses the -wal and -shm files
// of the writers and, if they are gone, creates them as a writer would.
type DB struct {
	path string
	open fs.FileInfo // the file when the immutable view was opened

	mu   sync.Mutex
	imm  *sql.DB // nil when opened on a file in use
	live *sql.DB // nil until needed
}

// The read-only modes of DB.
const (
	immutable = "mode=ro&immutable=1"
	live      = "mode=ro&_pragma=busy_timeout(10000)"
)

// Open opens the database at path for reading; it reads nothing yet, and a
// missing file gives an error on the first read, not a new database. Close
// it when done.
func Open(path string) (*DB, error) {
	d := &DB{path: path}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if inUse(path) {
		d.live, err = sql.Open("sqlite", URI(path, live))
	} else {
		d.open = info
		d.imm, err = sql.Open("sqlite", URI(path, immutable))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotDatabase, err)
	}
	return d, nil
}

// Read runs fn on the database and returns its error. fn may be run twice,
// the second time through the log (see DB), so it must start afresh on each
// call and keep nothing from a run whose result Read did not return.
func (d *DB) Read(fn func(db *sql.DB) error) error {
	d.mu.Lock()
	imm, lv := d.imm, d.live
	d.mu.Unlock()
	if lv != nil {
		return fn(lv)
	}
	err := fn(imm)
	if now, serr := os.Stat(d.path); serr == nil && !inUse(d.path) && unchanged(d.open, now) {
		return err
	}
	d.mu.Lock()
	if d.live == nil {
		d.live, err = sql.Open("sqlite", URI(d.path, live))
	}
	lv = d.live
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNotDatabase, err)
	}
	return fn(lv)
}

// Close closes the database.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, db := range []*sql.DB{d.imm, d.live} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// inUse reports whether path has a write-ahead log or rollback journal
// beside it, which means some process has it open for writing (or had, and
// crashed).
func inUse(path string) bool {
	for _, suffix := range []string{"-wal", "-journal"} {
		if _, err := os.Lstat(path + suffix); err == nil {
			return true
		}
	}
	return false
}

// unchanged reports whether two stats of one file show the same size and
// modification time, so that nothing wrote to it in between as far as the
// file system's clock can tell (one with a coarse clock may miss a write
// within its tick).
func unchanged(before, after fs.FileInfo) bool {
	return os.SameFile(before, after) && before.Size() == after.Size() && before.ModTime().Equal(after.ModTime())
}

// URI returns the SQLite URI of the file at path with the given query,
// escaping what a URI would read otherwise ('?', '#', '%'). A relative path
// stays relative.
func URI(path, query string) string {
	p := filepath.ToSlash(path)
	if filepath.IsAbs(path) && !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows volume: file:/C:/...
	}
	return "file:" + (&url.URL{Path: p}).EscapedPath() + "?" + query
}

// journalMagic starts the header of a rollback journal that is in use.
var journalMagic = []byte{0xd9, 0xd5, 0x05, 0xf9, 0x20, 0xa1, 0x63, 0xd7}

// interruptedCreate reports whether path has a rollback journal beside it
// whose header says the database was empty (0 pages) before the
// transaction it journals: the file was being created when its writer
// died (or is being created now). The journal header holds the initial
// database size in pages at byte 16 (https://www.sqlite.org/fileformat.html,
// "The Rollback Journal").
func interruptedCreate(path string) bool {
	f, err := os.Open(path + "-journal")
	if err != nil {
		return false
	}
	defer f.Close()
	var b [28]byte
	if _, err := io.ReadFull(f, b[:]); err != nil {
		return false
	}
	return bytes.Equal(b[:8], journalMagic) && binary.BigEndian.Uint32(b[16:20]) == 0
}
