-- Migration 0006: the outbox schema, where an application's records wait for its commit,
-- and the functions that stage and publish them (a frozen copy: later migrations that
-- change them bring their own). Statements are separated by lines of three dashes;
-- @log_schema@ is the schema of the log's tables.
--
-- The checks of a record are those of a Send (app/api/send_body.py): a key and headers
-- without NUL, headers an object of strings, a value that is JSON whose numbers are finite as
-- 64-bit floats and that nests at most 254 levels. tests/integration/test_in_database_append.py
-- holds the two to the same verdicts.
--
-- Why the records wait in outbox.pending_records: offsets are handed out under the partition
-- row's lock, held to commit (app/storage/log_end.py), which is what keeps a reader from skipping
-- a record that commits late. Taken in outbox.append, that lock would stop every producer of
-- the partition for as long as the application's transaction runs. So outbox.append only
-- stages, and a deferred constraint trigger moves the transaction's records into the log as
-- it commits: the lock is held from there to the commit, as by a Send.
--
-- SECURITY DEFINER functions run with the migration owner's rights, so every name they use is
-- qualified and pg_temp comes last on their search_path: otherwise a caller's temporary table
-- named `partitions` or `records` would stand in for the log's (PostgreSQL looks in pg_temp
-- first unless told otherwise), and a trigger on it would run the caller's code as the owner.
--
-- UNLOGGED: a staged row never outlives its transaction (it is deleted before the commit), so
-- there is nothing to recover after a crash, which empties an unlogged table.
CREATE SCHEMA outbox;
---
REVOKE ALL ON SCHEMA outbox FROM PUBLIC;
---
CREATE UNLOGGED TABLE outbox.pending_records (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    xact xid8 NOT NULL DEFAULT pg_current_xact_id(),
    topic_id integer NOT NULL,
    "partition" integer NOT NULL,
    timestamp_ms bigint NOT NULL,
    key text,
    value text,
    headers text,
    message_id text,
    size_bytes bigint NOT NULL
);
---
CREATE INDEX ix_pending_records_xact ON outbox.pending_records (xact, topic_id, "partition", id);
---
CREATE FUNCTION outbox.append(
    topic text,
    "partition" integer,
    key text,
    value json,
    headers json DEFAULT NULL,
    message_id text DEFAULT NULL,
    timestamp_ms bigint DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, @log_schema@, pg_temp
AS $fn$
DECLARE
    t record;
    parsed jsonb;
    -- As a Send stores them: the value as sent, without the white space around it; the
    -- headers as one JSON object (a later duplicate name wins).
    value_text text := btrim(value::text, E' \t\n\r');
    headers_text text := headers::text;
BEGIN
    SELECT topic_id, partition_count, cleanup_policy, check_expected_offsets INTO t
    FROM @log_schema@.topics WHERE name = topic;
    -- The messages are the service's own (app/storage/topics.py).
    IF t IS NULL THEN
        RAISE EXCEPTION 'UNKNOWN_TOPIC_OR_PARTITION: unknown topic(s): %', coalesce(topic, 'null')
            USING ERRCODE = 'undefined_object';
    END IF;
    IF "partition" IS NULL OR "partition" < 0 OR "partition" >= t.partition_count THEN
        RAISE EXCEPTION 'UNKNOWN_TOPIC_OR_PARTITION: topic % has partitions 0..%; got %',
            quote_literal(topic), t.partition_count - 1, coalesce("partition"::text, 'null')
            USING ERRCODE = 'undefined_object';
    END IF;
    IF t.check_expected_offsets THEN
        RAISE EXCEPTION 'INVALID_REQUEST: topic % has check_expected_offsets: every batch needs expected_offset',
            quote_literal(topic) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF key IS NULL AND t.cleanup_policy LIKE 'compact%' THEN
        RAISE EXCEPTION 'INVALID_RECORD: topic % is compacted (cleanup_policy %): every record needs a key',
            quote_literal(topic), t.cleanup_policy USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- (A key with NUL never gets here: PostgreSQL's text cannot hold one.) The escape \u0000,
    -- not an escaped backslash followed by u0000.
    IF headers_text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
        RAISE EXCEPTION 'INVALID_RECORD: headers cannot hold NUL (U+0000)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- jsonb refuses what the json type lets through and readers' parsers refuse: a lone
    -- surrogate escape. Only a text holding a surrogate escape can fail the cast, and only
    -- such a text enters the block (each entry is a subtransaction).
    IF headers_text ~ '\\u[dD][89abAB]' THEN
        BEGIN
            headers_text := headers::jsonb::text;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'INVALID_RECORD: headers hold JSON that readers cannot parse back: %', SQLERRM
                USING ERRCODE = 'invalid_parameter_value';
        END;
    END IF;
    IF headers IS NOT NULL AND (json_typeof(headers) <> 'object' OR EXISTS (
            SELECT 1 FROM json_each(headers) h WHERE json_typeof(h.value) <> 'string')) THEN
        RAISE EXCEPTION 'INVALID_RECORD: headers must be an object of strings, not %', left(headers_text, 100)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    headers_text := headers::jsonb::text;
    IF value IS NULL OR json_typeof(value) = 'null' THEN
        value_text := 'null';  -- as a Send stores a value null or omitted: a tombstone
    -- What a Send checks after a cheap search (app/api/send_body.py), looked at closely only
    -- where the search hits: a surrogate escape, a number with a 3-digit exponent or 309
    -- digits in a row, a text long enough to nest 255 deep. NUL escapes become spaces for
    -- jsonb, which cannot hold NUL (an escaped backslash before u0000 stays valid JSON too).
    ELSIF value_text ~ '\\u[dD][89abAB]|[eE][+-]?[0-9]{3}|[0-9]{255}[0-9]{54}' OR length(value_text) > 2 * 254 THEN
        BEGIN
            parsed := replace(value_text, '\u0000', '\u0020')::jsonb;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'INVALID_RECORD: the value is JSON that readers cannot parse back: %', SQLERRM
                USING ERRCODE = 'invalid_parameter_value';
        END;
        -- 2^1024 - 2^970: from there on a number rounds to infinity as a 64-bit float.
        IF jsonb_path_exists(parsed, 'strict $.** ? (@.type() == "number" && (@ >= 179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792 || @ <= -179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792))') THEN
            RAISE EXCEPTION 'INVALID_RECORD: a number in the value is not finite as a 64-bit float'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- An array or object at level 254 (the value itself is level 0) nests 255 deep.
        IF length(value_text) > 2 * 254
           AND jsonb_path_exists(parsed, 'strict $.**{254} ? (@.type() == "array" || @.type() == "object")') THEN
            RAISE EXCEPTION 'INVALID_RECORD: the value nests deeper than 254 levels'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF timestamp_ms IS NOT NULL AND timestamp_ms < 0 THEN
        RAISE EXCEPTION 'INVALID_RECORD: timestamp_ms must be at least 0, not %', timestamp_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF message_id IS NOT NULL THEN
        -- Published before (a retry of an application transaction that committed), or
        -- already staged by this transaction: nothing to do. Two transactions staging one
        -- message_id at once both pass; the second to commit fails on ix_records_message_id.
        IF EXISTS (SELECT 1 FROM @log_schema@.records r WHERE r.topic_id = t.topic_id AND r.message_id = append.message_id)
           OR EXISTS (SELECT 1 FROM outbox.pending_records p
                      WHERE p.xact = pg_current_xact_id() AND p.topic_id = t.topic_id
                        AND p.message_id = append.message_id) THEN
            RETURN false;
        END IF;
    END IF;
    INSERT INTO outbox.pending_records (topic_id, "partition", timestamp_ms, key, value, headers, message_id, size_bytes)
    VALUES (t.topic_id, "partition",
            coalesce(timestamp_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint),
            key, value_text, headers_text, message_id,
            coalesce(octet_length(key), 0) + coalesce(octet_length(value_text), 0) + coalesce(octet_length(headers_text), 0));
    RETURN true;
END
$fn$;
---
-- Runs as the transaction commits (once per staged row; the first moves them all, in
-- partition order, as a Send locks partitions, so two committing transactions cannot
-- deadlock on each other's partitions).
CREATE FUNCTION outbox.publish_pending() RETURNS trigger
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
    END LOOP;
    DELETE FROM outbox.pending_records WHERE xact = me;
    RETURN NULL;
END
$fn$;
---
CREATE CONSTRAINT TRIGGER publish_at_commit AFTER INSERT ON outbox.pending_records
DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox.publish_pending();
---
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA outbox FROM PUBLIC;
