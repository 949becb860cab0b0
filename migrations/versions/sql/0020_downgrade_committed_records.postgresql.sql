CREATE OR REPLACE VIEW committed_records AS
SELECT t.name AS topic, r.topic_id, r."partition", r."offset",
       r."offset" AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, r.producer_id,
       FALSE AS transactional, r.key_bytes, r.value_bytes
FROM records r
JOIN topics t ON t.topic_id = r.topic_id
JOIN partitions p ON p.topic_id = r.topic_id AND p."partition" = r."partition"
WHERE r.txn_id IS NULL AND r.control_type IS NULL AND r."offset" >= p.log_start_offset
UNION ALL
SELECT t.name AS topic, m.topic_id, m."partition", r."offset",
       m."offset" AS commit_position,
       r.timestamp_ms, r.key, r.value, r.headers, r.producer_id,
       TRUE AS transactional, r.key_bytes, r.value_bytes
FROM records m
JOIN topics t ON t.topic_id = m.topic_id
JOIN partitions p ON p.topic_id = m.topic_id AND p."partition" = m."partition"
CROSS JOIN LATERAL (
    SELECT h."offset", h.batch_record_count FROM records h
    WHERE h.topic_id = m.topic_id AND h."partition" = m."partition" AND h.txn_id = m.txn_id
      AND h.batch_record_count IS NOT NULL AND h."offset" < m."offset"
    OFFSET 0
) h
CROSS JOIN LATERAL (
    SELECT r."offset", r.timestamp_ms, r.key, r.value, r.headers, r.producer_id, r.key_bytes, r.value_bytes FROM records r
    WHERE r.topic_id = m.topic_id AND r."partition" = m."partition"
      AND r."offset" >= h."offset" AND r."offset" < h."offset" + h.batch_record_count
      AND r."offset" >= p.log_start_offset
    OFFSET 0
) r
WHERE m.control_type = 'COMMIT'
