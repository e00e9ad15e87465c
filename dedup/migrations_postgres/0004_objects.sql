-- Objects and their versions; see the SQLite migration 0006_objects.sql
-- for what each column means. Times are the server's clock; where SQLite
-- stores 0 for no time (pending_since without an update in flight), this
-- stores NULL. An object row is written only with the version the server
-- confirmed and the record's identifier, so neither is ever empty.
CREATE TABLE objects (
    target        text COLLATE "C" NOT NULL,
    key           text COLLATE "C" NOT NULL,
    identifier    text        NOT NULL CHECK (identifier <> ''),
    version       text        NOT NULL CHECK (version <> ''),
    tag           text        NOT NULL DEFAULT '',
    ord           text        NOT NULL DEFAULT '',
    applied_at    timestamptz NOT NULL,
    pending       text        NOT NULL DEFAULT '',
    pending_ord   text        NOT NULL DEFAULT '',
    pending_since timestamptz,
    updates       integer     NOT NULL DEFAULT 0 CHECK (updates >= 0),
    stale         integer     NOT NULL DEFAULT 0 CHECK (stale >= 0),
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    PRIMARY KEY (target, key),
    CHECK ((pending = '') = (pending_since IS NULL)),
    CHECK (pending <> '' OR pending_ord = '')
);

-- Every version an object was given: done once the server confirmed it,
-- failed with the server's answer when it refused it for good.
CREATE TABLE object_versions (
    target  text COLLATE "C" NOT NULL,
    object  text COLLATE "C" NOT NULL,
    version text COLLATE "C" NOT NULL,
    state   text        NOT NULL CHECK (state IN ('done', 'failed')),
    ord     text        NOT NULL DEFAULT '',
    status  integer     NOT NULL DEFAULT 0,
    problem text        NOT NULL DEFAULT '',
    at      timestamptz NOT NULL,
    PRIMARY KEY (target, object, version),
    CHECK (state = 'failed' OR (status = 0 AND problem = ''))
);

-- The identity pointers join a target's key settings, in their order (the
-- object key depends on it); '[]' is no identity, as every store written
-- before had.
ALTER TABLE settings ADD COLUMN identity_pointers text NOT NULL DEFAULT '[]'; -- JSON array, in order
