-- The leaves of `records`: on PostgreSQL `records` is partitioned by log partition, a leaf
-- table per (topic_id, partition) named records_<topic_id>_<partition>, so that a read of one
-- partition reads that partition's pages only (docs/DESIGN-partitioned-records.md). A row of
-- `partitions` is where a log partition begins (CreateTopics and CreatePartitions, from every
-- door, through app.storage.topics), so its INSERT creates the leaf, in the same transaction:
-- a topic whose creation rolls back leaves no leaf behind. With its leaf each log partition
-- gets its view, committed_records.partition_<topic_id>_<partition>: what read_committed may
-- see of that partition, the text of the view `committed_records` with the partition written
-- in (committed_records.postgresql.sql, rendered by the migration into create_partition_view).
-- The log cleaner removes a deleted topic's views and leaves
-- (app.storage.record_leaves.drop_record_leaves). The current text; migrations run frozen copies
-- (migrations/versions/sql/NNNN_record_leaves.postgresql.sql). @log_schema@ is the schema of
-- the log's tables.
--
-- Each function's search_path holds no schema a role may create in (the log's schema may be
-- an application's too): a function or operator created there matching a call more closely
-- than pg_catalog's (format(text, integer, integer) beside format(text, VARIADIC "any")) would
-- run, as whoever creates a topic or, in create_partition_view, as its owner. Every table of
-- the log is named with its schema, and string constants are read as written whatever the
-- session's standard_conforming_strings.
--
-- CREATE TABLE … (LIKE records) then ATTACH PARTITION, never CREATE TABLE … PARTITION OF:
-- PARTITION OF takes `records` in ACCESS EXCLUSIVE mode until the commit, so every reader and
-- appender would queue behind a topic's creation, and it deadlocked with appenders in simple
-- interleavings; ATTACH takes SHARE UPDATE EXCLUSIVE, which readers and appenders pass and
-- which only another ATTACH waits for (benchmarks/partition_leaves.py measured both).
CREATE OR REPLACE FUNCTION outbox.create_record_leaf(parent text, topic_id integer, "partition" integer) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
SET standard_conforming_strings = on
AS $fn$
DECLARE
    leaf text := format('records_%s_%s', topic_id, "partition");
    existing regclass := to_regclass(format('@log_schema@.%I', leaf));
    holds boolean;
BEGIN
    IF existing IS NOT NULL THEN
        -- A topic id is never handed out twice (PostgreSQL's sequence; the test suite's reset
        -- starts it again and empties `records`), so an existing leaf may be taken over only
        -- while it is a leaf of `records` and holds nothing: anything else is another log's
        -- data, and a topic created over it would expose it.
        IF NOT EXISTS (SELECT FROM pg_inherits WHERE inhrelid = existing
                                                 AND inhparent = format('@log_schema@.%I', parent)::regclass) THEN
            RAISE EXCEPTION 'a table % exists and is not a leaf of %: the log partition %/% cannot be created',
                leaf, parent, topic_id, "partition";
        END IF;
        EXECUTE format('SELECT EXISTS (SELECT FROM @log_schema@.%I)', leaf) INTO STRICT holds;
        IF holds THEN
            RAISE EXCEPTION 'the leaf % of % holds records: the log partition %/% cannot be created over them',
                leaf, parent, topic_id, "partition";
        END IF;
        RETURN;
    END IF;
    EXECUTE format('CREATE TABLE @log_schema@.%I (LIKE @log_schema@.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', leaf, parent);
    EXECUTE format('ALTER TABLE @log_schema@.%I ATTACH PARTITION @log_schema@.%I FOR VALUES FROM (%s, %s) TO (%s, %s)',
                   parent, leaf, topic_id, "partition", topic_id, "partition" + 1);
END
$fn$;
---
-- The schema of the partitions' views: a schema of their own, so that `outbox grant-reader`
-- can give a reader USAGE on it and SELECT on every view in it, and nothing on the log's tables.
CREATE SCHEMA IF NOT EXISTS committed_records;
---
-- A log partition's view. It reads `records` by its name in the log's schema, so it is made
-- once `records` is the partitioned table (migration 0035 makes the views at its swap; until
-- then the trigger makes leaves of the table being filled, and no view). Whoever may read the
-- view of every partition may read it: its SELECT grants are copied to it here, by its creator
-- (its owner, who may grant). Default privileges would not do: they act on the objects of the
-- role that set them only, and the role that creates a partition (the service's) need not be
-- the one that ran `outbox grant-reader` or the migration; a reader would then be refused the
-- views of later partitions while the view of every partition still let it in. SECURITY
-- DEFINER: every view is owned by the function's owner, the role that ran the migration, as
-- the view of every partition is, whichever role creates the partition; `outbox grant-reader`
-- (run by that role or a member of it) can then grant SELECT on all of them, where a role that
-- owned only some would grant nothing on the others.
CREATE OR REPLACE FUNCTION outbox.create_partition_view(topic_id integer, "partition" integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET standard_conforming_strings = on
AS $fn$
DECLARE
    view_name text := format('partition_%s_%s', topic_id, "partition");
    statement text;
    reader oid;
BEGIN
    -- The view's text names the log's tables without their schema (it is also the text of the
    -- view of every partition): they are found with the log's schema on the path for the CREATE
    -- VIEW alone, after pg_catalog, where every operator the text uses (on integers and bigints)
    -- has its exact match, so none of the log's schema is chosen over it. The statement is
    -- written before: format() called with the log's schema on the path would take a
    -- format(text, text, integer, integer) created there, an exact match, over pg_catalog's
    -- variadic one, and run it as this function's owner.
    statement := format(@partition_view@, view_name, topic_id, "partition");
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, @log_schema@, pg_temp', true);
    EXECUTE statement;
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    FOR reader IN SELECT a.grantee FROM pg_class c, aclexplode(c.relacl) a
                  WHERE c.oid = '@log_schema@.committed_records'::regclass AND a.privilege_type = 'SELECT'
                    AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT SELECT ON committed_records.%I TO %s', view_name,
                       CASE WHEN reader = 0 THEN 'PUBLIC' ELSE reader::regrole::text END);
    END LOOP;
END
$fn$;
---
CREATE OR REPLACE FUNCTION outbox.attach_record_leaf() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
SET standard_conforming_strings = on
AS $fn$
BEGIN
    PERFORM outbox.create_record_leaf(TG_ARGV[0], NEW.topic_id, NEW."partition");
    IF TG_ARGV[0] = 'records' THEN
        PERFORM outbox.create_partition_view(NEW.topic_id, NEW."partition");
    END IF;
    RETURN NULL;
END
$fn$;
---
-- The table the leaves are made for is the trigger's argument: `records`, and while migration
-- 0035 fills the partitioned table beside the old one, that table. OR REPLACE: replacing a
-- trigger takes the table in SHARE ROW EXCLUSIVE mode, as creating one does, where DROP
-- TRIGGER takes it in ACCESS EXCLUSIVE mode, which waits for every reader of `partitions`
-- (an appender among them, itself waiting for `records`).
CREATE OR REPLACE TRIGGER attach_record_leaf AFTER INSERT ON @log_schema@.partitions
FOR EACH ROW EXECUTE FUNCTION outbox.attach_record_leaf('records');
---
-- Functions are executable by PUBLIC when created; these are the service's alone.
REVOKE ALL ON FUNCTION outbox.create_record_leaf(text, integer, integer), outbox.create_partition_view(integer, integer),
    outbox.attach_record_leaf() FROM PUBLIC;
