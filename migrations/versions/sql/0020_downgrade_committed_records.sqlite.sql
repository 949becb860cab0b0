CREATE VIEW committed_records AS
SELECT t.name AS topic, r.topic_id, r."partition", r."offset",
       r."offset" AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, r.producer_id,
       FALSE AS transactional, r.key_bytes, r.value_bytes
FROM records r
JOIN topics t ON t.topic_id = r.topic_id
JOIN partitions p ON p.topic_id = r.topic_id AND p."partition" = r."partition"
-- The log start is a filter here, never a lower bound of the primary key's range (the unary +):
-- a reader's bound on commit_position is a second lower bound on this branch's r."offset", and
-- SQLite starts its range from one of the two only, which was the log start's, so a window far
-- from the log start walked every record from the log start up to it (36 ms instead of 1 ms for
-- 1,000 positions at 190,000, docs/benchmarks.md).
WHERE r.txn_id IS NULL AND r.control_type IS NULL AND +r."offset" >= p.log_start_offset
UNION ALL
SELECT t.name AS topic, m.topic_id, m."partition", r."offset",
       m."offset" AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, r.producer_id,
       TRUE AS transactional, r.key_bytes, r.value_bytes
FROM records m
JOIN topics t ON t.topic_id = m.topic_id
JOIN partitions p ON p.topic_id = m.topic_id AND p."partition" = m."partition"
CROSS JOIN records h
  ON h.topic_id = m.topic_id AND h."partition" = m."partition" AND h.txn_id = m.txn_id
 AND h.batch_record_count IS NOT NULL AND h."offset" < m."offset"
CROSS JOIN records r
  ON r.topic_id = m.topic_id AND r."partition" = m."partition"
 AND r."offset" >= h."offset" AND r."offset" < h."offset" + h.batch_record_count
 AND r."offset" >= p.log_start_offset
WHERE m.control_type = 'COMMIT'
