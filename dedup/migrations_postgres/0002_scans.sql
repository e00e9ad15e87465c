-- Placeholder: version 2 is the recovery scan tables, which another change
-- adds under this name; it keeps the numbering contiguous until then.
SELECT 1;
