package dedup

import (
	"context"
	"database/sql"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/depositkit/deposit/internal/credential"
)

// targetNamesSuffix ends the name of the migration that renames targets
// holding a credential (0005 in SQLite, 0003 in PostgreSQL). The program
// fills its table renamed_targets first: SQL alone cannot compute the
// credential's digest.
const targetNamesSuffix = "_target_names.sql"

// renamesTargets reports whether migration m is the one that renames
// targets.
func renamesTargets(m migration) bool { return strings.HasSuffix(m.name, targetNamesSuffix) }

// credentialFree returns each of names that holds a credential in its
// endpoint's query, mapped to the name with the credential's digest in its
// place: the name the client gives that target now.
func credentialFree(names []string) map[string]string {
	renamed := map[string]string{}
	for _, n := range names {
		if d := credential.Digest(n); d != n {
			renamed[n] = d
		}
	}
	return renamed
}

// sqlStoredTargets is every target name a store holds. The settings table
// names each target that has rows (and holds few rows), but a row may
// predate its settings.
const sqlStoredTargets = `SELECT target FROM settings UNION SELECT DISTINCT target FROM records`

// fillRenamedTargetsSQLite creates and fills renamed_targets in tx and
// returns how many names it holds.
func fillRenamedTargetsSQLite(ctx context.Context, tx *sql.Tx) (int, error) {
	rows, err := tx.QueryContext(ctx, sqlStoredTargets)
	if err != nil {
		return 0, err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return 0, err
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE renamed_targets (old TEXT NOT NULL PRIMARY KEY, new TEXT NOT NULL) STRICT`); err != nil {
		return 0, err
	}
	renamed := credentialFree(names)
	for old, n := range renamed {
		if _, err := tx.ExecContext(ctx, `INSERT INTO renamed_targets (old, new) VALUES (?, ?)`, old, n); err != nil {
			return 0, err
		}
	}
	return len(renamed), nil
}

// fillRenamedTargetsPostgres creates and fills renamed_targets in tx, a
// temporary table dropped at commit.
func fillRenamedTargetsPostgres(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, sqlStoredTargets)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `CREATE TEMPORARY TABLE renamed_targets (old text COLLATE "C" PRIMARY KEY, new text COLLATE "C" NOT NULL) ON COMMIT DROP`); err != nil {
		return err
	}
	for old, n := range credentialFree(names) {
		if _, err := tx.Exec(ctx, `INSERT INTO renamed_targets (old, new) VALUES ($1, $2)`, old, n); err != nil {
			return err
		}
	}
	return nil
}
