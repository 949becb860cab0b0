-- Migration 0035's own, while it fills records_next (the partitioned table) beside `records`:
-- every row a writer inserts into or deletes from `records` is inserted into or deleted from
-- records_next in the same transaction, so that a row written after the backfill read its
-- range is not missed, and a row deleted after it was copied is not kept. Dropped with the
-- old table when the migration swaps the two. Row triggers fire for COPY too.
CREATE FUNCTION outbox.mirror_records() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, @log_schema@, pg_temp
-- Each statement planned for the row's own leaf of records_next (app/storage/engine.py says why).
SET plan_cache_mode = force_custom_plan
AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- The backfill may have copied it already, if the writer committed first.
        INSERT INTO @log_schema@.records_next VALUES (NEW.*) ON CONFLICT DO NOTHING;
        RETURN NULL;
    END IF;
    DELETE FROM @log_schema@.records_next
    WHERE topic_id = OLD.topic_id AND "partition" = OLD."partition" AND "offset" = OLD."offset";
    RETURN NULL;
END
$fn$;
---
REVOKE ALL ON FUNCTION outbox.mirror_records() FROM PUBLIC;
---
CREATE TRIGGER mirror_records AFTER INSERT OR DELETE ON @log_schema@.records
FOR EACH ROW EXECUTE FUNCTION outbox.mirror_records();
