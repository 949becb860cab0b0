"""Topic administration racing other requests, on PostgreSQL (on SQLite the write lock runs one
write transaction at a time, so nothing can interleave).

Each test holds the first request inside its database transaction (its storage step wrapped
to wait before returning), starts the second, waits until PostgreSQL reports that one
waiting for a lock (or finished, which is then the failure the assertions name), and lets
the first commit. So the interleaving is the dangerous one every time, without timing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select, text

from app.domain.errors import (
    InvalidPartitions,
    OffsetOutOfRange,
    TopicHasOpenTransactions,
    UnknownTopicOrPartition,
)
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.domain.records import RecordToAppend
from app.services.log_service import SendBatch
from app.storage import append, topics
from app.storage import transactions as txns
from app.storage.tables import partitions
from tests.helpers import begin, create_topic, init_producer

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


class Held:
    """Wraps `module.name` so that its first call, once done, waits until `release()`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
        self.reached = threading.Event()
        self._release = threading.Event()
        original = getattr(module, name)

        def holding(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if not self.reached.is_set():
                self.reached.set()
                assert self._release.wait(30), "never released"
            return result

        monkeypatch.setattr(module, name, holding)

    def release(self) -> None:
        self._release.set()


class Run(threading.Thread):
    """A call in a thread of its own, its result or exception kept."""

    def __init__(self, call: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.result: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.call()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e

    def outcome(self) -> Any:
        self.join(30)
        assert not self.is_alive(), "still running"
        return self.error if self.error is not None else self.result


def blocked_on_a_lock(database: Any, run: Run) -> bool:
    """Wait until some session of this database waits for a lock (True), or `run` ends (False)."""
    query = text("SELECT count(*) FROM pg_stat_activity "
                 "WHERE datname = current_database() AND wait_event_type = 'Lock'")
    with database.engine.connect() as conn:
        while run.is_alive():
            if conn.execute(query).scalar_one():
                return True
            conn.rollback()
            time.sleep(0.005)
    return False


def hold_then(held: Held, first: Callable[[], Any], second: Callable[[], Any], database: Any) -> tuple[Any, Any, bool]:
    """`first` held inside its transaction while `second` starts; both outcomes, and whether
    `second` had to wait for a lock."""
    a = Run(first)
    assert held.reached.wait(30), a.outcome()
    b = Run(second)
    waited = blocked_on_a_lock(database, b)
    held.release()
    return a.outcome(), b.outcome(), waited


def test_a_delete_waits_for_a_send_starting_a_transaction_in_the_topic_and_refuses(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 2)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    held = Held(monkeypatch, append, "append_batches")

    sent, deleted, waited = hold_then(
        held,
        lambda: services.log.send([SendBatch("t", 1, [RecordToAppend(None, '"a"', None, 0)], base_sequence=0)],
                                  producer_id=p["producer_id"], producer_epoch=p["producer_epoch"],
                                  transactional_id="tx"),
        lambda: services.topics.delete("t"),
        database,
    )

    assert waited
    assert [r.base_offset for r in sent] == [0]
    assert isinstance(deleted, TopicHasOpenTransactions), deleted
    assert deleted.details == {"transactional_ids": ["tx"]}
    assert client.get("/v1/transactions/tx").json()["partitions"] == [
        {"topic": "t", "partition": 1, "first_offset": 0}]


def test_a_delete_waits_for_offsets_being_staged_for_the_topic_and_refuses(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    held = Held(monkeypatch, txns, "stage_offsets")

    staged, deleted, waited = hold_then(
        held,
        lambda: services.coordinator.add_offsets("tx", p["producer_id"], p["producer_epoch"], "g",
                                                 [OffsetToStage("t", 0, 5, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]),
        lambda: services.topics.delete("t"),
        database,
    )

    assert waited
    assert [(o.topic, o.committed_offset) for o in staged.pending_offsets] == [("t", 5)]
    assert isinstance(deleted, TopicHasOpenTransactions), deleted


def test_an_offset_commit_during_a_delete_waits_and_finds_the_topic_gone(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    held = Held(monkeypatch, topics, "delete_topic")

    deleted, committed, waited = hold_then(
        held,
        lambda: services.topics.delete("t"),
        lambda: services.group_offsets.commit("g", [OffsetToStage("t", 0, 5, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)]),
        database,
    )

    assert waited
    assert deleted is None
    assert isinstance(committed, UnknownTopicOrPartition), committed
    assert client.get("/v1/groups/g/offsets").json()["offsets"] == []


def test_a_transactional_send_during_a_delete_waits_and_finds_the_partition_gone(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    held = Held(monkeypatch, topics, "delete_topic")

    deleted, sent, waited = hold_then(
        held,
        lambda: services.topics.delete("t"),
        lambda: services.log.send([SendBatch("t", 0, [RecordToAppend(None, '"a"', None, 0)], base_sequence=0)],
                                  producer_id=p["producer_id"], producer_epoch=p["producer_epoch"],
                                  transactional_id="tx"),
        database,
    )

    assert waited
    assert deleted is None
    assert isinstance(sent, UnknownTopicOrPartition), sent
    assert client.get("/v1/transactions/tx").json()["partitions"] == []


def test_concurrent_add_partitions_create_each_partition_once(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    held = Held(monkeypatch, topics, "add_partitions")

    first, second, waited = hold_then(
        held,
        lambda: services.topics.create_partitions("t", 4),
        lambda: services.topics.create_partitions("t", 4),
        database,
    )

    assert waited
    assert first[0].partition_count == 4
    assert isinstance(second, InvalidPartitions), second
    assert str(second) == "topic 't' already has 4 partitions"
    with database.engine.connect() as conn:
        assert conn.execute(select(partitions.c.partition).order_by(partitions.c.partition)).scalars().all() == [0, 1, 2, 3]


def test_a_larger_add_partitions_waiting_for_another_adds_only_the_rest(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    held = Held(monkeypatch, topics, "add_partitions")

    first, second, waited = hold_then(
        held,
        lambda: services.topics.create_partitions("t", 3),
        lambda: services.topics.create_partitions("t", 5),
        database,
    )

    assert waited
    assert [p.partition for p in first[1]] == [0, 1, 2]
    assert [p.partition for p in second[1]] == [0, 1, 2, 3, 4]


def test_concurrent_alters_of_different_keys_both_take_effect(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    held = Held(monkeypatch, topics, "update_config")

    _, second, waited = hold_then(
        held,
        lambda: services.topics.alter_config("t", {"retention_ms": 1000}),
        lambda: services.topics.alter_config("t", {"retention_bytes": 2000}),
        database,
    )

    assert waited
    assert (second[0].config.retention_ms, second[0].config.retention_bytes) == (1000, 2000)
    config = client.get("/v1/topics/t").json()["config"]
    assert (config["retention_ms"], config["retention_bytes"]) == (1000, 2000)


def test_delete_records_waits_for_a_transaction_starting_in_the_partition_and_refuses_past_it(client, services, database, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", 1)
    client.post("/v1/records", json={"batches": [{"topic": "t", "partition": 0, "records": [{"value": 1}]}]})
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    held = Held(monkeypatch, append, "append_batches")

    sent, moved, waited = hold_then(
        held,
        lambda: services.log.send([SendBatch("t", 0, [RecordToAppend(None, '"a"', None, 0)], base_sequence=0)],
                                  producer_id=p["producer_id"], producer_epoch=p["producer_epoch"],
                                  transactional_id="tx"),
        lambda: services.topics.delete_records("t", 0, 2),
        database,
    )

    assert waited
    assert [r.base_offset for r in sent] == [1]
    assert isinstance(moved, OffsetOutOfRange) and moved.details == {
        "log_start_offset": 0, "last_stable_offset": 1, "log_end_offset": 2}, moved
