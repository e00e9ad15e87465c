-- Uploads in parts (driver.Parts): the upload a step began on the server,
-- journaled before its first part, by the step's own name (target, key),
-- and the tag of each part the server confirmed. A step's upload and its
-- parts are removed once the upload is completed or aborted.
CREATE TABLE uploads (
    target     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    upload     TEXT    NOT NULL CHECK (upload <> ''),
    created_at INTEGER NOT NULL, -- unix microseconds
    PRIMARY KEY (target, key)
) STRICT;

CREATE TABLE upload_parts (
    target TEXT    NOT NULL,
    key    TEXT    NOT NULL,
    part   INTEGER NOT NULL CHECK (part >= 1),
    tag    TEXT    NOT NULL,
    PRIMARY KEY (target, key, part),
    FOREIGN KEY (target, key) REFERENCES uploads (target, key) ON DELETE CASCADE
) STRICT;
