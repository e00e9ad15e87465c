-- A lease per row: the process that claimed the key and when that claim
-- ends unless renewed (unix microseconds; 0 with no owner). Adding columns
-- with constant defaults rewrites no row, so this costs the same on a
-- store of any size.
ALTER TABLE records ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN lease_expires INTEGER NOT NULL DEFAULT 0;
