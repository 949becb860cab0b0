-- ix_record_batches_txn_span (migration 0050): the committed transactional batches of a
-- partition by how far each lies below its COMMIT marker (commit_position - base_offset), so
-- that the largest of those spans is one index probe (app.storage.read_committed.committed_across
-- bounds its walk by it). `control_type IS NULL` holds of every row the other two conditions
-- hold; it is there so that the walk, whose WHERE does not say it, cannot take this index.
CREATE INDEX IF NOT EXISTS ix_record_batches_txn_span ON record_batches
    (topic_id, "partition", (commit_position - base_offset))
    WHERE txn_id IS NOT NULL AND commit_position IS NOT NULL AND control_type IS NULL
