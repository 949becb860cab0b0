"""Kafka's own clients in consumer groups over the Kafka door: kafka-python and aiokafka
read_committed consumers sharing a group while a second member joins and leaves (each record
read exactly once across the members, counting a record as read once its offset is
committed), a confluent-kafka `subscribe` consumer that commits and a later one that resumes
there, a confluent-kafka static member (KIP-345) restarted without a rebalance, and librdkafka's consume-transform-produce loop with send_offsets_to_transaction from a
subscribed consumer, its group metadata checked (KIP-447). Records asserted exactly."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer

from tests.helpers import batch, create_topic, send
from tests.kafka.conftest import Listener

# Each wait's bound: a starved process (a loaded CI machine) took seconds per request, so that a
# member's first join alone (FindCoordinator, JoinGroup twice, SyncGroup) could use 30 s of it.
TIMEOUT_S = 90
# Short enough that a rebalance is seen within a fraction of a second.
GROUP_CONFIG = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 100, "max_poll_interval_ms": 10_000}
# kafka-python 3.0 drops a join whose SyncGroup answer arrives between two polls (the poll that
# started it timed out): its next poll sends a new JoinGroup, which starts another rebalance. On a
# loaded machine a join takes seconds (a JoinGroup waits for every member to join again), so a
# short poll made each rebalance start the next, and the group never settled within TIMEOUT_S.
# While it rebalances, a kafka-python consumer polls longer than a join takes (and its
# max_poll_interval_ms is longer still, or it would leave the group meanwhile); otherwise it polls
# briefly, so that a stopped consumer closes at once.
KAFKA_PYTHON_JOIN_POLL_MS = 20_000
KAFKA_PYTHON_POLL_MS = 1000
KAFKA_PYTHON_GROUP_CONFIG = {**GROUP_CONFIG, "max_poll_interval_ms": 2 * KAFKA_PYTHON_JOIN_POLL_MS}
# The static members' session timeout: Kafka's default. librdkafka ends a session on its own when
# no Heartbeat of it has been answered for that long: it gives its partitions up as lost and joins
# again under a new member id, which the service takes as a static member's restart (no
# rebalance). With 6 s, a Heartbeat answer held up that long on a loaded machine made A revoke its
# partition and be assigned it again, which the test took for a rebalance (docs/benchmarks.md,
# "static"). The service's clock is the test's: no session ends there whatever this is.
STATIC_SESSION_TIMEOUT_MS = 45_000


def _produce(kafka: Listener, first: int, count: int) -> None:
    """Records `first`..`first+count-1` split over partitions 0 and 1 (even and odd)."""
    for p in (0, 1):
        values = [n for n in range(first, first + count) if n % 2 == p]
        r = send(kafka.client, [batch("orders", p, values)])
        assert r.status_code == 200, r.text


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _expected(count: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of records 0..count-1 as _produce wrote them, in batches of 6."""
    out = []
    for first in range(0, count, 6):
        for p in (0, 1):
            base = (first // 6) * 3
            out.extend((p, base + i, str(n).encode()) for i, n in enumerate(n for n in range(first, first + 6)
                                                                             if n % 2 == p))
    return sorted(out)


def _committed(kafka: Listener) -> list[tuple[int, int]]:
    offsets = kafka.client.get("/v1/groups/g/offsets").json()["offsets"]
    return [(o["partition"], o["offset"]) for o in offsets]


def test_kafka_python_consumers_share_a_group_and_read_each_record_once(kafka: Listener) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.errors import CommitFailedError, RebalanceInProgressError
    from kafka.structs import OffsetAndMetadata

    create_topic(kafka.client, "orders", partitions=2)
    _produce(kafka, 0, 6)
    read: list[tuple[str, int, int, bytes]] = []
    assigned: dict[str, set[int]] = {}
    stop = {"a": threading.Event(), "b": threading.Event()}

    class Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
        """Tells the test a member's assignment as soon as its join ends, inside its poll (the last
        one stays once it is revoked: the test compares it with what the member read)."""

        def __init__(self, name: str) -> None:
            self.name = name
            self.joining = True

        def on_partitions_revoked(self, revoked: Any) -> None:
            self.joining = True

        def on_partitions_assigned(self, given: Any) -> None:
            self.joining = False
            assigned[self.name] = {tp.partition for tp in given}

    def consume(name: str) -> None:
        c = KafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="g", isolation_level="read_committed",
                          enable_auto_commit=False, auto_offset_reset="earliest", **KAFKA_PYTHON_GROUP_CONFIG)
        listener = Assignments(name)
        c.subscribe(["orders"], listener=listener)
        try:
            while not stop[name].is_set():
                timeout_ms = KAFKA_PYTHON_JOIN_POLL_MS if listener.joining else KAFKA_PYTHON_POLL_MS
                for tp, messages in c.poll(timeout_ms=timeout_ms, max_records=1).items():
                    for m in messages:
                        try:
                            c.commit({TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(m.offset + 1, "", -1)})
                        except (CommitFailedError, RebalanceInProgressError):
                            continue  # not read: the next owner of the partition reads it
                        read.append((name, m.partition, m.offset, m.value))
        finally:
            c.close()

    threads = {n: threading.Thread(target=consume, args=(n,), daemon=True) for n in ("a", "b")}
    threads["a"].start()
    _until(lambda: len(read) == 6, "a to read the first records")
    threads["b"].start()
    _until(lambda: assigned.get("b") and assigned.get("a") and not assigned["a"] & assigned["b"],
           "the partitions to be split between a and b")
    _produce(kafka, 6, 6)
    _until(lambda: len(read) == 12, "a and b to read the next records")
    stop["b"].set()
    threads["b"].join(TIMEOUT_S)
    _produce(kafka, 12, 6)
    _until(lambda: len(read) == 18, "a to read the rest after b left")
    stop["a"].set()
    threads["a"].join(TIMEOUT_S)
    assert sorted((p, o, v) for _, p, o, v in read) == _expected(18)
    assert {p for who, p, _, _ in read[6:12] if who == "b"} == assigned["b"] != set()
    assert {who for who, *_ in read[12:]} == {"a"}
    assert _committed(kafka) == [(0, 9), (1, 9)]


def test_aiokafka_consumers_share_a_group_and_read_each_record_once(kafka: Listener) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import CommitFailedError, RebalanceInProgressError

    create_topic(kafka.client, "orders", partitions=2)
    _produce(kafka, 0, 6)
    read: list[tuple[str, int, int, bytes]] = []
    assigned: dict[str, set[int]] = {}

    async def consume(name: str, stop: asyncio.Event) -> None:
        c = AIOKafkaConsumer("orders", bootstrap_servers=kafka.bootstrap, group_id="g",
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest", **GROUP_CONFIG)
        await c.start()
        try:
            while not stop.is_set():
                for tp, messages in (await c.getmany(timeout_ms=50, max_records=1)).items():
                    for m in messages:
                        try:
                            await c.commit({TopicPartition(tp.topic, tp.partition): m.offset + 1})
                        except (CommitFailedError, RebalanceInProgressError):
                            continue
                        read.append((name, m.partition, m.offset, m.value))
                assigned[name] = {tp.partition for tp in c.assignment()}
        finally:
            await c.stop()

    async def until(condition: Any, what: str) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.02)

    async def scenario() -> None:
        stop_a, stop_b = asyncio.Event(), asyncio.Event()
        a = asyncio.create_task(consume("a", stop_a))
        await until(lambda: len(read) == 6, "a to read the first records")
        b = asyncio.create_task(consume("b", stop_b))
        await until(lambda: assigned.get("b") and assigned.get("a") and not assigned["a"] & assigned["b"],
                    "the partitions to be split between a and b")
        await asyncio.to_thread(_produce, kafka, 6, 6)
        await until(lambda: len(read) == 12, "a and b to read the next records")
        stop_b.set()
        await b
        await asyncio.to_thread(_produce, kafka, 12, 6)
        await until(lambda: len(read) == 18, "a to read the rest after b left")
        stop_a.set()
        await a

    asyncio.run(scenario())
    assert sorted((p, o, v) for _, p, o, v in read) == _expected(18)
    assert {p for who, p, _, _ in read[6:12] if who == "b"} == assigned["b"] != set()
    assert {who for who, *_ in read[12:]} == {"a"}
    assert _committed(kafka) == [(0, 9), (1, 9)]


def _subscribed(kafka: Listener, group: str, topic: str, **config: Any) -> Consumer:
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "isolation.level": "read_committed", "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 100, "fetch.wait.max.ms": 100, **config})
    c.subscribe([topic])
    return c


def _poll(c: Consumer, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count} records"
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            got.append(m)
    return got


def test_a_confluent_kafka_subscriber_commits_and_the_next_one_resumes_there(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    _produce(kafka, 0, 6)
    c = _subscribed(kafka, "g", "orders")
    try:
        first = _poll(c, 6)
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted((m.partition(), m.offset(), m.value()) for m in first) == _expected(6)
    assert _committed(kafka) == [(0, 3), (1, 3)]
    _produce(kafka, 6, 6)
    c = _subscribed(kafka, "g", "orders")
    try:
        second = _poll(c, 6)
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted((m.partition(), m.offset(), m.value()) for m in second) == sorted(
        set(_expected(12)) - set(_expected(6)))
    assert _committed(kafka) == [(0, 6), (1, 6)]


def test_consume_transform_produce_with_a_subscribed_consumer_commits_its_offsets_in_the_transaction(
        kafka: Listener) -> None:
    create_topic(kafka.client, "in")
    create_topic(kafka.client, "out")
    assert send(kafka.client, [batch("in", 0, [1, 2, 3])]).status_code == 200
    c = _subscribed(kafka, "ctp", "in")
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "ctp-1", "linger.ms": 0})
    p.init_transactions(TIMEOUT_S)
    try:
        for m in _poll(c, 3):
            p.begin_transaction()
            p.produce("out", value=str(int(m.value()) * 10).encode(), partition=0)
            p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), TIMEOUT_S)
            p.commit_transaction(TIMEOUT_S)
        stale = c.consumer_group_metadata()
        position = c.position(c.assignment())
    finally:
        c.close()  # leaves the group: its generation is over
    out = kafka.client.get("/v1/topics/out/partitions/0/records").json()["records"]
    assert [r["value"] for r in out] == [10, 20, 30]
    offsets = kafka.client.get("/v1/groups/ctp/offsets").json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [("in", 0, 3)]
    # Offsets sent with the metadata of a member that has left are refused (KIP-447).
    p.begin_transaction()
    with pytest.raises(KafkaException) as refused:
        p.send_offsets_to_transaction(position, stale, TIMEOUT_S)
    assert refused.value.args[0].name() == "UNKNOWN_MEMBER_ID"
    p.abort_transaction(TIMEOUT_S)


def test_a_confluent_kafka_static_member_restarted_gets_its_partitions_back_and_the_other_sees_no_rebalance(
        kafka: Listener) -> None:
    """KIP-345 with librdkafka: `group.instance.id` set, a consumer that closes (sending no
    LeaveGroup, as static members do) and starts again within its session timeout takes its
    place back under a new member id, with its partitions, while the other member's rebalance
    callbacks see nothing."""
    create_topic(kafka.client, "orders", partitions=2)
    events: list[tuple[str, str, list[int]]] = []
    warned = _Warnings()

    def static(name: str, instance: str) -> Consumer:
        c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "g", "group.instance.id": instance,
                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                      "session.timeout.ms": STATIC_SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 100,
                      "fetch.wait.max.ms": 100, "logger": warned.logger(name)})
        c.subscribe(["orders"], on_assign=lambda _c, ps: events.append((name, "assign", [p.partition for p in ps])),
                    on_revoke=lambda _c, ps: events.append((name, "revoke", [p.partition for p in ps])))
        return c

    def assigned(name: str) -> list[int] | None:
        last = [e for e in events if e[0] == name]
        return last[-1][2] if last and last[-1][1] == "assign" and last[-1][2] else None

    a, b = static("a", "a-1"), static("b", "b-1")
    try:
        _until(lambda: (a.poll(0.05), b.poll(0.05)) and assigned("a") is not None and assigned("b") is not None
               and sorted(assigned("a") + assigned("b")) == [0, 1], "both members' partitions")
        b_partitions = assigned("b")
        before = list(events)
        b.close()
        started = time.monotonic()
        b = static("b2", "b-1")
        _until(lambda: (a.poll(0.05), b.poll(0.05)) and assigned("b2") is not None, "the restarted member's partitions")
        took = time.monotonic() - started
        for _ in range(20):  # A goes on, and would see a rebalance now if one were under way
            a.poll(0.05)
        after = list(events)
    finally:
        a.close()
        b.close()
    # Closing B revoked its own partitions (in the client); A saw nothing after its assignment.
    # The clients' warnings tell a session a client timed out itself (SESSTMOUT) from a rebalance.
    assert after[len(before):] == [("b", "revoke", b_partitions), ("b2", "assign", b_partitions)], warned.lines
    assert took < STATIC_SESSION_TIMEOUT_MS / 1000  # within the session timeout: no expiry was waited for


class _Warnings(logging.Handler):
    """The librdkafka warnings (and worse) of the consumers whose `logger` it gives, by consumer
    name, as librdkafka hands them to a poll."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def logger(self, name: str) -> logging.Logger:
        logger = logging.getLogger(f"{__name__}.{name}")
        logger.setLevel(logging.WARNING)
        logger.propagate = False
        logger.handlers = [self]
        return logger

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name.rsplit('.', 1)[-1]}: {record.getMessage()}")
