package main

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/internal/pgtest"
	"github.com/depositkit/deposit/repotest"
)

// pgPassword returns the password in the URL raw.
func pgPassword(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	pw, ok := u.User.Password()
	require.True(t, ok)
	return pw
}

// TestRunAndStatusOnPostgres runs a batch with its store in PostgreSQL,
// replays it, and reports it, as a user would; the password is in no
// output.
func TestRunAndStatusOnPostgres(t *testing.T) {
	db := pgtest.URL(t) + "&schema=batch"
	secret := pgPassword(t, db)
	srv := newServer(t, repotest.Config{Faults: "drop=0.2,500=0.1", Seed: 5})
	input := writeFile(t, t.TempDir(), "in.jsonl", payloads(30)...)

	var outputs []result
	r := deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
	outputs = append(outputs, r)
	for round := 1; r.code == exitUnresolved && round < 10; round++ {
		r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
		outputs = append(outputs, r)
	}
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, int64(30), srv.Stats().Records)
	require.Equal(t, int64(0), srv.Stats().Duplicates)

	before := srv.Stats().Requests
	r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--json", input)
	outputs = append(outputs, r)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 30, summaryOf(t, r.stdout).Replayed)
	require.Equal(t, before, srv.Stats().Requests, "a replay sends no request")

	r = deposit(t, nil, "status", "--db", db)
	outputs = append(outputs, r)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Contains(t, r.stdout, "30 deposits: 30 done, 0 failed, 0 pending")
	require.Contains(t, r.stdout, "deposit:xxxxx@")
	r = deposit(t, nil, "status", "--db", db, "--list", "--json")
	outputs = append(outputs, r)
	require.Equal(t, exitDone, r.code, r.stderr)
	require.Equal(t, 30, strings.Count(r.stdout, "\n"))

	r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", db, "--form", "python", input)
	outputs = append(outputs, r)
	require.Equal(t, exitStop, r.code, "other key settings are refused")
	require.Contains(t, r.stderr, "deposit:xxxxx@")

	for _, o := range outputs {
		require.NotContains(t, o.stdout+o.stderr, secret)
	}
}

func TestStoreErrorsOnPostgresNeverShowThePassword(t *testing.T) {
	good := pgtest.URL(t)
	secret := pgPassword(t, good)
	u, err := url.Parse(good)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "wrong-"+secret)
	srv := newServer(t, repotest.Config{})
	input := writeFile(t, t.TempDir(), "in.jsonl", payloads(1)...)
	conn, err := pgx.Connect(context.Background(), good)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "CREATE SCHEMA billing; CREATE TABLE billing.invoices (id int)")
	require.NoError(t, err)

	tests := []struct {
		name, db string
		want     string
	}{
		{"a wrong password", u.String(), "password authentication failed"},
		{"another program's schema", good + "&schema=billing", "not a deposit store (left untouched): name a new schema"},
		{"a schema name that is refused", good + "&schema=pg_toast", "schema="},
		{"a missing schema, for status", good + "&schema=nothing_here", "nothing was deposited"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := deposit(t, nil, "status", "--db", tt.db)
			require.Equal(t, exitStop, r.code)
			require.Contains(t, r.stderr, tt.want)
			require.NotContains(t, r.stdout+r.stderr, secret)
			if tt.name == "a missing schema, for status" {
				return
			}
			r = deposit(t, nil, "run", "--endpoint", srv.URL, "--db", tt.db, input)
			require.Equal(t, exitStop, r.code)
			require.NotContains(t, r.stdout+r.stderr, secret)
		})
	}
}

func TestShowDB(t *testing.T) {
	for in, want := range map[string]string{
		"deposit.db":                        "deposit.db",
		filepath.Join("a", "b.db"):          filepath.Join("a", "b.db"),
		"postgres://u:pw@h/db?schema=s":     "postgres://u:xxxxx@h/db?schema=s",
		"postgresql://h/db?password=pw":     "postgresql://h/db?password=xxxxx",
		"postgres://u:pw@h:notaport/db":     "postgres://(an unreadable URL)",
		"postgres://u@h/db?sslmode=require": "postgres://u@h/db?sslmode=require",
	} {
		require.Equal(t, want, showDB(in), in)
	}
}
