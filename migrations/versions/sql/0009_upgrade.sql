-- Migration 0009: outbox.publish_pending as migration 0006 made it, with a NOTIFY per partition
-- it publishes to (a frozen copy). @log_schema@ is the schema of the log's tables.
-- Runs as the transaction commits (once per staged row; the first moves them all, in
-- partition order, as a Send locks partitions, so two committing transactions cannot
-- deadlock on each other's partitions).
CREATE OR REPLACE FUNCTION outbox.publish_pending() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @log_schema@, pg_temp
AS $fn$
DECLARE
    part record;
    base bigint;
    me xid8 := pg_current_xact_id();
BEGIN
    FOR part IN
        SELECT p.topic_id, p."partition", count(*) AS n, sum(p.size_bytes) AS bytes
        FROM outbox.pending_records p WHERE p.xact = me
        GROUP BY p.topic_id, p."partition" ORDER BY p.topic_id, p."partition"
    LOOP
        -- The partition's offsets, as app/storage/log_end.py takes them: the row lock is held to
        -- the commit, so the next appender of the partition reads this transaction's log end.
        UPDATE @log_schema@.partitions SET next_offset = next_offset + part.n,
                              record_count = record_count + part.n,
                              size_bytes = size_bytes + part.bytes
        WHERE topic_id = part.topic_id AND "partition" = part."partition"
        RETURNING next_offset - part.n INTO base;
        IF base IS NULL THEN
            RAISE EXCEPTION 'UNKNOWN_TOPIC_OR_PARTITION: topic id % was deleted before this transaction committed',
                part.topic_id USING ERRCODE = 'undefined_object';
        END IF;
        INSERT INTO @log_schema@.records (topic_id, "partition", "offset", timestamp_ms, key, value, headers, message_id)
        SELECT p.topic_id, p."partition", base + row_number() OVER (ORDER BY p.id) - 1,
               p.timestamp_ms, p.key, p.value, p.headers, p.message_id
        FROM outbox.pending_records p
        WHERE p.xact = me AND p.topic_id = part.topic_id AND p."partition" = part."partition";
        PERFORM pg_notify('outbox_log', part.topic_id || ':' || part."partition");
    END LOOP;
    DELETE FROM outbox.pending_records WHERE xact = me;
    RETURN NULL;
END
$fn$;
