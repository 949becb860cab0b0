-- One text, rendered twice by migrations (migrations/sql_files.py's render, its markers given
-- values by the migration): the view `committed_records` of every log partition (the run's
-- topic and partition the batch row's own columns, no bound on the batch rows), and each log
-- partition's view committed_records.partition_<topic_id>_<partition>, which
-- outbox.create_partition_view makes with the partition's leaf (the partition's numbers
-- written in, on the self-committed records, on the run and on the batch rows). A partition's
-- view names its leaf in its text, so its plan holds that leaf alone whatever its reader gives;
-- the view of every partition learns a batch's partition only as it runs, so its plan holds and
-- locks every leaf (docs/DESIGN-partitioned-records.md, "A view of each log partition").
--
-- A partition's view also has its topic's name written in (a topic is never renamed; a topic id
-- created again after a test's reset has its partitions' views made again with it) and reads
-- the log start as one lookup of the partition's row, a subquery run once per query: its
-- self-committed records are then its leaf's range alone, joined to nothing, and a reader's
-- bounds on batch_position bound that range of the leaf's primary key. The view of every
-- partition joins `topics` and `partitions` there instead, and `topics` for its batch rows.
CREATE OR REPLACE VIEW @view@ AS
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
-- batch row to descend to per record; an idempotent batch's records carry its producer id
-- (NULL for the others). Atomic visibility holds as for any row: a snapshot sees the whole
-- batch or none of it. Only such records are flagged: a transactional batch's records exist
-- before their commit.
SELECT @topic@ AS topic, r.topic_id, r."partition", r."offset",
       r."offset" AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, r.producer_id,
       false AS transactional, r.key_bytes, r.value_bytes,
       r."offset" AS batch_position
FROM records r@records_joins@
WHERE r.self_committed AND r."offset" >= @log_start@@records_of_partition@
UNION ALL
-- 2. Every other committed record, through its batch row: a committed batch is one with a
-- commit position; a plain batch's record is exposed at its own offset, a transactional
-- batch's at the batch's position (its COMMIT marker's offset); a marker's row has no position,
-- so a marker is never data. Plain batches written before 0041 and idempotent ones written
-- before 0044 (or by a process older than it) are not flagged and are read here, as they
-- always were. batch_position is the batch's own position: a reader bounds it as well as
-- commit_position, because a bound on commit_position (a CASE over both tables) is only a
-- filter, and alone it walks every committed batch of the partition
-- (ix_record_batches_committed_joined holds the batches read here, in that order).
SELECT @topic@ AS topic, b.topic_id, b."partition", r."offset",
       CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, b.producer_id,
       b.txn_id IS NOT NULL AS transactional, r.key_bytes, r.value_bytes,
       b.commit_position AS batch_position
-- The partition's row is joined here in both views (one row, before the batches): a batch of a
-- partition whose row is gone (a deleted topic's, awaiting its purge) is then read by neither.
FROM record_batches b@batches_topic_join@
JOIN partitions p ON p.topic_id = b.topic_id AND p."partition" = b."partition"
-- LATERAL … OFFSET 0: batch first, then its run, whatever the statistics say; planned the other
-- way round (a partition just filled, no statistics) a join reads the whole partition per batch.
CROSS JOIN LATERAL (
    SELECT r."offset", r.timestamp_ms, r.key, r.value, r.headers, r.key_bytes, r.value_bytes FROM records r
    WHERE r.topic_id = @topic_id@ AND r."partition" = @partition@
      -- One lower bound, the later of the run's start and the log start: given two, a
      -- database may range from either, and from the log start it reads every record below
      -- the run.
      AND r."offset" >= GREATEST(b.base_offset, p.log_start_offset)
      AND r."offset" < b.base_offset + b.record_count
    OFFSET 0
) r
WHERE b.commit_position IS NOT NULL AND NOT b.self_committed@of_partition@
