-- One text, rendered twice by migrations (migrations/sql_files.py's render, its markers given
-- values by the migration): the view `committed_records` of every log partition (the run's
-- topic and partition the batch row's own columns, no bound on the batch rows), and each log
-- partition's view committed_records.partition_<topic_id>_<partition>, which
-- outbox.create_partition_view makes with the partition's leaf (the partition's numbers
-- written in, on the run and on the batch rows). A partition's view names its leaf in its
-- text, so its plan holds that leaf alone whatever its reader gives; the view of every
-- partition learns a batch's partition only as it runs, so its plan holds and locks every leaf
-- (docs/DESIGN-partitioned-records.md, "A view of each log partition").
CREATE OR REPLACE VIEW @view@ AS
-- Read_committed over batch rows (docs/DESIGN-batches.md): a committed batch is one with a
-- commit position; a plain batch's record is exposed at its own offset, a transactional
-- batch's at the batch's position (its COMMIT marker's offset); a marker's row has no position,
-- so a marker is never data. batch_position is the batch's own position: a reader bounds it
-- as well as commit_position, because a bound on commit_position (a CASE over both tables)
-- is only a filter, and alone it walks every committed batch of the partition.
SELECT t.name AS topic, b.topic_id, b."partition", r."offset",
       CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, b.producer_id,
       b.txn_id IS NOT NULL AS transactional, r.key_bytes, r.value_bytes,
       b.commit_position AS batch_position
FROM record_batches b
JOIN topics t ON t.topic_id = b.topic_id
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
WHERE b.commit_position IS NOT NULL@of_partition@
