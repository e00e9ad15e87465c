-- Key settings per target, recorded on first use.
CREATE TABLE settings (
    target             TEXT    NOT NULL PRIMARY KEY,
    form               TEXT    NOT NULL,
    ignore_pointers    TEXT    NOT NULL, -- JSON array, sorted
    secret_fingerprint TEXT    NOT NULL,
    created_at         INTEGER NOT NULL  -- unix microseconds
) STRICT;

-- One row per (target, key).
CREATE TABLE records (
    target     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    state      TEXT    NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
    outcome    TEXT    NOT NULL DEFAULT '' CHECK (outcome IN ('', 'created', 'existing')),
    identifier TEXT    NOT NULL DEFAULT '',
    status     INTEGER NOT NULL DEFAULT 0,
    problem    TEXT    NOT NULL DEFAULT '',
    body       BLOB,
    attempts   INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL, -- unix microseconds
    updated_at INTEGER NOT NULL, -- unix microseconds
    PRIMARY KEY (target, key),
    CHECK ((state = 'done') = (outcome <> '' AND identifier <> ''))
) STRICT;

-- Pending and failed rows, for counting and listing them. Done rows, the
-- great majority in a settled store, stay out of it, so confirming a key
-- costs one index entry less.
CREATE INDEX records_unsettled ON records (target, state, key) WHERE state <> 'done';
