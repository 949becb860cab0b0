"""kafkajs (npm, pinned in tests/kafka/kafkajs/package-lock.json) drives the listener: a
consume-transform-produce loop whose transactions carry the group's offsets (`sendOffsets`),
an aborted transaction that its read_committed consumer never sees, and two consumers of one
group sharing a topic's partitions. kafkajs runs in Node (tests/kafka/kafkajs/clients.js,
which prints what kafkajs gave it); records, offsets and assignments are asserted exactly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import npm_installed_copy
from tests.helpers import batch, create_topic, fetch, send
from tests.kafka.conftest import Listener

CLIENTS = Path(__file__).resolve().parent / "kafkajs"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def kafkajs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of tests/kafka/kafkajs with kafkajs installed from its lock file."""
    return npm_installed_copy(CLIENTS, tmp_path_factory.mktemp("kafkajs"), "the npm package kafkajs")


def _run(kafkajs: Path, kafka: Listener, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(["node", "clients.js", args[0], kafka.bootstrap, *args[1:]], cwd=kafkajs,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _records(lines: list[dict[str, Any]], kind: str) -> list[tuple[Any, ...]]:
    """(member, partition, offset, key, value) of every `kind` line, sorted."""
    return sorted((r["member"], r["partition"], r["offset"], r["key"], r["value"])
                  for r in (line[kind] for line in lines if kind in line))


def _offsets(kafka: Listener, group: str) -> list[tuple[str, int, int]]:
    r = kafka.client.get(f"/v1/groups/{group}/offsets")
    assert r.status_code == 200, r.text
    return [(o["topic"], o["partition"], o["offset"]) for o in r.json()["offsets"]]


def _stored(kafka: Listener, topic: str, partition: int, isolation: str) -> list[tuple[int, Any, Any]]:
    return [(r["offset"], r["key"], r["value"]) for r in fetch(kafka.client, topic, partition,
                                                               isolation=isolation)["records"]]


def test_kafkajs_transactions_commit_their_results_with_the_group_s_offsets(kafkajs: Path, kafka: Listener) -> None:
    create_topic(kafka.client, "in", partitions=2)
    create_topic(kafka.client, "out", partitions=2)
    assert send(kafka.client, [
        {"topic": "in", "partition": 0, "records": [{"key": "a", "value": 1}, {"key": "b", "value": 2}]},
        {"topic": "in", "partition": 1, "records": [{"key": "c", "value": 3}]},
    ]).status_code == 200

    copied = _run(kafkajs, kafka, "copy", "in", "out", "copier", "tx-1", "3")

    assert _records(copied, "copied") == [("tx-1", 0, 0, "a", "1"), ("tx-1", 0, 1, "b", "2"), ("tx-1", 1, 0, "c", "3")]
    assert _offsets(kafka, "copier") == [("in", 0, 2), ("in", 1, 1)]
    assert _stored(kafka, "out", 0, "read_committed") == [(0, "a", 10), (1, "b", 20)]
    assert _stored(kafka, "out", 1, "read_committed") == [(0, "c", 30)]
    assert kafka.client.get("/v1/transactions/tx-1").json()["state"] == "CompleteCommit"
    # kafkajs's own read_committed consumer reads back exactly the results.
    read = _run(kafkajs, kafka, "read", "out", "3", "500")
    assert _records(read, "read") == [("reader", 0, 0, "a", "10"), ("reader", 0, 1, "b", "20"),
                                      ("reader", 1, 0, "c", "30")]


def test_a_kafkajs_aborted_transaction_is_never_read_by_a_read_committed_consumer(
        kafkajs: Path, kafka: Listener) -> None:
    create_topic(kafka.client, "out")

    aborted = _run(kafkajs, kafka, "abort", "out", "tx-2", '"x"', '"y"')
    assert send(kafka.client, [batch("out", 0, ["z"])]).status_code == 200

    assert aborted == [{"aborted": [{"partition": 0, "errorCode": 0, "baseOffset": 0}]}]
    # 0 and 1 the aborted records, 2 the ABORT marker, 3 the plain record sent after.
    assert _stored(kafka, "out", 0, "read_uncommitted") == [(0, None, "x"), (1, None, "y"), (3, None, "z")]
    read = _run(kafkajs, kafka, "read", "out", "1", "1000")
    assert _records(read, "read") == [("reader", 0, 3, None, '"z"')]


def test_two_kafkajs_consumers_share_a_group_s_partitions_and_read_each_record_once(
        kafkajs: Path, kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=4)
    proc = subprocess.Popen(["node", "clients.js", "share", kafka.bootstrap, "orders", "sharers", "4", "8"],
                            cwd=kafkajs, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: list[dict[str, Any]] = []
        while not lines or "ready" not in lines[-1]:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, f"clients.js ended before its group was ready: {proc.stderr.read()}"  # type: ignore[union-attr]
            lines.append(json.loads(line))
        # The records come once both members have their partitions.
        assert send(kafka.client, [batch("orders", p, [f"{p}-0", f"{p}-1"]) for p in range(4)]).status_code == 200
        out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lines += [json.loads(line) for line in out.splitlines()]

    assigned = {line["member"]: line["assigned"] for line in lines if "assigned" in line}
    assert set(assigned) == {"a", "b"} and all(assigned.values())
    assert sorted(assigned["a"] + assigned["b"]) == [0, 1, 2, 3]
    owner = {p: member for member, partitions in assigned.items() for p in partitions}
    assert _records(lines, "read") == sorted(
        (owner[p], p, i, None, f'"{p}-{i}"') for p in range(4) for i in range(2))
    assert _offsets(kafka, "sharers") == [("orders", p, 2) for p in range(4)]
