CREATE OR REPLACE VIEW committed_records AS
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
    WHERE r.topic_id = b.topic_id AND r."partition" = b."partition"
      -- One lower bound, the later of the run's start and the log start: given two, a
      -- database may range from either, and from the log start it reads every record below
      -- the run.
      AND r."offset" >= GREATEST(b.base_offset, p.log_start_offset)
      AND r."offset" < b.base_offset + b.record_count
    OFFSET 0
) r
WHERE b.commit_position IS NOT NULL
