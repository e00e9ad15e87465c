package dedup

import "path/filepath"

// SQLiteFiles returns the paths that the SQLite store at path writes to:
// the file itself, SQLite's -wal, -shm and -journal files beside it, and
// the folder of owner locks (-owners, owner_lock.go) with every file in it.
// Where path is a symbolic link, the paths beside the file it names follow,
// for SQLite and the owner locks keep theirs there
// (https://sqlite.org/tempfiles.html names the first three). None of them
// need exist. A caller about to write a file of its own (a report, a log)
// checks it against these, so that it never overwrites the store.
func SQLiteFiles(path string) []string {
	names := []string{path}
	if real, err := filepath.EvalSymlinks(path); err == nil && real != path {
		names = append(names, real)
	}
	var out []string
	for _, p := range names {
		out = append(out, p, p+"-wal", p+"-shm", p+"-journal", p+"-owners")
	}
	return out
}
