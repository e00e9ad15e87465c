package pgtest

import (
	"context"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := Stop(); err != nil {
		println("pgtest:", err.Error())
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func TestEachURLIsAnEmptyDatabaseOfItsOwn(t *testing.T) {
	ctx := context.Background()
	first, second := URL(t), URL(t)
	require.NotEqual(t, first, second)

	a, err := pgx.Connect(ctx, first)
	require.NoError(t, err)
	defer a.Close(ctx)
	_, err = a.Exec(ctx, "CREATE TABLE t (x int)")
	require.NoError(t, err)

	b, err := pgx.Connect(ctx, second)
	require.NoError(t, err)
	defer b.Close(ctx)
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n))
	require.Equal(t, 0, n, "a table of the first database is not in the second")
}

func TestServerAsksForThePassword(t *testing.T) {
	ctx := context.Background()
	u, err := url.Parse(URL(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "wrong")
	_, err = pgx.Connect(ctx, u.String())
	require.ErrorContains(t, err, "password authentication failed")
}

func TestServerKeepsDefaultDurability(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, URL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	for name, want := range map[string]string{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"} {
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got))
		require.Equal(t, want, got, name)
	}
}
