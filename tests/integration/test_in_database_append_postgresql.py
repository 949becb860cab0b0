"""PostgreSQL's outbox.append: callable from any language inside the application's own
transaction, governed by grants, holding no lock of the log while the application's
transaction runs, and handing out offsets in the order the transactions commit."""

from __future__ import annotations

import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from app.services.log_cleaner import LogCleaner
from app.storage import roles

from tests.helpers import create_topic, fetch
from tests.integration.test_in_database_append import ORDERS, psycopg_url

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def url(db_url: str, client: Any) -> Iterator[str]:
    with psycopg.connect(psycopg_url(db_url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")
        conn.execute(ORDERS)
    create_topic(client, "orders", partitions=2)
    yield psycopg_url(db_url)
    with psycopg.connect(psycopg_url(db_url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS orders")  # the session's database: log tables only


def offsets_and_values(client: Any, partition: int = 0) -> list[tuple[int, Any]]:
    return [(r["offset"], r["value"]) for r in fetch(client, "orders", partition)["records"]]


def send(client: Any, value: Any, partition: int = 0) -> int:
    r = client.post("/v1/records", json={"batches": [{"topic": "orders", "partition": partition,
                                                      "records": [{"value": value}]}]})
    assert r.status_code == 200, r.text
    return r.json()["results"][0]["base_offset"]


def test_an_open_application_transaction_does_not_stop_producers_of_the_partition(url: str, client: Any) -> None:
    with psycopg.connect(url) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, 'k', '\"from the application\"')")
        # The application's transaction is still open: a Send to the same partition must not
        # wait for it (the client's call returns; with a lock held it would hang here).
        done = threading.Event()
        sent: list[int] = []
        producer = threading.Thread(target=lambda: (sent.append(send(client, "from a Send")), done.set()))
        producer.start()
        assert done.wait(10), "the Send waited for the application's open transaction"
        app.commit()
        producer.join()

    assert sent == [0]
    assert offsets_and_values(client) == [(0, "from a Send"), (1, "from the application")]


def test_offsets_follow_the_order_in_which_transactions_commit(url: str, client: Any) -> None:
    with psycopg.connect(url) as first, psycopg.connect(url) as second:
        first.execute("SELECT outbox.append('orders', 0, NULL, '\"appended first, committed last\"')")
        second.execute("SELECT outbox.append('orders', 0, NULL, '\"appended last, committed first\"')")
        second.commit()
        first.commit()

    assert offsets_and_values(client) == [(0, "appended last, committed first"), (1, "appended first, committed last")]


def test_transactions_appending_to_partitions_in_opposite_orders_both_commit(url: str, client: Any) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def application(partitions: list[int], tag: str) -> None:
        try:
            with psycopg.connect(url) as conn:
                for p in partitions:
                    conn.execute("SELECT outbox.append('orders', %s, NULL, %s::json)", (p, f'"{tag}"'))
                barrier.wait()
                conn.commit()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=application, args=([0, 1], "a")),
               threading.Thread(target=application, args=([1, 0], "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert sorted(v for _, v in offsets_and_values(client, 0)) == ["a", "b"]
    assert sorted(v for _, v in offsets_and_values(client, 1)) == ["a", "b"]


def test_a_topic_deleted_before_the_commit_fails_the_commit_and_the_business_row(url: str, client: Any) -> None:
    with psycopg.connect(url) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '1')")
        assert client.delete("/v1/topics/orders").status_code == 204
        with pytest.raises(psycopg.errors.UndefinedObject, match="UNKNOWN_TOPIC_OR_PARTITION"):
            app.commit()
        assert app.execute("SELECT count(*) FROM orders").fetchone() == (0,)


def test_psql_appends_inside_its_own_transaction(url: str, client: Any) -> None:
    def psql(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", script],
                              capture_output=True, text=True, timeout=60)

    committed = psql("BEGIN; INSERT INTO orders VALUES (1, 10);"
                     " SELECT outbox.append('orders', 0, '1', '{\"total\": 10}', '{\"source\": \"psql\"}', 'order-1');"
                     " COMMIT;")
    rolled_back = psql("BEGIN; INSERT INTO orders VALUES (2, 20);"
                       " SELECT outbox.append('orders', 0, '2', '{\"total\": 20}');"
                       " ROLLBACK;")
    refused = psql("BEGIN; SELECT outbox.append('orders', 7, '3', '1'); COMMIT;")

    assert committed.returncode == 0, committed.stderr
    assert rolled_back.returncode == 0, rolled_back.stderr
    assert refused.returncode != 0 and "UNKNOWN_TOPIC_OR_PARTITION: topic 'orders' has partitions 0..1; got 7" in refused.stderr
    records = fetch(client, "orders", 0)["records"]
    assert [(r["offset"], r["key"], r["value"], r["headers"]) for r in records] == [
        (0, "1", {"total": 10}, {"source": "psql"})]


@pytest.fixture
def app_role(url: str) -> Any:
    """A login role of the application's: rights on its own table, and on outbox.append only."""
    role = f"outbox_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT SELECT, INSERT ON orders TO {}").format(sql.Identifier(role)))
    yield role
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def as_role(url: str, role: str) -> str:
    return make_url(url).set(username=role).render_as_string(hide_password=False)


def grant_appender(url: str, role: str, *, topics: list[str] = [], prefixes: list[str] = []) -> None:  # noqa: B006
    """What `outbox grant-appender` does."""
    engine = create_engine(make_url(url).set(drivername="postgresql+psycopg"))
    try:
        roles.grant_appender(engine, role, topics=topics, prefixes=prefixes)
    finally:
        engine.dispose()


def test_an_application_role_appends_only_once_granted_appending(url: str, client: Any, app_role: str) -> None:
    with psycopg.connect(as_role(url, app_role)) as app:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            app.execute("SELECT outbox.append('orders', 0, NULL, '1')")
    grant_appender(url, app_role, topics=["orders"])

    with psycopg.connect(as_role(url, app_role)) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"granted\"')")
        app.commit()

    assert offsets_and_values(client) == [(0, "granted")]


@pytest.mark.parametrize("statement", [
    "SELECT * FROM records",
    "INSERT INTO records (topic_id, \"partition\", \"offset\", timestamp_ms) VALUES (1, 0, 99, 0)",
    "UPDATE partitions SET next_offset = 0",
    "INSERT INTO outbox.pending_records (topic_id, \"partition\", timestamp_ms, size_bytes) VALUES (1, 0, 0, 0)",
    "SELECT outbox.publish_pending()",
], ids=["read the log", "write the log", "move a log end", "stage directly", "call the trigger function"])
def test_an_application_role_with_execute_has_no_right_on_the_log_itself(url: str, app_role: str, statement: str) -> None:
    grant_appender(url, app_role, topics=["orders"])

    with psycopg.connect(as_role(url, app_role)) as app, pytest.raises(
        (psycopg.errors.InsufficientPrivilege, psycopg.errors.FeatureNotSupported)
    ):
        app.execute(statement)


VALUES = [
    "1", "-0.5", '"text"', "null", "[1, {\"a\": [true, false, null]}]", '"e123"', '"\\u0000"',
    "1e308", "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "1e309",
    "-1e309", "1E+400", "[1, {\"deep\": 2e400}]", "1e-400", "9" * 308, "9" * 309, "9" * 400,
    "0." + "9" * 400, "[" * 254 + "]" * 254, "[" * 255 + "]" * 255, '{"a":' * 254 + "1" + "}" * 254,
    '{"a":' * 255 + "1" + "}" * 255, "[" * 254 + "1" + "]" * 254, "[" * 255 + "1" + "]" * 255,
    '"\\ud800"', '"\\\\ud800"', '"\\ud83d\\ude00"', '["\\udc00", 1e300]', "1e1000000",
    "1.79769313486231580793e308", "1.797693134862315807937289714053e308", "-1.797693134862315807937289714054e308",
    "1" + "0" * 300 + "e10", "-" + "9" * 250 + ".5e+60", "1" + "0" * 209 + "e98", "1" + "0" * 210 + "e98",
]
HEADERS = ['{"a": "b"}', '{"a": 1}', "[]", '{"a": "\\u0000"}', '{"\\u0000": "x"}', '{"a": null}', "{}",
           '{"a": "\\\\u0000"}', '{"a": "\\\\\\u0000"}', '{"a": "\\ud800"}', '{"a": "\\ud83d\\ude00"}']


def verdict_of_a_send(client: Any, value: str, headers: str = "null") -> bool:
    body = '{"batches": [{"topic": "orders", "partition": 0, "records": [{"value": %s, "headers": %s}]}]}' % (value, headers)
    r = client.post("/v1/records", content=body, headers={"content-type": "application/json"})
    assert r.status_code in (200, 400, 422), r.text
    return r.status_code == 200


def verdict_of_outbox_append(url: str, value: str, headers: str | None = None) -> bool:
    with psycopg.connect(url) as conn:
        try:
            conn.execute("SELECT outbox.append('orders', 0, NULL, %s::json, %s::json)", (value, headers))
        except psycopg.errors.InvalidParameterValue:
            return False
        finally:
            conn.rollback()
    return True


@pytest.mark.parametrize("value", VALUES, ids=lambda v: v if len(v) < 30 else f"{v[:12]}…({len(v)})")
def test_outbox_append_accepts_exactly_the_values_a_send_accepts(url: str, client: Any, value: str) -> None:
    assert verdict_of_outbox_append(url, value) == verdict_of_a_send(client, value)


@pytest.mark.parametrize("value", ["1" + "0" * 300 + "e10", "[1, -" + "9" * 250 + ".5e+60]"])
def test_outbox_append_refuses_a_number_past_a_float_with_a_two_digit_exponent(url: str, value: str) -> None:
    assert verdict_of_outbox_append(url, value) is False


@pytest.mark.parametrize("headers", HEADERS)
def test_outbox_append_accepts_exactly_the_headers_a_send_accepts(url: str, client: Any, headers: str) -> None:
    assert verdict_of_outbox_append(url, "1", headers) == verdict_of_a_send(client, "1", headers)


def test_outbox_append_stores_a_value_and_headers_as_a_send_stores_them(url: str, client: Any) -> None:
    value, headers = ' {"b": 1, "a": [1, 2.50]} ', '{"x": "1", "y": "é"}'
    verdict_of_a_send(client, value, headers)
    with psycopg.connect(url) as conn:
        conn.execute("SELECT outbox.append('orders', 0, NULL, %s::json, %s::json)", (value, headers))
        conn.commit()
        stored = conn.execute('SELECT value, headers FROM records ORDER BY "offset"').fetchall()

    assert stored[0][0] == stored[1][0] == '{"b": 1, "a": [1, 2.50]}'
    assert [fetched["headers"] for fetched in fetch(client, "orders", 0)["records"]] == [{"x": "1", "y": "é"}] * 2


def test_under_repeatable_read_a_commit_after_another_append_to_its_partition_is_a_serialization_failure(
    url: str, client: Any,
) -> None:
    with psycopg.connect(url) as app:
        app.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"repeatable read\"')")
        send(client, "a Send in between")
        with pytest.raises(psycopg.errors.SerializationFailure):
            app.commit()
        assert app.execute("SELECT count(*) FROM orders").fetchone() == (0,)

    assert offsets_and_values(client) == [(0, "a Send in between")]


def test_an_application_roles_temporary_tables_cannot_stand_in_for_the_log(url: str, client: Any, app_role: str) -> None:
    """outbox.append runs with its owner's rights: a caller's temporary `partitions`, `topics`
    or `records` must not be what it reads or writes (they would be, PostgreSQL looking in
    pg_temp first, unless its search_path puts pg_temp last)."""
    grant_appender(url, app_role, topics=["orders"])

    with psycopg.connect(as_role(url, app_role)) as app:
        app.execute("CREATE TEMP TABLE partitions (topic_id int, \"partition\" int, next_offset bigint, "
                    "log_start_offset bigint, record_count bigint, size_bytes bigint, cleaned_offset bigint)")
        app.execute("INSERT INTO partitions VALUES (1, 0, 1000000, 0, 0, 0, 0)")
        app.execute("CREATE TEMP TABLE records (LIKE pg_temp.partitions)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"real\"')")
        app.commit()

    assert offsets_and_values(client) == [(0, "real")]
    assert send(client, "after") == 1


# Functions and operators of a caller's that match calls of outbox.append's and
# publish_pending's more closely than pg_catalog's (to_json(anyelement), array_agg(anynonarray),
# format(text, VARIADIC "any"), anynonarray || text): each notes that it was called, and the first
# makes its creator a superuser, as the function's owner may.
SHADOWS = [
    "CREATE FUNCTION public.to_json(t text) RETURNS json LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('to_json'); EXECUTE format('ALTER ROLE %I SUPERUSER', '{role}'); "
    "RETURN pg_catalog.to_json(t); END$$",
    "CREATE FUNCTION public.shadow_append(a text[], t text) RETURNS text[] LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('array_agg'); RETURN pg_catalog.array_append(a, t); END$$",
    "CREATE AGGREGATE public.array_agg(text) (sfunc = public.shadow_append, stype = text[], initcond = '{{}}')",
    "CREATE FUNCTION public.format(f text, a integer, b integer) RETURNS text LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('format(text, integer, integer)'); RETURN pg_catalog.format(f, a, b); END$$",
    "CREATE FUNCTION public.format(f text, a text) RETURNS text LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('format(text, text)'); RETURN pg_catalog.format(f, a); END$$",
    # outbox.create_partition_view's own call, format(the view's text, its name, the partition's
    # topic id and number), made while the log's schema was on its path for the CREATE VIEW.
    "CREATE FUNCTION public.format(f text, a text, b integer, c integer) RETURNS text LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('format(text, text, integer, integer)'); "
    "RETURN pg_catalog.format(f, a, b, c); END$$",
    "CREATE FUNCTION public.shadow_cat(a integer, b text) RETURNS text LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('integer || text'); RETURN a::text OPERATOR(pg_catalog.||) b; END$$",
    "CREATE OPERATOR public.|| (leftarg = integer, rightarg = text, function = public.shadow_cat)",
    "CREATE FUNCTION public.shadow_cat(a text, b integer) RETURNS text LANGUAGE plpgsql AS $$BEGIN "
    "INSERT INTO public.shadow_calls VALUES ('text || integer'); RETURN a OPERATOR(pg_catalog.||) b::text; END$$",
    "CREATE OPERATOR public.|| (leftarg = text, rightarg = integer, function = public.shadow_cat)",
]


def test_functions_and_operators_an_appender_creates_are_never_called_by_the_appender_s_functions(
        url: str, client: Any, app_role: str) -> None:
    """outbox.append and publish_pending run as their owner: a role granted appending that may
    create in the log's schema (an application's tables often live there) must not have its own
    functions or operators called in place of pg_catalog's, with the owner's rights; nor may
    the functions that make a new log partition's leaf and view call them."""
    grant_appender(url, app_role, topics=["orders"])
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(app_role)))
    with psycopg.connect(as_role(url, app_role), autocommit=True) as app:
        app.execute("CREATE TABLE public.shadow_calls (name text)")
        app.execute("GRANT INSERT ON public.shadow_calls TO PUBLIC")
        for shadow in SHADOWS:
            app.execute(shadow.format(role=app_role))
    create_topic(client, "created-beside-them", partitions=1)
    with psycopg.connect(as_role(url, app_role)) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, 'k', '{\"a\": [1, 2.5]}', '{\"h\": \"v\", \"i\": \"w\"}', 'm-1', 5)")
        app.execute("SELECT outbox.append('orders', 1, NULL, '\"x\"', '{\"h\": \"v\"}')")
        app.commit()
        calls = app.execute("SELECT name FROM public.shadow_calls").fetchall()
    with psycopg.connect(url, autocommit=True) as admin:
        privileges = admin.execute("SELECT rolsuper, rolcreaterole, rolcreatedb, rolbypassrls FROM pg_roles "
                                   "WHERE rolname = %s", (app_role,)).fetchone()
        published = admin.execute('SELECT "partition", "offset", key, value, headers FROM public.records '
                                  "WHERE topic_id = (SELECT topic_id FROM public.topics WHERE name = 'orders') "
                                  'ORDER BY "partition", "offset"').fetchall()

    assert calls == []
    assert privileges == (False, False, False, False)
    assert published == [(0, 0, "k", '{"a": [1, 2.5]}', '{"h":"v","i":"w"}'), (1, 0, None, '"x"', '{"h":"v"}')]


def test_outbox_append_and_its_commit_take_a_record_under_standard_conforming_strings_off(
        url: str, client: Any) -> None:
    """The functions' regular expressions hold backslashes, which a session's
    standard_conforming_strings = off would read as escapes had they not their own setting."""
    with psycopg.connect(url) as app:
        app.execute("SET standard_conforming_strings = off")
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, 'k', %s::json, %s::json)", ('{"a": "\\ud83d\\ude00", "n": 1e300}', '{"h": "v"}'))
        app.commit()

    assert [(r["key"], r["value"], r["headers"]) for r in fetch(client, "orders", 0)["records"]] == [
        ("k", {"a": "\U0001F600", "n": 1e300}, {"h": "v"})]


@pytest.mark.parametrize(("key", "value", "headers"), [
    (None, '"' + "x" * 18 + '"', None), (None, '"' + "x" * 19 + '"', None),
    ("kk", '"' + "x" * 16 + '"', None), ("kk", '"' + "x" * 17 + '"', None),
    (None, "1", '{"h": "' + "v" * 9 + '"}'), (None, "1", '{"h": "' + "v" * 10 + '"}'),
], ids=["value at the limit", "value a byte over", "key and value at the limit", "a byte over",
        "headers at the limit", "headers a byte over"])
def test_outbox_append_refuses_exactly_the_records_a_send_refuses_as_too_large(
    url: str, client: Any, key: str | None, value: str, headers: str | None,
) -> None:
    assert client.patch("/v1/topics/orders", json={"config": {"max_message_bytes": 20}}).status_code == 200
    body = '{"batches": [{"topic": "orders", "partition": 0, "records": [{"key": %s, "value": %s, "headers": %s}]}]}' % (
        "null" if key is None else f'"{key}"', value, headers or "null")
    sent = client.post("/v1/records", content=body, headers={"content-type": "application/json"})
    with psycopg.connect(url) as conn:
        try:
            conn.execute("SELECT outbox.append('orders', 0, %s, %s::json, %s::json)", (key, value, headers))
            appended = "appended"
        except psycopg.errors.ProgramLimitExceeded as e:
            assert e.diag.message_primary.startswith("MESSAGE_TOO_LARGE: a record of orders/0 is ")
            appended = "MESSAGE_TOO_LARGE"
        finally:
            conn.rollback()

    assert appended == ("appended" if sent.status_code == 200 else sent.json()["error_code"])


# Each as a Send under that config refuses the record (tests/appender_cases.py): a compacted
# topic a record without a key, a topic checking expected offsets a batch without one, a record
# over max_message_bytes.
@pytest.mark.parametrize(("config", "refusal"), [
    ({"cleanup_policy": "compact"}, (psycopg.errors.InvalidParameterValue, "INVALID_RECORD")),
    ({"check_expected_offsets": True}, (psycopg.errors.InvalidParameterValue, "INVALID_REQUEST")),
    ({"max_message_bytes": 2}, (psycopg.errors.ProgramLimitExceeded, "MESSAGE_TOO_LARGE")),
], ids=["compact", "check_expected_offsets", "max_message_bytes"])
def test_a_record_staged_before_the_topic_s_config_changed_is_held_to_the_config_at_its_commit(
        url: str, client: Any, config: dict, refusal: tuple[type[psycopg.Error], str]) -> None:
    """The records of an application's transaction take their offsets at its commit, after
    every record a Send appended before it: they are appended then, and must meet the config of
    then, as a Send running while an alter commits acts wholly on the config before or after it.
    A record without a key staged, the topic made compacted, and the commit published it into a
    compacted topic (which refuses such a record from every door); so with a
    topic made to require expected offsets, or a max_message_bytes the record is over. The
    commit fails, the business row with it, as for a topic deleted before the commit."""
    error, code = refusal
    with psycopg.connect(url) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"staged\"')")
        r = client.patch("/v1/topics/orders", json={"config": config})
        assert r.status_code == 200, r.text
        with pytest.raises(error) as refused:
            app.commit()
        assert (refused.value.diag.message_primary or "").partition(":")[0] == code
        assert app.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert offsets_and_values(client) == []


def test_a_record_staged_before_the_topic_s_config_changed_and_meeting_the_new_one_is_published(
        url: str, client: Any) -> None:
    """Only what the config at the commit refuses fails it: a record with a key, within the new
    max_message_bytes, is published into the topic made compacted."""
    with psycopg.connect(url) as app:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, 'k', '\"staged\"')")
        r = client.patch("/v1/topics/orders", json={"config": {"cleanup_policy": "compact", "max_message_bytes": 9}})
        assert r.status_code == 200, r.text
        app.commit()
    assert offsets_and_values(client) == [(0, "staged")]


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_record_staged_before_the_topic_was_made_compacted_is_refused_at_the_commit_under_a_transaction_snapshot(
        url: str, client: Any, isolation: str) -> None:
    """As under READ COMMITTED (above): the commit that would publish a record without a key
    into a topic made compacted since it was staged fails, whatever the application's isolation
    level; a retry stages it under the config of then. The application's snapshot, taken at its
    first statement, does not show the alter: the commit fails as a serialization failure, which
    an application at these levels is ready to retry."""
    with psycopg.connect(url) as app:
        app.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"staged\"')")
        r = client.patch("/v1/topics/orders", json={"config": {"cleanup_policy": "compact"}})
        assert r.status_code == 200, r.text
        with pytest.raises(psycopg.errors.SerializationFailure):
            app.commit()
        assert app.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert offsets_and_values(client) == []


def test_a_commit_waits_for_an_alter_of_its_topic_in_flight_and_meets_the_config_it_commits(
        url: str, client: Any) -> None:
    """An alter that has changed the topic's row and not committed yet: the application's commit
    waits for it, then holds its records to the config the alter committed (a record without a
    key into a topic made compacted: INVALID_RECORD), rather than publish them under the config
    before it while the alter commits."""
    with psycopg.connect(url) as app, psycopg.connect(url) as alter:
        app.execute("INSERT INTO orders VALUES (1, 10)")
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"staged\"')")
        alter.execute("UPDATE topics SET cleanup_policy = 'compact' WHERE name = 'orders'")
        refused: list[BaseException] = []

        def commit() -> None:
            try:
                app.commit()
            except psycopg.Error as e:
                refused.append(e)

        committing = threading.Thread(target=commit)
        committing.start()
        with psycopg.connect(url, autocommit=True) as watcher:
            for _ in range(200):
                if watcher.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted",
                                   (app.info.backend_pid,)).fetchone() != (0,):
                    break
                committing.join(0.05)
            else:
                raise AssertionError("the commit did not wait for the alter in flight")
        alter.commit()
        committing.join(10)
        assert not committing.is_alive()
        assert [type(e) for e in refused] == [psycopg.errors.InvalidParameterValue]
        assert str(refused[0]).startswith("INVALID_RECORD: topic 'orders' is compacted (cleanup_policy compact)")
    assert offsets_and_values(client) == []


def test_commits_alters_and_deletes_of_their_topics_at_once_never_deadlock(
        url: str, client: Any, services: Any, clock: Any) -> None:
    """publish_pending locks its records' topics, then their partitions; a delete locks its
    topic, then its partitions; an alter its topic alone; a Send partitions alone. Application
    transactions appending to two topics in either order, committing while the topics are
    altered, one of them deleted and created again, and Sends append to both: every commit
    publishes or is refused by the topic's state (deleted, UNKNOWN_TOPIC_OR_PARTITION), and
    none is chosen as a deadlock's victim, nor is any alter, delete or Send. (With the topic
    locked after its partitions instead, a delete here is a deadlock's victim within seconds.)"""
    create_topic(client, "events", partitions=2)
    stop = threading.Event()
    failures: list[str] = []
    published = [0]

    def application(first: str, second: str) -> None:
        with psycopg.connect(url) as app:
            while not stop.is_set():
                try:
                    for topic in (first, second):
                        for partition in (1, 0):
                            app.execute("SELECT outbox.append(%s, %s, 'k', '1')", (topic, partition))
                    app.commit()
                    published[0] += 1
                except psycopg.errors.UndefinedObject:
                    app.rollback()  # the topic deleted (and created again) meanwhile
                except psycopg.Error as e:
                    app.rollback()
                    failures.append(f"{type(e).__name__}: {e}")

    def admin() -> None:
        size = 1000
        while not stop.is_set():
            size = 3000 - size
            for name in ("orders", "events"):
                r = client.patch(f"/v1/topics/{name}", json={"config": {"max_message_bytes": size}})
                if r.status_code not in (200, 404):
                    failures.append(f"alter {name}: {r.status_code} {r.text}")
            r = client.delete("/v1/topics/events")
            if r.status_code not in (204, 404):
                failures.append(f"delete: {r.status_code} {r.text}")
            r = client.post("/v1/topics", json={"name": "events", "partitions": 2})
            if r.status_code not in (201, 409):
                failures.append(f"create: {r.status_code} {r.text}")

    def sender() -> None:
        while not stop.is_set():
            for name in ("events", "orders"):
                r = client.post("/v1/records", json={"batches": [
                    {"topic": name, "partition": p, "records": [{"key": "k", "value": 1}]} for p in (1, 0)]})
                if r.status_code not in (200, 404):
                    failures.append(f"send {name}: {r.status_code} {r.text}")

    threads = [threading.Thread(target=application, args=order) for order in
               [("orders", "events"), ("events", "orders"), ("orders", "events"), ("events", "orders")]]
    threads += [threading.Thread(target=admin), threading.Thread(target=sender)]
    for t in threads:
        t.start()
    stop.wait(4)
    stop.set()
    for t in threads:
        t.join(30)
    _purge_deleted_topics(url, services, clock)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert published[0] > 0


def test_a_commit_publishes_to_a_topic_whose_creation_has_only_just_committed(
        url: str, client: Any, services: Any, clock: Any) -> None:
    """A topic's creation is seen committed a moment before its cache invalidations reach the
    other backends (PostgreSQL sends them after the commit is visible, and sends its catalog
    rows' invalidations before the relation's, so a creation of many partitions widens that
    moment). An application transaction that stages records for the new topic as soon as it
    is seen, beside records for another topic published first (so `records` is already open
    in the publishing backend with its cached list of leaves), commits them: publish_pending
    writes into the partition's leaf by name, which waits for the creation to finish, where an
    INSERT into `records` routed by the stale list found no partition for the row."""
    stop = threading.Event()
    created: list[str] = []
    failures: list[str] = []
    published = [0]

    def application() -> None:
        with psycopg.connect(url) as app:
            while not stop.is_set():
                if not created:
                    continue
                topic = created[-1]
                try:
                    app.execute("SELECT outbox.append('orders', 0, 'k', '1')")
                    app.execute("SELECT outbox.append(%s, 0, 'k', '1')", (topic,))
                    app.commit()
                    published[0] += 1
                except psycopg.errors.UndefinedObject:
                    app.rollback()  # not created yet
                except psycopg.Error as e:
                    app.rollback()
                    failures.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=application) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(20):
            name = f"fresh-{i}"
            created.append(name)
            r = client.post("/v1/topics", json={"name": name, "partitions": 60})
            assert r.status_code == 201, r.text
            stop.wait(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for name in created:
            client.delete(f"/v1/topics/{name}")
        _purge_deleted_topics(url, services, clock)
    assert failures == []
    assert published[0] > 0


def _purge_deleted_topics(url: str, services: Any, clock: Any) -> None:
    """The topics deleted here purged, as the log cleaner purges them (no cleaner runs in these
    tests): left behind, their leaves of `records` (1,200 in the test above) would be locked by
    every later test's reset (TRUNCATE records), past PostgreSQL's lock table ("out of shared
    memory")."""
    LogCleaner(services.db, services.settings, clock).run_once()
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM deleted_topics").fetchone() == (0,)

@pytest.fixture
def commit_settings(url: str) -> Iterator[list[str]]:
    """The synchronous_commit in force when the commit publishes, seen by a deferred trigger
    that fires after outbox.publish_pending's (triggers of one event fire in name order)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE TABLE observed_commit_setting (setting text)")
        admin.execute("CREATE FUNCTION observe_commit_setting() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "INSERT INTO public.observed_commit_setting VALUES (current_setting('synchronous_commit')); "
                      "RETURN NULL; END $$")
        admin.execute("CREATE CONSTRAINT TRIGGER zz_observe_commit_setting AFTER INSERT ON outbox.publish_requests "
                      "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION observe_commit_setting()")
    seen: list[str] = []
    yield seen
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP TRIGGER zz_observe_commit_setting ON outbox.publish_requests")
        admin.execute("DROP FUNCTION observe_commit_setting()")
        admin.execute("DROP TABLE observed_commit_setting")


@pytest.mark.parametrize(("session", "at_commit"), [("off", "on"), ("local", "local"), ("on", "on")])
def test_a_commit_that_publishes_waits_for_the_disk_even_in_a_session_that_would_not(
        url: str, client: Any, commit_settings: list[str], session: str, at_commit: str) -> None:
    # Published records are read at once: a commit lost to a crash after that would take back
    # records readers saw, and hand their offsets out again. A setting that waits is kept.
    with psycopg.connect(url) as app:
        app.execute(f"SET synchronous_commit = {session}")
        app.commit()
        app.execute("SELECT outbox.append('orders', 0, NULL, '\"paid\"')")
        app.commit()
        after = app.execute("SHOW synchronous_commit").fetchone()[0]
        app.commit()
    with psycopg.connect(url) as admin:
        observed = [s for (s,) in admin.execute("SELECT setting FROM observed_commit_setting")]
    assert (observed, after) == ([at_commit], session)  # the session's own setting is back after
    assert offsets_and_values(client) == [(0, "paid")]
