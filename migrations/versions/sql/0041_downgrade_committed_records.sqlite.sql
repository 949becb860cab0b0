CREATE VIEW committed_records AS
-- Read_committed over batch rows (docs/DESIGN-batches.md): a committed batch is one with a
-- commit position; a plain batch's record is exposed at its own offset, a transactional
-- batch's at the batch's position (its COMMIT marker's offset); a marker's row has no position,
-- so a marker is never data. batch_position is the batch's own position: a reader bounds it
-- as well as commit_position, because a bound on commit_position (a CASE over both tables)
-- is only a filter, and alone it walks every committed batch of the partition.
SELECT t.name AS topic, p.topic_id, p."partition", r."offset",
       CASE WHEN b.txn_id IS NULL THEN r."offset" ELSE b.commit_position END AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, b.producer_id,
       b.txn_id IS NOT NULL AS transactional, r.key_bytes, r.value_bytes,
       b.commit_position AS batch_position
FROM topics t
-- The topic and partition are the partition row's, the outer table, so a reader's conditions
-- on them pick it by its primary key. CROSS JOIN, which SQLite never reorders: partition, then
-- its committed batches (ix_record_batches_committed), then each batch's run by the records'
-- primary key; the other way round it would read the whole partition per batch.
JOIN partitions p ON p.topic_id = t.topic_id
CROSS JOIN record_batches b
  ON b.topic_id = p.topic_id AND b."partition" = p."partition" AND b.commit_position IS NOT NULL
CROSS JOIN records r
  ON r.topic_id = b.topic_id AND r."partition" = b."partition"
 -- One lower bound, the later of the run's start and the log start: given two, SQLite ranges
 -- from one of them only, and from the log start it reads every record below the run.
 AND r."offset" >= max(b.base_offset, p.log_start_offset)
 AND r."offset" < b.base_offset + b.record_count
