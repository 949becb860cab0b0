ALTER TABLE partitions ADD COLUMN has_holes boolean NOT NULL DEFAULT false
---
-- A partition whose runs from the log start on hold fewer records than offsets: every record
-- lies in one batch row's run, so the two counts differ exactly where a run has a hole.
UPDATE partitions p SET has_holes = true
WHERE (SELECT count(*) FROM records r
       WHERE r.topic_id = p.topic_id AND r."partition" = p."partition" AND r."offset" >= p.log_start_offset)
   <> (SELECT coalesce(sum(b.base_offset + b.record_count - greatest(b.base_offset, p.log_start_offset)), 0)
       FROM record_batches b
       WHERE b.topic_id = p.topic_id AND b."partition" = p."partition"
         AND b.base_offset + b.record_count > p.log_start_offset)
