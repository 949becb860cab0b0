-- Migration 0023's downgrade, on both databases: the per-record producer columns written back
-- from the batch rows, as the writers before 0023 wrote them. Frozen: what record_batches and
-- records held when 0023 was written.
--
-- Every record of a batch with a producer (and every marker, whose batch row names the
-- producer and the transaction it ends) takes the batch's producer id, epoch and transaction,
-- and its sequence base_sequence + (offset - base_offset): NULL for a marker, which has none.
-- A plain producer's batch has nothing to write.
UPDATE records SET producer_id = b.producer_id,
                   producer_epoch = b.producer_epoch,
                   sequence = b.base_sequence + (records."offset" - b.base_offset),
                   txn_id = b.txn_id
FROM record_batches b
WHERE b.topic_id = records.topic_id AND b."partition" = records."partition"
  AND records."offset" >= b.base_offset AND records."offset" < b.base_offset + b.record_count
  AND (b.producer_id IS NOT NULL OR b.txn_id IS NOT NULL)
---
-- Each transactional batch's head: its first record still stored carries the count of the
-- rest of its run, [head, base_offset + record_count), as the cleaner before 0023 kept it
-- when compaction or a log start took the batch's first records. Without a head the code and
-- the views before 0020 (which a further downgrade brings back) would never find the run.
UPDATE records SET batch_record_count = b.base_offset + b.record_count - records."offset"
FROM record_batches b
WHERE b.txn_id IS NOT NULL AND b.control_type IS NULL
  AND b.topic_id = records.topic_id AND b."partition" = records."partition"
  AND records."offset" = (
      SELECT min(r."offset") FROM records r
      WHERE r.topic_id = b.topic_id AND r."partition" = b."partition"
        AND r."offset" >= b.base_offset AND r."offset" < b.base_offset + b.record_count)
