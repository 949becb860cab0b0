-- Migration 0019: record_batches derived from the records alone (a frozen copy; both
-- databases). Statements are separated by lines of three dashes.
--
-- Transactional batches from their heads (batch_record_count), each with its partition's
-- marker of the same transaction: committed at a COMMIT marker's offset, aborted by an ABORT
-- marker, open without one.
INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch,
                            base_sequence, txn_id, control_type, state, commit_position)
SELECT h.topic_id, h."partition", h."offset", h.batch_record_count, h.producer_id, h.producer_epoch, h.sequence,
       h.txn_id, NULL,
       CASE m.control_type WHEN 'COMMIT' THEN 'committed' WHEN 'ABORT' THEN 'aborted' ELSE 'open' END,
       CASE WHEN m.control_type = 'COMMIT' THEN m."offset" END
FROM records h
LEFT JOIN records m ON m.topic_id = h.topic_id AND m."partition" = h."partition" AND m.txn_id = h.txn_id
                   AND m.control_type IS NOT NULL
WHERE h.batch_record_count IS NOT NULL
---
-- A control marker: a batch of one offset, with the marker's producer and transaction.
INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch,
                            base_sequence, txn_id, control_type, state, commit_position)
SELECT topic_id, "partition", "offset", 1, producer_id, producer_epoch, NULL, txn_id, control_type, NULL, NULL
FROM records WHERE control_type IS NOT NULL
---
-- Plain records as runs: consecutive offsets (among one producer's, or among records without
-- a producer) of one producer id and epoch with consecutive sequences, cut every 1,000
-- records, each committed at its last offset.
INSERT INTO record_batches (topic_id, "partition", base_offset, record_count, producer_id, producer_epoch,
                            base_sequence, txn_id, control_type, state, commit_position)
SELECT topic_id, "partition", min("offset"), count(*), producer_id, producer_epoch, min(sequence), NULL, NULL,
       'committed', max("offset")
FROM (
    SELECT topic_id, "partition", "offset", producer_id, producer_epoch, sequence, run, seq_run,
           (row_number() OVER (PARTITION BY topic_id, "partition", producer_id, producer_epoch, run, seq_run
                               ORDER BY "offset") - 1) / 1000 AS chunk
    FROM (
        SELECT topic_id, "partition", "offset", producer_id, producer_epoch, sequence,
               "offset" - row_number() OVER (PARTITION BY topic_id, "partition", producer_id, producer_epoch
                                             ORDER BY "offset") AS run,
               sequence - "offset" AS seq_run
        FROM records WHERE txn_id IS NULL AND control_type IS NULL
    ) plain
) runs
GROUP BY topic_id, "partition", producer_id, producer_epoch, run, seq_run, chunk
