-- What a scan of a target's server found, for a target that arbitrates
-- nothing (InvenioRDM): a store that holds no scanned mark for the target
-- scans the server once and keeps every record found with a deposit's
-- marker, together with the mark, in one transaction. A deposit derives
-- its rows from them when it first meets its key.
--
-- One row per scan target: its lease while a process scans (the owner and
-- when the claim ends unless renewed, unix microseconds), and scanned_at
-- once the scan is kept (0 before).
CREATE TABLE scans (
    target        TEXT    NOT NULL PRIMARY KEY,
    scanned_at    INTEGER NOT NULL DEFAULT 0,
    lease_owner   TEXT    NOT NULL DEFAULT '',
    lease_expires INTEGER NOT NULL DEFAULT 0
) STRICT;

-- The records a kept scan found: marker -> record id, published or a
-- draft, and the identifier it was published with ('' if none).
CREATE TABLE scan_found (
    target    TEXT    NOT NULL,
    marker    TEXT    NOT NULL,
    record_id TEXT    NOT NULL,
    published INTEGER NOT NULL CHECK (published = 0 OR published = 1),
    pid       TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (target, marker, record_id)
) STRICT;
