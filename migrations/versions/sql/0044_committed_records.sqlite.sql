CREATE VIEW committed_records AS
-- Read_committed over batch rows (docs/DESIGN-batches.md), in two parts with the same columns,
-- which never hold the same record: a record is read by the first part exactly when it is
-- flagged self_committed, by the second exactly when its batch row is not, and a batch and its
-- records are flagged together or not at all (tests/batch_rows.py checks it after every storage
-- test).
--
-- 1. Self-committed records ("Self-committed records" in docs/DESIGN-batches.md): those of a
-- batch in no transaction, written since migration 0041 (with no producer) or 0044 (an
-- idempotent producer's). Such a batch's row, its records (and an idempotent one's sequence
-- state) are written in one database transaction, and its records are committed at their own
-- offsets, so a record that exists is committed, at its offset: it is read as one range of
-- `records` (a reader's bound on batch_position is a bound of the primary key's range), with no
-- batch row to look up per record; an idempotent batch's records carry its producer id (NULL
-- for the others). Atomic visibility holds as for any row: a reader sees the whole batch or
-- none of it. Only such records are flagged: a transactional batch's records exist before
-- their commit.
--
-- Each column has the same affinity in both parts (producer_id a BIGINT column in both,
-- commit_position CAST AS INTEGER): SQLite flattens a UNION ALL into the query that reads it only then, and only
-- flattened does a reader's condition holding a subquery (Spark's bound on batch_position,
-- spark_jobs/reader/statement.py) bound each part's index range; otherwise it is a filter
-- over every batch from the window's start to the partition's end.
SELECT t.name AS topic, p.topic_id, p."partition", r."offset",
       r."offset" AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, r.producer_id,
       FALSE AS transactional, r.key_bytes, r.value_bytes,
       r."offset" AS batch_position
FROM topics t
-- Partition, then its records by the primary key (CROSS JOIN, which SQLite never reorders).
JOIN partitions p ON p.topic_id = t.topic_id
CROSS JOIN records r
  ON r.topic_id = p.topic_id AND r."partition" = p."partition"
 -- The log start is a filter here, never a lower bound of the primary key's range (the unary
 -- +): a reader's bound on batch_position is a second lower bound on r."offset", and SQLite
 -- ranges from one of the two only; from the log start it would walk every record up to the
 -- reader's window.
 AND r.self_committed AND +r."offset" >= p.log_start_offset
UNION ALL
-- 2. Every other committed record, through its batch row: a committed batch is one with a
-- commit position; a plain batch's record is exposed at its own offset, a transactional
-- batch's at the batch's position (its COMMIT marker's offset); a marker's row has no position,
-- so a marker is never data. Plain batches written before 0041 and idempotent ones written
-- before 0044 (or by a process older than it) are not flagged and are read here, as they
-- always were. batch_position is the batch's own position: a reader bounds it as well as
-- commit_position, because a bound on commit_position (a CASE over both tables) is only a
-- filter, and alone it walks every committed batch of the partition.
SELECT t.name AS topic, p.topic_id, p."partition", r."offset",
       CAST(CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END AS INTEGER) AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, b.producer_id,
       b.txn_id IS NOT NULL AS transactional, r.key_bytes, r.value_bytes,
       b.commit_position AS batch_position
FROM topics t
-- The topic and partition are the partition row's, the outer table, so a reader's conditions
-- on them pick it by its primary key. CROSS JOIN, which SQLite never reorders: partition, then
-- its committed batches not flagged (ix_record_batches_committed_joined), then each batch's run
-- by the records' primary key; the other way round it would read the whole partition per batch.
JOIN partitions p ON p.topic_id = t.topic_id
CROSS JOIN record_batches b
  ON b.topic_id = p.topic_id AND b."partition" = p."partition" AND b.commit_position IS NOT NULL
 AND NOT b.self_committed
CROSS JOIN records r
  ON r.topic_id = b.topic_id AND r."partition" = b."partition"
 -- One lower bound, the later of the run's start and the log start: given two, SQLite ranges
 -- from one of them only, and from the log start it reads every record below the run.
 AND r."offset" >= max(b.base_offset, p.log_start_offset)
 AND r."offset" < b.base_offset + b.record_count
