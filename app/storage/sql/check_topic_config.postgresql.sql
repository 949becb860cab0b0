-- outbox.check_topic_config: the rules of a topic's config that a record appended with
-- outbox.append must meet, in one text for the two places that hold a record to them:
-- outbox.append when it stages the record, under the config of then, and publish_pending at
-- the application's commit, where the record takes its offset and so must meet the config of
-- then (an alter may have committed in between). Each refusal is a Send's
-- (app.services.log_service.batches_to_append, app.domain.topic_config.check_record_size):
-- a topic that checks expected offsets refuses every batch, as none carries one
-- (INVALID_REQUEST); a compacted topic refuses a record without a key (INVALID_RECORD); a
-- record over the topic's max_message_bytes, its key, value and headers as stored, is
-- MESSAGE_TOO_LARGE. The current text; migrations run frozen copies
-- (migrations/versions/sql/NNNN_check_topic_config.postgresql.sql).
--
-- `keyless`: whether a record has no key; `size_bytes`: the largest record's size. NULL: not
-- known yet, that rule is not checked (outbox.append knows a record's size only once its
-- headers are as stored). `staged`: the records were staged before, under a config changed
-- since (publish_pending), which the message says.
CREATE OR REPLACE FUNCTION outbox.check_topic_config(
    topic text,
    "partition" integer,
    cleanup_policy text,
    check_expected_offsets boolean,
    max_message_bytes integer,
    keyless boolean,
    size_bytes bigint,
    staged boolean
) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
-- As the functions that call it (outbox.append's header says why).
SET standard_conforming_strings = on
AS $fn$
DECLARE
    since text := CASE WHEN staged THEN ' (set after outbox.append staged this transaction''s records)' ELSE '' END;
BEGIN
    IF check_expected_offsets THEN
        RAISE EXCEPTION 'INVALID_REQUEST: topic % has check_expected_offsets: every batch needs expected_offset%',
            quote_literal(topic), since USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF keyless AND cleanup_policy LIKE 'compact%' THEN
        RAISE EXCEPTION 'INVALID_RECORD: topic % is compacted (cleanup_policy %): every record needs a key%',
            quote_literal(topic), cleanup_policy, since USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF size_bytes > max_message_bytes THEN
        RAISE EXCEPTION 'MESSAGE_TOO_LARGE: a record of %/% is % bytes (key, value and headers), more than topic %''s max_message_bytes %',
            topic, "partition", size_bytes, quote_literal(topic),
            max_message_bytes || CASE WHEN staged THEN ' (set after outbox.append staged it)' ELSE '' END
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
END
$fn$;
---
-- Functions are executable by PUBLIC when created; this one is called by outbox.append and
-- publish_pending, as their owner (SECURITY DEFINER).
REVOKE ALL ON FUNCTION outbox.check_topic_config(text, integer, text, boolean, integer, boolean, bigint, boolean) FROM PUBLIC;
