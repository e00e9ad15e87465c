-- A lease per row: the process that claimed the key last and when that
-- claim ends unless renewed (unix microseconds; 0 once released, or never
-- claimed). Adding columns with constant defaults rewrites no row, but
-- SQLite checks a STRICT table after each column added (a quick_check of
-- the table): about 5 s once on a store of 1M rows.
ALTER TABLE records ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN lease_expires INTEGER NOT NULL DEFAULT 0;
