-- outbox.append: an application's call, in its own transaction, that checks a record as a
-- Send checks it and stages it in outbox.pending_records for publish_pending to publish
-- at the commit. @log_schema@ is the schema of the log's tables.
--
-- Its verdicts and the bytes it stores are a Send's (tests/appender_cases.py holds every
-- appender to one table of cases): a record a Send's schema or decoder refuses is refused
-- with INVALID_REQUEST, a partition below 0 included; INVALID_RECORD is the topic's refusal
-- (a compacted topic's record without a key); headers are stored as a Send stores them,
-- compact JSON in the order given, and counted so against max_message_bytes.
--
-- It runs as its owner (SECURITY DEFINER) for any role granted appending, whose own functions,
-- operators and tables must never stand in for the ones it calls: its search_path holds no
-- schema a caller may create in (the log's schema may be the application's too, where a
-- function matching a call such as to_json(text) more closely than pg_catalog's would be
-- chosen; pg_temp, last, is never searched for functions or operators, and its tables come
-- after pg_catalog's), and every table and function of the log is named with its schema. Its
-- string constants, regular expressions among them, are read as written whatever the
-- session's standard_conforming_strings.
CREATE OR REPLACE FUNCTION outbox.append(
    topic text,
    "partition" integer,
    key text,
    value json,
    headers json DEFAULT NULL,
    message_id text DEFAULT NULL,
    timestamp_ms bigint DEFAULT NULL
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET standard_conforming_strings = on
AS $fn$
DECLARE
    t record;
    parsed jsonb;
    -- As a Send stores it: the value as sent, without the white space around it.
    value_text text := btrim(value::text, E' \t\n\r');
    headers_text text := headers::text;
    checked text;
    -- A JSON number, its sign, integer digits, fraction digits and exponent apart; not one
    -- that continues a letter, digit, point or sign, so never part of a \uXXXX escape. It can
    -- match inside a string, where what replaces it (digits, a point, e and a sign) leaves a
    -- string still.
    number_pattern constant text := '(?<![0-9A-Za-z.+-])(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?';
BEGIN
    -- What a Send's schema refuses before it looks at any topic.
    IF "partition" IS NULL OR "partition" < 0 THEN
        RAISE EXCEPTION 'INVALID_REQUEST: partition must be at least 0, not %', coalesce("partition"::text, 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A name no topic may have, as a Send's schema and the Python API refuse it
    -- (app.domain.records.check_address): the caller's mistake, not a topic that does not
    -- exist, so checked before the lookup. Text cannot hold NUL, the one control character
    -- not listed.
    IF topic IS NULL OR NOT char_length(topic) BETWEEN 1 AND 249 OR topic ~ '[/\x01-\x1f\x7f]' THEN
        RAISE EXCEPTION 'INVALID_REQUEST: topic: a topic''s name is 1 to 249 characters without ''/'' or control characters, not %',
            coalesce(quote_literal(left(topic, 300)), 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Before the topic is looked up, so that a role learns nothing of topics it may not
    -- append to. session_user: inside this SECURITY DEFINER function current_user is its
    -- owner; the owner (and a superuser) may append anywhere, as the service itself does.
    IF NOT pg_has_role(session_user, current_user, 'MEMBER') AND NOT EXISTS (
            SELECT 1 FROM outbox.append_grants g JOIN pg_roles r ON r.rolname = g.role
            WHERE pg_has_role(session_user, r.oid, 'MEMBER')
              AND (g.topic = '*' OR g.topic = append.topic
                   OR (g.pattern_type = 'prefixed' AND starts_with(append.topic, g.topic)))) THEN
        RAISE EXCEPTION 'TOPIC_AUTHORIZATION_FAILED: role % may not append to topic % (outbox grant-appender)',
            quote_ident(session_user), quote_literal(coalesce(topic, 'null'))
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    SELECT topic_id, partition_count, cleanup_policy, check_expected_offsets, max_message_bytes, value_format INTO t
    FROM @log_schema@.topics WHERE name = topic;
    -- The messages are the service's own (app/storage/topics.py).
    IF t IS NULL THEN
        RAISE EXCEPTION 'UNKNOWN_TOPIC_OR_PARTITION: unknown topic(s): %', coalesce(topic, 'null')
            USING ERRCODE = 'undefined_object';
    END IF;
    IF "partition" >= t.partition_count THEN
        RAISE EXCEPTION 'UNKNOWN_TOPIC_OR_PARTITION: topic % has partitions 0..%; got %',
            quote_literal(topic), t.partition_count - 1, coalesce("partition"::text, 'null')
            USING ERRCODE = 'undefined_object';
    END IF;
    -- This function takes a JSON topic's records (a key text, a value JSON); a bytes topic's
    -- are appended by a Send or the Kafka door (app.domain.records).
    IF t.value_format <> 'json' THEN
        RAISE EXCEPTION 'INVALID_RECORD: topic % is a % topic; outbox.append appends to json topics only',
            quote_literal(topic), t.value_format USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The topic's config (check_topic_config, which publish_pending holds the record to again
    -- at the commit): its rules for every batch and for keys now, its max_message_bytes below,
    -- once the record's size as stored is known.
    PERFORM outbox.check_topic_config(topic, "partition", t.cleanup_policy, t.check_expected_offsets,
                                      t.max_message_bytes, keyless => key IS NULL, size_bytes => NULL,
                                      staged => false);
    -- (A key with NUL never gets here: PostgreSQL's text cannot hold one.) The escape \u0000,
    -- not an escaped backslash followed by u0000.
    IF headers_text ~ '(^|[^\\])(\\\\)*\\u0000' THEN
        RAISE EXCEPTION 'INVALID_REQUEST: headers cannot hold NUL (U+0000)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- jsonb refuses what the json type lets through and readers' parsers refuse: a lone
    -- surrogate escape, high (\ud800-\udbff) or low (\udc00-\udfff). Only a text holding a
    -- surrogate escape can fail the cast, and only such a text enters the block (each entry is
    -- a subtransaction).
    IF headers_text ~ '\\u[dD][89a-fA-F]' THEN
        BEGIN
            PERFORM headers::jsonb;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'INVALID_REQUEST: headers hold JSON that readers cannot parse back: %', SQLERRM
                USING ERRCODE = 'invalid_parameter_value';
        END;
    END IF;
    IF headers IS NOT NULL AND (json_typeof(headers) <> 'object' OR EXISTS (
            SELECT 1 FROM json_each(headers) h WHERE json_typeof(h.value) <> 'string')) THEN
        RAISE EXCEPTION 'INVALID_REQUEST: headers must be an object of strings, not %', left(headers_text, 100)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- As a Send stores them (orjson's dump of the decoded object): compact, each name once at
    -- its first place with its last value, escaped as orjson escapes (as to_json does).
    IF headers IS NOT NULL THEN
        SELECT '{' || coalesce(string_agg(to_json(h.name)::text || ':' || to_json(h.text)::text, ',' ORDER BY h.first), '') || '}'
        INTO headers_text
        FROM (SELECT e.key AS name, min(e.n) AS first, (array_agg(e.value #>> '{}' ORDER BY e.n DESC))[1] AS text
              FROM json_each(headers) WITH ORDINALITY AS e(key, value, n) GROUP BY e.key) h;
    END IF;
    IF value IS NULL OR json_typeof(value) = 'null' THEN
        value_text := 'null';  -- as a Send stores a value null or omitted: a tombstone
    -- What a Send checks after a cheap search (app/domain/records.py), looked at closely only
    -- where the search hits: a surrogate escape, a number with a 3-digit exponent or 210
    -- digits in a row (209 digits before a point times at most 1e99 stay finite; 210 need not:
    -- with 309, 1 followed by 300 zeros and e10 was taken), a text long enough to nest 255 deep. NUL escapes become spaces for
    -- jsonb, which cannot hold NUL (an escaped backslash before u0000 stays valid JSON too).
    ELSIF value_text ~ '\\u[dD][89a-fA-F]|[eE][+-]?[0-9]{3}|[0-9]{210}' OR length(value_text) > 2 * 254 THEN
        checked := replace(value_text, '\u0000', '\u0020');
        BEGIN
            parsed := checked::jsonb;
        EXCEPTION WHEN numeric_value_out_of_range THEN
            -- jsonb's numeric holds no number from 10^131072 nor one with an exponent below
            -- -16383 or more than 16383 fraction digits, where a float holds many (1e-16384 is
            -- its 0, which a Send takes). Checked instead, as jsonb,
            -- with each number written as a float reads it closely enough: 0 below 10^-400, 1e400
            -- (refused below) from 10^401, else its first 400 significant digits, which tell it
            -- from 2^1024 - 2^970 (309 of them) exactly. What is stored is the value as sent.
            SELECT string_agg(s.piece || coalesce(n.number, ''), '' ORDER BY s.i) INTO checked
            FROM regexp_split_to_table(checked, number_pattern) WITH ORDINALITY s(piece, i)
            LEFT JOIN (
                SELECT m.i, CASE WHEN c.sig = '' OR c.power < -400 THEN '0'
                                 WHEN c.power > 400 THEN '1e400'
                                 ELSE m.g[1] || left(c.sig, 1) || '.' || substr(c.sig, 2, 399) || '0e' || c.power END AS number
                FROM regexp_matches(checked, number_pattern, 'g') WITH ORDINALITY m(g, i)
                CROSS JOIN LATERAL (SELECT ltrim(m.g[2], '0') AS whole, ltrim(m.g[2], '0') || coalesce(m.g[3], '') AS digits,
                                           CASE WHEN m.g[4] IS NULL THEN 0
                                                WHEN length(ltrim(m.g[4], '+-0')) > 9 THEN CASE WHEN m.g[4] LIKE '-%' THEN -1000000000 ELSE 1000000000 END
                                                ELSE m.g[4]::bigint END AS exponent) a
                -- The power of ten of the first significant digit.
                CROSS JOIN LATERAL (SELECT ltrim(a.digits, '0') AS sig,
                                           a.exponent + length(a.whole) - 1 - (length(a.digits) - length(ltrim(a.digits, '0'))) AS power) c
            ) n ON n.i = s.i;
            BEGIN
                parsed := checked::jsonb;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'INVALID_REQUEST: the value is JSON that readers cannot parse back: %', SQLERRM
                    USING ERRCODE = 'invalid_parameter_value';
            END;
        WHEN data_exception THEN
            RAISE EXCEPTION 'INVALID_REQUEST: the value is JSON that readers cannot parse back: %', SQLERRM
                USING ERRCODE = 'invalid_parameter_value';
        END;
        -- 2^1024 - 2^970: from there on a number rounds to infinity as a 64-bit float.
        IF jsonb_path_exists(parsed, 'strict $.** ? (@.type() == "number" && (@ >= 179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792 || @ <= -179769313486231580793728971405303415079934132710037826936173778980444968292764750946649017977587207096330286416692887910946555547851940402630657488671505820681908902000708383676273854845817711531764475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880177904174497792))') THEN
            RAISE EXCEPTION 'INVALID_REQUEST: a number in the value is not finite as a 64-bit float'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- An array or object at level 254 (the value itself is level 0) nests 255 deep.
        IF length(value_text) > 2 * 254
           AND jsonb_path_exists(parsed, 'strict $.**{254} ? (@.type() == "array" || @.type() == "object")') THEN
            RAISE EXCEPTION 'INVALID_REQUEST: the value nests deeper than 254 levels'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF timestamp_ms IS NOT NULL AND timestamp_ms < 0 THEN
        RAISE EXCEPTION 'INVALID_REQUEST: timestamp_ms must be at least 0, not %', timestamp_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A message id as the Python API takes it (app.domain.records.check_message_id): 1 to 255
    -- characters, so that its entry fits record_message_ids' primary key (a longer one failed the
    -- application's commit, in publish_pending). NUL and lone surrogates cannot reach here:
    -- text holds neither.
    IF message_id IS NOT NULL AND NOT char_length(message_id) BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'INVALID_REQUEST: message_id: a message id is 1 to 255 characters, not %', char_length(message_id)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Kafka's max.message.bytes, as a Send checks it (app.domain.topic_config.check_record_size):
    -- the record's bytes as stored, key, value and headers.
    PERFORM outbox.check_topic_config(topic, "partition", t.cleanup_policy, t.check_expected_offsets,
                                      t.max_message_bytes, keyless => key IS NULL,
                                      size_bytes => coalesce(octet_length(key), 0) + coalesce(octet_length(value_text), 0)
                                                    + coalesce(octet_length(headers_text), 0),
                                      staged => false);
    IF message_id IS NOT NULL THEN
        -- Published before (a retry of an application transaction that committed), or
        -- already staged by this transaction: nothing to do. Two transactions staging one
        -- message_id at once both pass; the second to commit fails on record_message_ids'
        -- primary key.
        IF EXISTS (SELECT 1 FROM @log_schema@.record_message_ids m
                   WHERE m.topic_id = t.topic_id AND m.message_id = append.message_id)
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
    -- One publication request per transaction, whose deferred trigger publishes every staged
    -- record at the commit: one trigger call per transaction rather than per record.
    INSERT INTO outbox.publish_requests (xact) VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
    RETURN true;
END
$fn$;
