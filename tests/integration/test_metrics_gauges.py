"""GET /metrics' gauges read from the database (app.services.gauges): consumer group lag as GET
/v1/groups/{group_id}/lag counts it, partitions as describe shows them, the oldest open
transaction's age; computed once per OUTBOX_METRICS_GAUGE_INTERVAL_MS with a constant number
of queries, at most OUTBOX_METRICS_MAX_PARTITIONS partitions' series and
OUTBOX_METRICS_MAX_GROUP_PARTITIONS lag series."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import insert, select

from app.settings import Settings
from app.storage.tables import group_offsets, topics
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker
from tests.helpers import batch, begin, create_topic, ident, init_producer, send, statements_run
from tests.integration.test_metrics import scrape, value


def _client(settings: Settings, clock, **changes):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from app.api.app import create_app

    return TestClient(create_app(settings.model_copy(update=changes), clock))


@pytest.fixture
def client(settings: Settings, clock):  # type: ignore[no-untyped-def]
    """Gauges computed on every scrape: each scrape sees what the test just did."""
    with _client(settings, clock, metrics_gauge_interval_ms=0) as c:
        yield c


def statements(client) -> Any:  # type: ignore[no-untyped-def]
    """The SQL statements the app runs inside the block."""
    return statements_run(client.app.state.services.db.engine)


def lag_series(scraped: dict, name: str = "outbox_group_lag") -> dict[tuple[str, str, str], float]:
    return {(labels["group"], labels["topic"], labels["partition"]): v
            for (n, key), v in scraped.items() if n == name for labels in [dict(key)]}


def commit_offset(client, group: str, topic: str, partition: int, offset: int) -> None:  # type: ignore[no-untyped-def]
    r = client.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": topic, "partition": partition, "offset": offset}]})
    assert r.status_code == 200, r.text


def http_lag(client, group: str) -> dict[tuple[str, str, str], int | None]:  # type: ignore[no-untyped-def]
    r = client.get(f"/v1/groups/{group}/lag")
    assert r.status_code == 200, r.text
    return {(group, p["topic"], str(p["partition"])): p["lag"] for p in r.json()["partitions"]}


def test_the_lag_gauge_counts_what_the_http_lag_counts_not_markers_nor_aborted_or_open_records(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["p0", "p1"])]).status_code == 200  # offsets 0, 1
    aborted = init_producer(client, "a")
    begin(client, "a", aborted)
    assert send(client, [batch("orders", 0, ["a0", "a1"], 0)], aborted, "a").status_code == 200  # 2, 3
    assert client.post("/v1/transactions/a/abort", json=ident(aborted)).status_code == 200  # ABORT marker 4
    committed = init_producer(client, "c")
    begin(client, "c", committed)
    assert send(client, [batch("orders", 0, ["c0", "c1", "c2"], 0)], committed, "c").status_code == 200  # 5-7
    assert client.post("/v1/transactions/c/commit", json=ident(committed)).status_code == 200  # COMMIT marker 8
    assert send(client, [batch("orders", 0, ["p9"])]).status_code == 200  # 9
    opened = init_producer(client, "o")
    begin(client, "o", opened)
    assert send(client, [batch("orders", 0, ["o0"], 0)], opened, "o").status_code == 200  # 10, still open
    # A group at each position: the same 11 offsets hold 6 committed records to read from 0.
    for position in (0, 2, 4, 5, 8, 9, 10, 11):
        commit_offset(client, f"g{position:02}", "orders", 0, position)
    scraped = scrape(client)
    expected = {("g00", "orders", "0"): 6, ("g02", "orders", "0"): 4, ("g04", "orders", "0"): 4,
                ("g05", "orders", "0"): 4, ("g08", "orders", "0"): 4, ("g09", "orders", "0"): 1,
                ("g10", "orders", "0"): 0, ("g11", "orders", "0"): 0}
    assert lag_series(scraped) == expected
    assert {k: v for p in (0, 2, 4, 5, 8, 9, 10, 11) for k, v in http_lag(client, f"g{p:02}").items()} == expected
    assert set(lag_series(scraped, "outbox_group_lag_exact").values()) == {1}
    assert lag_series(scraped, "outbox_group_lag_unknown") == {}


def test_one_groups_http_lag_is_its_own_gauge_series_beside_another_group_on_the_same_partitions(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 2)
    assert send(client, [batch("orders", 0, ["p0", "p1"]), batch("orders", 1, ["q0"])]).status_code == 200
    aborted = init_producer(client, "a")
    begin(client, "a", aborted)
    assert send(client, [batch("orders", 0, ["a0", "a1"], 0), batch("orders", 1, ["a2"], 0)],
                aborted, "a").status_code == 200  # 0: offsets 2, 3; 1: offset 1
    assert client.post("/v1/transactions/a/abort", json=ident(aborted)).status_code == 200  # ABORT 0: 4, 1: 2
    committed = init_producer(client, "c")
    begin(client, "c", committed)
    assert send(client, [batch("orders", 0, ["c0", "c1", "c2"], 0)], committed, "c").status_code == 200  # 0: 5-7
    assert client.post("/v1/transactions/c/commit", json=ident(committed)).status_code == 200  # COMMIT 0: 8
    assert send(client, [batch("orders", 0, ["p9"]), batch("orders", 1, ["q3"])]).status_code == 200  # 0: 9, 1: 3
    opened = init_producer(client, "o")
    begin(client, "o", opened)
    assert send(client, [batch("orders", 0, ["o0"], 0), batch("orders", 1, ["o1"], 0)],
                opened, "o").status_code == 200  # 0: 10, 1: 4, left open
    assert send(client, [batch("orders", 1, ["q5"])]).status_code == 200  # 1: 5
    commit_offset(client, "g", "orders", 0, 2)  # c0-c2 (at 8) and p9 left
    commit_offset(client, "g", "orders", 1, 1)  # q3 and q5 left
    commit_offset(client, "h", "orders", 0, 9)  # p9 left
    commit_offset(client, "h", "orders", 1, 0)  # q0, q3 and q5 left
    scraped = scrape(client)
    assert http_lag(client, "g") == {("g", "orders", "0"): 4, ("g", "orders", "1"): 2}
    assert http_lag(client, "h") == {("h", "orders", "0"): 1, ("h", "orders", "1"): 3}
    assert lag_series(scraped) == {**http_lag(client, "g"), **http_lag(client, "h")}


def test_a_group_that_never_committed_a_partition_is_shown_unknown_not_zero(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 3)
    create_topic(client, "refunds", 1)
    assert send(client, [batch("orders", 0, ["o1", "o2", "o3"]), batch("orders", 2, ["o4"])]).status_code == 200
    assert client.post("/v1/groups/new/members", json={"topics": ["refunds"]}).status_code == 200
    commit_offset(client, "some", "orders", 0, 1)
    scraped = scrape(client)
    assert lag_series(scraped) == {("some", "orders", "0"): 2}
    assert lag_series(scraped, "outbox_group_lag_unknown") == {
        ("new", "refunds", "0"): 1, ("some", "orders", "1"): 1, ("some", "orders", "2"): 1}
    # The HTTP lag shows the same partitions, null where the gauge says unknown.
    assert http_lag(client, "new") == {("new", "refunds", "0"): None}
    assert http_lag(client, "some") == {("some", "orders", "0"): 2, ("some", "orders", "1"): None,
                                        ("some", "orders", "2"): None}
    assert value(scraped, "outbox_group_lag_series_left_out") == 0


def test_offsets_staged_in_an_open_transaction_only_leave_the_lag_unknown(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 1)
    assert send(client, [batch("orders", 0, ["o1", "o2"])]).status_code == 200
    p = init_producer(client, "copier")
    begin(client, "copier", p)
    r = client.post("/v1/transactions/copier/offsets", json={**ident(p), "group_id": "g", "offsets": [
        {"topic": "orders", "partition": 0, "offset": 2}]})
    assert r.status_code == 200, r.text
    scraped = scrape(client)
    assert lag_series(scraped) == {}
    assert lag_series(scraped, "outbox_group_lag_unknown") == {("g", "orders", "0"): 1}
    assert client.post("/v1/transactions/copier/commit", json=ident(p)).status_code == 200
    scraped = scrape(client)
    assert lag_series(scraped) == {("g", "orders", "0"): 0}
    assert lag_series(scraped, "outbox_group_lag_unknown") == {}


def test_partition_gauges_are_what_describe_answers(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 2)
    assert send(client, [batch("orders", 0, ["a", "bb", "ccc"]), batch("orders", 1, ["d"])]).status_code == 200
    p = init_producer(client, "t")
    begin(client, "t", p)
    assert send(client, [batch("orders", 1, ["e"], 0)], p, "t").status_code == 200  # open at offset 1
    r = client.post("/v1/topics/orders/partitions/0/delete-records", json={"offset": 1})
    assert r.status_code == 200, r.text
    described = client.get("/v1/topics/orders").json()["partitions"]
    scraped = scrape(client)
    for name, field in (("outbox_partition_log_start_offset", "log_start_offset"),
                        ("outbox_partition_log_end_offset", "log_end_offset"),
                        ("outbox_partition_high_watermark", "high_watermark"),
                        ("outbox_partition_last_stable_offset", "last_stable_offset"),
                        ("outbox_partition_records", "record_count"),
                        ("outbox_partition_bytes", "size_bytes")):
        assert [value(scraped, name, topic="orders", partition=str(d["partition"])) for d in described] == [
            d[field] for d in described], name
    assert value(scraped, "outbox_partition_log_start_offset", topic="orders", partition="0") == 1
    assert value(scraped, "outbox_partition_log_end_offset", topic="orders", partition="1") == 2
    assert value(scraped, "outbox_partition_last_stable_offset", topic="orders", partition="1") == 1
    assert value(scraped, "outbox_partition_records", topic="orders", partition="1") == 2


def test_the_oldest_open_transactions_age_is_counted_from_when_it_began(client, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    assert value(scrape(client), "outbox_oldest_open_transaction_age_seconds") == 0
    first = init_producer(client, "first")
    begin(client, "first", first)
    assert send(client, [batch("orders", 0, ["x"], 0)], first, "first").status_code == 200
    clock.advance(30_000)
    second = init_producer(client, "second")
    begin(client, "second", second)
    assert send(client, [batch("orders", 0, ["y"], 0)], second, "second").status_code == 200
    clock.advance(12_500)
    scraped = scrape(client)
    assert value(scraped, "outbox_oldest_open_transaction_age_seconds") == 42.5
    assert value(scraped, "outbox_transactions", state="Ongoing") == 2
    assert client.post("/v1/transactions/first/commit", json=ident(first)).status_code == 200
    assert value(scrape(client), "outbox_oldest_open_transaction_age_seconds") == 12.5


def test_a_prepared_transaction_is_open_to_the_oldest_open_transactions_age(client, clock) -> None:  # type: ignore[no-untyped-def]
    # Open has one meaning (age_ms, min_age_ms): a Prepared transaction waiting for its
    # application holds back the last stable offset as an Ongoing one does.
    create_topic(client, "orders")
    p = init_producer(client, "shop")
    txn = begin(client, "shop", p)
    assert send(client, [batch("orders", 0, ["x"], 0)], p, "shop").status_code == 200
    r = client.post("/v1/transactions/shop/prepare", json={**ident(p), "txn_id": txn["txn_id"]})
    assert r.status_code == 200 and r.json()["state"] == "Prepared", r.text
    clock.advance(20_000)
    scraped = scrape(client)
    assert value(scraped, "outbox_oldest_open_transaction_age_seconds") == 20
    assert value(scraped, "outbox_oldest_open_transaction_age_seconds") * 1000 == client.get(
        "/v1/transactions/shop").json()["age_ms"]


def test_scrapes_within_the_interval_share_one_computation(settings, clock) -> None:  # type: ignore[no-untyped-def]
    with _client(settings, clock, metrics_gauge_interval_ms=10_000) as c:
        create_topic(c, "orders")
        commit_offset(c, "g", "orders", 0, 0)
        with statements(c) as first:
            assert lag_series(scrape(c)) == {("g", "orders", "0"): 0}
        assert send(c, [batch("orders", 0, ["late"])]).status_code == 200
        clock.advance(9_999)
        with statements(c) as within:
            scraped = scrape(c)
            scrape(c)
        assert within == []
        assert lag_series(scraped) == {("g", "orders", "0"): 0}  # the first computation's
        clock.advance(1)
        with statements(c) as after:
            assert lag_series(scrape(c)) == {("g", "orders", "0"): 1}
        assert len(after) == len(first) > 0


def test_an_interval_of_0_computes_on_every_scrape(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders")
    with statements(client) as first:
        scrape(client)
    with statements(client) as second:
        scrape(client)
    assert len(second) == len(first) > 0


def test_lag_series_past_the_maximum_are_left_out_and_counted(settings, clock) -> None:  # type: ignore[no-untyped-def]
    with _client(settings, clock, metrics_gauge_interval_ms=0, metrics_max_group_partitions=3) as c:
        create_topic(c, "orders", 2)
        commit_offset(c, "a", "orders", 0, 0)
        commit_offset(c, "a", "orders", 1, 0)
        commit_offset(c, "b", "orders", 0, 0)  # b's partition 1: unknown
        assert c.post("/v1/groups/c/members", json={"topics": ["orders"]}).status_code == 200  # 2 unknown
        scraped = scrape(c)
    # Committed offsets first, then unknown partitions by (group, topic, partition).
    assert lag_series(scraped) == {("a", "orders", "0"): 0, ("a", "orders", "1"): 0, ("b", "orders", "0"): 0}
    assert lag_series(scraped, "outbox_group_lag_unknown") == {}
    assert value(scraped, "outbox_group_lag_series_left_out") == 3


def test_unknown_partitions_past_the_maximum_are_counted_not_held(settings, clock) -> None:  # type: ignore[no-untyped-def]
    with _client(settings, clock, metrics_gauge_interval_ms=0, metrics_max_group_partitions=2) as c:
        create_topic(c, "orders", 50)
        for g in ("a", "b", "c"):
            assert c.post(f"/v1/groups/{g}/members", json={"topics": ["orders"]}).status_code == 200
        reading = c.app.state.services.gauges.read()
        scraped = scrape(c)
    assert [(g.group_id, g.topic, g.partition, g.lag) for g in reading.group_partitions] == [
        ("a", "orders", 0, None), ("a", "orders", 1, None)]
    assert reading.group_partitions_left_out == 148
    assert lag_series(scraped, "outbox_group_lag_unknown") == {("a", "orders", "0"): 1, ("a", "orders", "1"): 1}
    assert value(scraped, "outbox_group_lag_series_left_out") == 148


def test_partition_series_past_the_maximum_are_left_out_and_counted(settings, clock) -> None:  # type: ignore[no-untyped-def]
    with _client(settings, clock, metrics_gauge_interval_ms=0, metrics_max_partitions=3) as c:
        create_topic(c, "refunds", 2)
        create_topic(c, "orders", 2)
        assert send(c, [batch("refunds", 1, ["r"])]).status_code == 200
        reading = c.app.state.services.gauges.read()
        scraped = scrape(c)
    # The first partitions by topic name and partition.
    assert [(p.topic, p.info.partition) for p in reading.partitions] == [("orders", 0), ("orders", 1), ("refunds", 0)]
    for name in ("outbox_partition_log_start_offset", "outbox_partition_log_end_offset",
                 "outbox_partition_high_watermark", "outbox_partition_last_stable_offset", "outbox_partition_records", "outbox_partition_bytes"):
        assert sorted((dict(key)["topic"], dict(key)["partition"]) for (n, key) in scraped if n == name) == [
            ("orders", "0"), ("orders", "1"), ("refunds", "0")], name
    assert scraped[("outbox_partition_series_left_out", frozenset())] == 1


def test_with_room_for_every_partition_none_is_left_out(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 3)

    scraped = scrape(client)

    assert scraped[("outbox_partition_series_left_out", frozenset())] == 0
    assert value(scraped, "outbox_partition_log_end_offset", topic="orders", partition="2") == 0
    assert ("outbox_partition_log_end_offset", frozenset({("topic", "orders"), ("partition", "2")})) in scraped


def test_a_scrape_of_1000_groups_by_10_partitions_costs_as_many_queries_as_one_group(client, database) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "orders", 10)
    assert send(client, [batch("orders", p, ["x", "y"]) for p in range(10)]).status_code == 200
    commit_offset(client, "g0000", "orders", 0, 1)
    with statements(client) as one:
        scraped = scrape(client)
    assert len(lag_series(scraped)) == 1
    with database.write() as conn:
        topic_id = conn.execute(select(topics.c.topic_id).where(topics.c.name == "orders")).scalar_one()
        conn.execute(insert(group_offsets), [
            {"group_id": f"g{g:04}", "topic_id": topic_id, "partition": p, "committed_offset": 1,
             "metadata": None, "committed_ms": 0}
            for g in range(1, 1000) for p in range(10)] + [
            {"group_id": "g0000", "topic_id": topic_id, "partition": p, "committed_offset": 1,
             "metadata": None, "committed_ms": 0} for p in range(1, 10)])
    with statements(client) as many:
        scraped = scrape(client)
    # Partitions, topics, the partitions of committed offsets and their lag counts (each a WITH),
    # committed offsets, the topics of committed and staged offsets (one UNION), subscriptions,
    # transactions by state, hanging ones, the oldest open one (and SQLite's BEGIN).
    assert len(many) == len(one)
    assert len([s for s in one if s.startswith("SELECT")]) == 8
    assert len([s for s in one if s.startswith("WITH")]) == 2
    series = lag_series(scraped)
    assert len(series) == 10_000
    assert set(series.values()) == {1}
    assert value(scraped, "outbox_group_lag_series_left_out") == 0


@pytest.mark.parametrize("chore", ["coordinator", "group_expiry", "producer_expiry", "cleaner"])
def test_a_chores_successful_pass_sets_its_last_success_timestamp(services, clock, chore) -> None:  # type: ignore[no-untyped-def]
    from prometheus_client import REGISTRY

    from app.services.log_cleaner import LogCleaner
    from app.worker.cleaner import CleanerWorker
    from app.worker.group_expiry import GroupExpiryWorker
    from app.worker.producer_expiry import ProducerExpiryWorker

    kind, job = {
        "coordinator": (CoordinatorWorker, services.coordinator),
        "group_expiry": (GroupExpiryWorker, services.group_expiry),
        "producer_expiry": (ProducerExpiryWorker, services.producer_expiry),
        "cleaner": (CleanerWorker, LogCleaner(services.db, services.settings, clock)),
    }[chore]
    name = f"outbox_{chore}_last_success_timestamp_seconds"
    clock.advance(123_456)
    kind(job, clock, ChoreConfig(1_000)).run_once()
    assert REGISTRY.get_sample_value(name) == 1_700_000_123.456

    class Failing(kind):  # type: ignore[valid-type, misc]
        def _pass(self, now: int):  # type: ignore[no-untyped-def]
            raise RuntimeError("the database is down")

    clock.advance(1_000)
    with pytest.raises(RuntimeError):
        Failing(job, clock, ChoreConfig(1_000)).run_once()
    assert REGISTRY.get_sample_value(name) == 1_700_000_123.456
