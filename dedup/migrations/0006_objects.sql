-- Objects: payloads named by an identity, one record each, whose content
-- changes. One row per (target, object key): the identifier of its record,
-- the version (content key) the server holds as last confirmed, that
-- version's tag on the server (an ETag, a revision; '' when unknown) and
-- its version-pointer value ('' without one), when it was applied, and the
-- update in flight (pending: its content key, '' when none), recorded
-- before its first request. updates counts versions applied after the
-- first; stale the lines refused as older than the version held.
CREATE TABLE objects (
    target        TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    identifier    TEXT    NOT NULL DEFAULT '',
    version       TEXT    NOT NULL DEFAULT '',
    tag           TEXT    NOT NULL DEFAULT '',
    ord           TEXT    NOT NULL DEFAULT '',
    applied_at    INTEGER NOT NULL DEFAULT 0, -- unix microseconds
    pending       TEXT    NOT NULL DEFAULT '',
    pending_ord   TEXT    NOT NULL DEFAULT '',
    pending_since INTEGER NOT NULL DEFAULT 0,
    updates       INTEGER NOT NULL DEFAULT 0,
    stale         INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (target, key)
) STRICT;

-- Every version an object was given: done once the server confirmed it
-- (the history that makes an old content stale), failed with the server's
-- answer when it refused it for good.
CREATE TABLE object_versions (
    target  TEXT    NOT NULL,
    object  TEXT    NOT NULL,
    version TEXT    NOT NULL,
    state   TEXT    NOT NULL CHECK (state IN ('done', 'failed')),
    ord     TEXT    NOT NULL DEFAULT '',
    status  INTEGER NOT NULL DEFAULT 0,
    problem TEXT    NOT NULL DEFAULT '',
    at      INTEGER NOT NULL, -- unix microseconds
    PRIMARY KEY (target, object, version)
) STRICT;

-- The identity pointers join a target's key settings: in their order, for
-- the object key depends on it. '[]' is no identity, as every store written
-- before had.
ALTER TABLE settings ADD COLUMN identity_pointers TEXT NOT NULL DEFAULT '[]';
