-- Tables are created in the store's schema: the migration runs with
-- search_path set to it alone.

-- The marker: a schema holding this table (with this row) is a deposit
-- store. Any other schema with something in it is refused, untouched.
CREATE TABLE deposit_store (
    format text PRIMARY KEY CHECK (format = 'deposit dedup store')
);
INSERT INTO deposit_store (format) VALUES ('deposit dedup store');

-- The migrations applied; the schema version is the highest.
CREATE TABLE schema_migrations (
    version    integer     NOT NULL PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Key settings per target, recorded on first use.
CREATE TABLE settings (
    target             text COLLATE "C" NOT NULL PRIMARY KEY,
    form               text        NOT NULL,
    ignore_pointers    text        NOT NULL, -- JSON array, sorted
    secret_fingerprint text        NOT NULL,
    created_at         timestamptz NOT NULL
);

-- One row per (target, key), in byte order ("C" collation) as in SQLite,
-- whatever the database's locale. Times are the server's clock; a lease is
-- its owner and when it ends unless renewed (both empty when released).
CREATE TABLE records (
    target        text COLLATE "C" NOT NULL,
    key           text COLLATE "C" NOT NULL,
    state         text        NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
    outcome       text        NOT NULL DEFAULT '' CHECK (outcome IN ('', 'created', 'existing')),
    identifier    text        NOT NULL DEFAULT '',
    status        integer     NOT NULL DEFAULT 0,
    problem       text        NOT NULL DEFAULT '',
    body          bytea,
    attempts      integer     NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    -- The key's last claimer, and when its lease ends (NULL once
    -- released, or never claimed).
    lease_owner   text        NOT NULL DEFAULT '',
    lease_expires timestamptz,
    PRIMARY KEY (target, key),
    CHECK ((state = 'done') = (outcome <> '' AND identifier <> '')),
    CHECK (lease_owner <> '' OR lease_expires IS NULL)
);

-- Pending and failed rows, for counting and listing them; done rows, the
-- great majority in a settled store, stay out of it.
CREATE INDEX records_unsettled ON records (target, state, key) WHERE state <> 'done';
