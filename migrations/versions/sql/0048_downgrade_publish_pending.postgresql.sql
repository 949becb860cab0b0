-- outbox.publish_pending: publishes at the commit what outbox.append staged, in partition
-- order, taking each partition's offsets under its row lock, and writes each partition's
-- records and their batch row (record_batches). The current text; migrations run frozen
-- copies (migrations/versions/sql/NNNN_publish_pending.postgresql.sql). Why it publishes
-- only at a commit: migrations/versions/sql/0012_upgrade.sql. @log_schema@ is the schema of
-- the log's tables.
--
-- Its search_path holds no schema a caller may create in: every table and function of the log
-- is named with its schema, so that no function, operator or table of the caller's is ever
-- resolved in its place (the log's schema may be the application's too, where a function
-- matching a call more closely than pg_catalog's would run as this function's owner; pg_temp,
-- last, is never searched for functions or operators). Its string constants are read as
-- written whatever the session's standard_conforming_strings.
CREATE OR REPLACE FUNCTION outbox.publish_pending() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET standard_conforming_strings = on
-- Planned for each call's own topic and partition: a generic plan of a statement on `records`
-- (partitioned, one leaf per log partition) would lock every leaf (app/storage/engine.py).
SET plan_cache_mode = force_custom_plan
AS $fn$
DECLARE
    part record;
    topic_now record;
    base bigint;
    me xid8 := pg_current_xact_id();
    context text;
    callers text;
    deferring boolean;
    -- The statement's moment, as text no session setting (DateStyle, TimeZone) changes.
    statement_at text := extract(epoch FROM statement_timestamp())::text;
BEGIN
    -- Who called: the first line is this function, each further one a caller, the innermost
    -- first. At a commit there is none, or a procedure's (or DO block's) COMMIT; a SET
    -- CONSTRAINTS run by a function, a DO block or an append itself has its caller's lines.
    GET DIAGNOSTICS context = PG_CONTEXT;
    callers := substr(context, strpos(context || E'\n', E'\n') + 1);
    IF callers = '' THEN
        -- A top-level statement: a commit, or a SET CONSTRAINTS sent as a statement of its
        -- own (or in a string of several), which then begins the text or follows a ';', after
        -- white space and comments only (a comment's close taken as far as needed, since
        -- comments nest). Text that merely holds the words (a record's value) is no SET; text
        -- that could hold one is treated as one: a false alarm only defers once more.
        deferring := current_query() ~* '(^|;)(\s|--[^\n\r]*[\n\r]|/\*.*\*/)*set(\s|--[^\n\r]*[\n\r]|/\*.*\*/)+constraints\M';
    ELSE
        -- A procedure's COMMIT has PL/pgSQL's own line innermost, written by PostgreSQL as
        -- 'PL/pgSQL function <signature> line <n> at COMMIT', the signature inline_code_block
        -- for a DO block and otherwise the name and argument types with every identifier that
        -- is not plain lower case quoted ("" for a quote within): matched whole, quotes paired,
        -- so that a name holding a line break and ' at COMMIT' reads as the name it is. Any
        -- other innermost line is no commit of PL/pgSQL's: a statement run inside a function
        -- ('SQL statement "…"', whose quoted text may hold anything, lines included, but
        -- never comes first), an SQL function's line, or another language's. This trusts
        -- each installed language to begin its own line with its own words, as PostgreSQL's
        -- languages do: one that let a function's author write the start of it could pass
        -- off any firing as a commit.
        deferring := callers !~ '^PL/pgSQL function (inline_code_block|([a-z_][a-z0-9_]*|"([^"]|"")*")(\.([a-z_][a-z0-9_]*|"([^"]|"")*"))?\(([]a-z0-9_ .,[]|"([^"]|"")*")*\)) line [0-9]+ at COMMIT(\n|$)';
    END IF;
    IF deferring THEN
        -- Deferring queues a new event, which a SET CONSTRAINTS leaves for later but a commit
        -- fires at once: a commit taken for a SET would defer forever. A statement run inside
        -- a function (innermost 'SQL statement', 'SQL expression', 'PL/pgSQL assignment' or
        -- 'SQL function' line) is never a commit, and may set constraints as often as it
        -- likes; any other deferral (a top-level statement, a commit in another language's
        -- procedure) comes once per statement, and a second one in the same statement is
        -- refused rather than published early or looped.
        IF callers !~ '^(SQL statement|SQL expression|PL/pgSQL assignment|SQL function) "' THEN
            IF current_setting('outbox.deferred_in', true) = statement_at THEN
                RAISE EXCEPTION 'INVALID_REQUEST: records appended with outbox.append are published at the commit, and this statement both sets constraints and commits, or commits where that cannot be told from a SET CONSTRAINTS: run SET CONSTRAINTS in a statement of its own, and commit in one or with PL/pgSQL''s COMMIT'
                    USING ERRCODE = 'object_not_in_prerequisite_state';
            END IF;
            PERFORM set_config('outbox.deferred_in', statement_at, true);
        END IF;
        -- Naming the trigger overrides a SET CONSTRAINTS ALL for it, so the request put back
        -- waits for the commit (or the next SET CONSTRAINTS ... IMMEDIATE, which comes here).
        SET CONSTRAINTS outbox.publish_at_commit DEFERRED;
        DELETE FROM outbox.publish_requests WHERE xact = me;
        INSERT INTO outbox.publish_requests (xact) VALUES (me);
        RETURN NULL;
    END IF;
    -- The staged records' topics, FOR SHARE, in topic order, before any partition's row lock:
    -- topic then partition, the order in which a delete locks them (app/storage/topics.py), and
    -- nothing that holds a partition row waits for a topic row, so this cannot deadlock. The
    -- lock waits for an alter or a delete in flight, and keeps the config read below until the
    -- commit. Under REPEATABLE READ or SERIALIZABLE this function reads in the snapshot of the
    -- application's first statement: a topic row changed since (an alter or a delete committed
    -- after it) fails the commit here with a serialization failure, rather than publish the
    -- records under a config the snapshot does not show.
    PERFORM FROM @log_schema@.topics t
    WHERE t.topic_id IN (SELECT p.topic_id FROM outbox.pending_records p WHERE p.xact = me)
    ORDER BY t.topic_id FOR SHARE OF t;
    -- In partition order, as a Send locks partitions, so that two committing transactions
    -- cannot deadlock on each other's partitions.
    FOR part IN
        SELECT p.topic_id, p."partition", count(*) AS n, sum(p.size_bytes) AS bytes,
               bool_or(p.key IS NULL) AS keyless, max(p.size_bytes) AS largest
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
        -- The records are appended now, after every record a Send appended before: held to the
        -- topic's config of now, as outbox.append held them to the config when it staged them.
        -- Read in a statement after the topic's lock above, so that under READ COMMITTED an
        -- alter committed while this waited for that lock is seen; none commits after it.
        SELECT t.name, t.cleanup_policy, t.check_expected_offsets, t.max_message_bytes INTO topic_now
        FROM @log_schema@.topics t WHERE t.topic_id = part.topic_id;
        PERFORM outbox.check_topic_config(topic_now.name, part."partition", topic_now.cleanup_policy,
                                          topic_now.check_expected_offsets, topic_now.max_message_bytes,
                                          keyless => part.keyless, size_bytes => part.largest, staged => true);
        -- The records, and the message ids of those given one at the same offsets: the CTE is
        -- computed once, so both take each record's offset from one numbering. The records go
        -- into the partition's leaf by its name, not through `records`: an INSERT into `records`
        -- routes each row by this backend's cached list of the leaves, and a leaf attached by a
        -- topic's creation that has committed (so its rows are seen here) may not be in that
        -- list yet, PostgreSQL publishing the creation's cache invalidations only after its
        -- commit is seen; the row would then find no leaf ("no partition of relation records
        -- found"). The leaf is found by its name in the catalog as this statement sees it, needing
        -- no list, and its partition constraint still holds every row to its partition (tests/integration/test_in_database_append_postgresql.py,
        -- test_a_commit_publishes_to_a_topic_whose_creation_has_only_just_committed).
        EXECUTE format($sql$
            WITH staged AS (
                SELECT p.topic_id, p."partition", $1 + row_number() OVER (ORDER BY p.id) - 1 AS "offset",
                       p.timestamp_ms, p.key, p.value, p.headers, p.message_id
                FROM outbox.pending_records p
                WHERE p.xact = $2 AND p.topic_id = $3 AND p."partition" = $4
            ), published AS (
                INSERT INTO @log_schema@.%I (topic_id, "partition", "offset", timestamp_ms, key, value, headers,
                                             self_committed)
                SELECT s.topic_id, s."partition", s."offset", s.timestamp_ms, s.key, s.value, s.headers, true
                FROM staged s
            )
            INSERT INTO @log_schema@.record_message_ids (topic_id, message_id, "partition", "offset")
            SELECT s.topic_id, s.message_id, s."partition", s."offset" FROM staged s WHERE s.message_id IS NOT NULL
        $sql$, format('records_%s_%s', part.topic_id, part."partition"))
        USING base, me, part.topic_id, part."partition";
        -- The partition's records are one plain batch (app/storage/append.py writes the same row
        -- for a Send's batch), committed at its last offset. It has neither a producer nor a
        -- transaction, and its records are written with it: it and they are self-committed
        -- (the view committed_records reads them as a range of `records`, docs/DESIGN-batches.md).
        INSERT INTO @log_schema@.record_batches (topic_id, "partition", base_offset, record_count, state, commit_position,
                                                 self_committed)
        VALUES (part.topic_id, part."partition", base, part.n, 'committed', base + part.n - 1, true);
        -- Waiting readers of other processes (delivered only if this transaction commits).
        PERFORM pg_notify('outbox_log', part.topic_id || ':' || part."partition");
    END LOOP;
    DELETE FROM outbox.pending_records WHERE xact = me;
    DELETE FROM outbox.publish_requests WHERE xact = me;
    RETURN NULL;
END
$fn$;
