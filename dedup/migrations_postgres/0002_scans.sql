-- What a scan of a target's server found; see the SQLite migration
-- 0004_scans.sql. Times are the server's clock; a lease is its owner and
-- when it ends unless renewed (empty and NULL when none).
CREATE TABLE scans (
    target        text COLLATE "C" NOT NULL PRIMARY KEY,
    scanned_at    timestamptz,
    lease_owner   text        NOT NULL DEFAULT '',
    lease_expires timestamptz
);

CREATE TABLE scan_found (
    target    text COLLATE "C" NOT NULL,
    marker    text COLLATE "C" NOT NULL,
    record_id text COLLATE "C" NOT NULL,
    published boolean     NOT NULL,
    pid       text        NOT NULL DEFAULT '',
    PRIMARY KEY (target, marker, record_id)
);
