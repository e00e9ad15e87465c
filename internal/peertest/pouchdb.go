package peertest

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pouchDatabase is the database that PouchDB creates for a test.
const pouchDatabase = "deposit"

// PouchDB starts pouchdb-server (npm package pouchdb-server) for tb, creates
// an empty database and returns the database's URL,
// "http://127.0.0.1:PORT/deposit"; the server's CouchDB API is at the URL
// without its last segment.
//
// A PUT of a JSON document to {db}/{id} answers 201 with
// {"ok":true,"id":...,"rev":...}; a second PUT to the same id without its
// revision answers 409 {"error":"conflict"}.
//
// The server keeps its databases on disk (LevelDB) in a temporary
// directory, with its configuration and log file beside them.
func PouchDB(tb testing.TB) string {
	tb.Helper()
	l, err := pouchLaunch(peerDir(tb, "pouchdb"))
	check(tb, err)
	db := serve(tb, l) + "/" + pouchDatabase
	check(tb, createDatabase(db))
	return db
}

// pouchLaunch finds pouchdb-server and describes its start in dir.
func pouchLaunch(dir string) (launch, error) {
	bin, err := lookPath("npm package pouchdb-server", "pouchdb-server")
	if err != nil {
		return launch{}, err
	}
	// The program is a node script.
	if _, err := exec.LookPath("node"); err != nil {
		return launch{}, fmt.Errorf("%w: pouchdb-server needs node: %w", errUnavailable, err)
	}
	args := func(port int) ([]string, error) {
		return []string{
			"--host", "127.0.0.1",
			"--port", fmt.Sprint(port),
			"--dir", filepath.Join(dir, "data"),
			"--config", filepath.Join(dir, "config.json"),
			"--no-color",
		}, nil
	}
	return launch{name: "pouchdb-server", bin: bin, dir: dir, args: args}, nil
}

// createDatabase creates the CouchDB database at url.
func createDatabase(url string) error {
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: readyWithin}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("create database %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, logTail))
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("create database %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
