package repotest

import (
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDurableRecordsSurviveARestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "serve.db")
	s := startServer(t, Config{DBPath: db, Seed: 3})
	created := mustSend(t, s.Client(), "PUT", s.URL+"/old", `{"title":"a"}`, inm, "*")
	require.Equal(t, http.StatusCreated, created.status)
	id := field(t, created.body, "identifier")
	before := s.Records()
	s.Close()

	s = startServer(t, Config{DBPath: db, Seed: 3})
	c := s.Client()
	require.Equal(t, before, s.Records())
	require.Equal(t, int64(1), s.Stats().Records)
	require.Equal(t, http.StatusPreconditionFailed, mustSend(t, c, "PUT", s.URL+"/old", `{"title":"a"}`, inm, "*").status)
	read := mustSend(t, c, "GET", s.URL+"/old", "")
	require.Equal(t, http.StatusOK, read.status)
	require.Equal(t, id, field(t, read.body, "identifier"))

	fresh := mustSend(t, c, "PUT", s.URL+"/new", `{"title":"b"}`, inm, "*")
	require.Equal(t, http.StatusCreated, fresh.status)
	require.NotEqual(t, id, field(t, fresh.body, "identifier"))
	require.Equal(t, int64(2), s.Stats().Records)
	require.Equal(t, int64(0), s.Stats().Duplicates)
}

func TestDurableDeleteOutlivesARestartAndFreesNoIdentifier(t *testing.T) {
	db := filepath.Join(t.TempDir(), "serve.db")
	s := startServer(t, Config{DBPath: db, Seed: 3})
	c := s.Client()
	kept := mustSend(t, c, "PUT", s.URL+"/kept", `{"title":"a"}`, inm, "*")
	removed := mustSend(t, c, "PUT", s.URL+"/removed", `{"title":"b"}`, inm, "*")
	require.Equal(t, http.StatusNoContent, mustSend(t, c, "DELETE", s.URL+"/removed", "").status)
	s.Close()

	s = startServer(t, Config{DBPath: db, Seed: 3})
	c = s.Client()
	require.Len(t, s.Records(), 1)
	require.Equal(t, field(t, kept.body, "identifier"), s.Records()[0].Identifier)
	requireProblem(t, http.StatusNotFound, mustSend(t, c, "GET", s.URL+"/removed", ""))
	// The deleted record held the last number: a new one must not get its identifier.
	fresh := mustSend(t, c, "PUT", s.URL+"/fresh", `{"title":"c"}`, inm, "*")
	require.Equal(t, http.StatusCreated, fresh.status)
	require.NotEqual(t, field(t, removed.body, "identifier"), field(t, fresh.body, "identifier"))
	require.Equal(t, int64(2), s.Stats().Records)
}

func TestDurableIdempotencyKeyStillReplaysAfterARestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "serve.db")
	cfg := Config{Protocol: ProtocolIdempotencyKey, DBPath: db}
	s := startServer(t, cfg)
	miss := mustSend(t, s.Client(), "POST", s.URL, `{"a":1}`, ik, `"k"`)
	require.Equal(t, "miss", miss.header.Get("Idempotency-Key-Reply"))
	s.Close()

	s = startServer(t, cfg)
	hit := mustSend(t, s.Client(), "POST", s.URL, `{"a":1}`, ik, `"k"`)
	require.Equal(t, "hit", hit.header.Get("Idempotency-Key-Reply"))
	require.Equal(t, miss.body, hit.body)
	requireProblem(t, http.StatusUnprocessableEntity, mustSend(t, s.Client(), "POST", s.URL, `{"a":2}`, ik, `"k"`))
}

func TestDurableRefusesAFileThatIsNotItsOwn(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("not a database at all, but long enough to have a header of a hundred bytes........................"), 0o600))

	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE things (x INTEGER)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	stamped := filepath.Join(dir, "stamped.db")
	db, err = sql.Open("sqlite", stamped)
	require.NoError(t, err)
	_, err = db.Exec(`PRAGMA application_id = 1234`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	// Another program's database in WAL mode, closed cleanly: reading it
	// through SQLite's read-only mode would leave -wal and -shm files.
	walOther := filepath.Join(dir, "wal-other.db")
	db, err = sql.Open("sqlite", walOther+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE things (x INTEGER)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	for _, path := range []string{text, other, stamped, walOther} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			_, err = NewHandler(Config{DBPath: path})
			require.ErrorIs(t, err, ErrNotServerStore)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, want, got)
			for _, suffix := range []string{"-wal", "-shm", "-journal"} {
				require.NoFileExists(t, path+suffix, "nothing is created beside the file")
			}
		})
	}
}

func TestDurableAcceptsAnEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	s := startServer(t, Config{DBPath: path})
	require.Equal(t, http.StatusCreated, mustSend(t, s.Client(), "PUT", s.URL+"/k", `{}`, inm, "*").status)
}
