-- Target names without a credential. The client used to name InvenioRDM's
-- targets "invenio <endpoint>" with the endpoint as given, so an endpoint
-- with ?access_token=... kept the token in every row's target; the client
-- now names every target with the token's digest in its place, as it did
-- already for the others. The program fills renamed_targets (old name, new
-- name) before this runs, for every stored name that holds a credential:
-- SQL alone cannot compute the digest.
--
-- Where both names hold a row for one key, the done row stays (a replay
-- needs its identifier), else the row under the new name. secure_delete
-- overwrites what the old rows held, so the token leaves the file too.
PRAGMA secure_delete = ON;

DELETE FROM records
WHERE (target, key) IN (SELECT n.target, n.key
                        FROM renamed_targets AS m
                        JOIN records AS o ON o.target = m.old
                        JOIN records AS n ON n.target = m.new AND n.key = o.key
                        WHERE o.state = 'done' AND n.state <> 'done');

UPDATE records SET target = (SELECT m.new FROM renamed_targets AS m WHERE m.old = records.target)
WHERE target IN (SELECT old FROM renamed_targets)
  AND (target, key) NOT IN (SELECT m.old, n.key
                            FROM renamed_targets AS m
                            JOIN records AS n ON n.target = m.new);

DELETE FROM records WHERE target IN (SELECT old FROM renamed_targets);

UPDATE settings SET target = (SELECT m.new FROM renamed_targets AS m WHERE m.old = settings.target)
WHERE target IN (SELECT old FROM renamed_targets)
  AND NOT EXISTS (SELECT 1 FROM renamed_targets AS m JOIN settings AS n ON n.target = m.new
                  WHERE m.old = settings.target);

DELETE FROM settings WHERE target IN (SELECT old FROM renamed_targets);

DROP TABLE renamed_targets;

PRAGMA secure_delete = OFF;
