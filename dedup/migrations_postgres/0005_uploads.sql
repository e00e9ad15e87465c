-- Uploads in parts and their confirmed parts; see the SQLite migration
-- 0007_uploads.sql for what each column means.
CREATE TABLE uploads (
    target     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    upload     text        NOT NULL CHECK (upload <> ''),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (target, key)
);

CREATE TABLE upload_parts (
    target text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    part   integer NOT NULL CHECK (part >= 1),
    tag    text    NOT NULL,
    PRIMARY KEY (target, key, part),
    FOREIGN KEY (target, key) REFERENCES uploads (target, key) ON DELETE CASCADE
);
