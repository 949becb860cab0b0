"""Exactly once, end to end: a zombie producer's takeover, and the README's pizza-shop example
(examples/pizza_income.py) under kill -9."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.client import Consumer, Producer, ProducerFencedError

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def _create(url: str, name: str, partitions: int) -> None:
    assert httpx.post(f"{url}/v1/topics", json={"name": name, "partitions": partitions}).status_code == 201


def _all_committed(url: str, topic: str, partitions: int) -> list:
    c = Consumer(url)
    c.assign([(topic, p) for p in range(partitions)])
    out = []
    while got := c.poll(timeout_s=0.3):
        out += got
    c.close()
    return out


def _wait_for(condition, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_zombie_takeover_waits_for_the_stalled_transaction_and_the_zombie_is_fenced(launcher):  # type: ignore[no-untyped-def]
    url = launcher.server(coordinator_interval_ms=100).url
    _create(url, "in", 2)
    _create(url, "out", 2)
    seed = Producer(url)
    for p in range(2):
        for i in range(10):
            seed.send("in", {"p": p, "i": i}, partition=p)
    seed.flush()

    c1 = Consumer(url, "g", session_timeout_ms=1500, max_records=100)
    c1.subscribe(["in"])
    c2 = Consumer(url, "g", session_timeout_ms=1500, max_records=100)
    c2.subscribe(["in"])
    p1 = Producer(url, "t1", transaction_timeout_ms=2500)
    p1.init_transactions()
    p2 = Producer(url, "t2", transaction_timeout_ms=2500)
    p2.init_transactions()
    _wait_for(lambda: c1._pending is not None)  # C1's heartbeat learns of C2's join
    c1.poll(timeout_s=0.1)  # adopts the two-member assignment
    c1.seek_to_committed()  # and forgets what that poll read
    assert len(c1.assignment()) == len(c2.assignment()) == 1
    stalled_tp = c2.assignment()[0]

    # C2 processes its partition inside a transaction, stages offsets, and then stalls: no
    # commit and no heartbeats (a long GC pause, say).
    records = c2.poll(timeout_s=1)
    assert len(records) == 10
    p2.begin_transaction()
    for r in records:
        p2.send("out", {"from": r.value}, partition=r.partition)
    p2.send_offsets_to_transaction(c2.position_offsets(), c2.group_metadata())
    p2.flush()
    c2._stop.set()  # the heartbeat thread stops with the stall

    # C1 goes on; the group drops C2 after its session timeout and hands C1 both partitions.
    # Taking over, C1's offset fetch meets UNSTABLE_OFFSET_COMMIT until P2's transaction
    # has timed out and been aborted, so C1 starts from the last committed offset.
    states_at_takeover: list[str] = []
    output_done = 0
    deadline = time.monotonic() + 30
    while output_done < 20 and time.monotonic() < deadline:
        got = c1.poll(timeout_s=0.5)
        if not got:
            continue
        if stalled_tp in {(r.topic, r.partition) for r in got} and not states_at_takeover:
            states_at_takeover.append(httpx.get(f"{url}/v1/transactions/t2").json()["state"])
        p1.begin_transaction()
        for r in got:
            p1.send("out", {"from": r.value}, partition=r.partition)
        p1.send_offsets_to_transaction(c1.position_offsets(), c1.group_metadata())
        p1.commit_transaction()
        output_done += len(got)
    assert output_done == 20
    assert states_at_takeover == ["CompleteAbort"]

    # The zombie wakes up and tries to commit: fenced.
    with pytest.raises(ProducerFencedError):
        p2.commit_transaction()

    out = [r.value["from"] for r in _all_committed(url, "out", 2)]
    assert sorted((v["p"], v["i"]) for v in out) == [(p, i) for p in range(2) for i in range(10)]
    offsets = httpx.get(f"{url}/v1/groups/g/offsets").json()["offsets"]
    assert sorted((o["partition"], o["offset"]) for o in offsets) == [(0, 10), (1, 10)]
    c1.close()


def _pipeline(url: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "examples.pizza_income", "--url", url, "--transactional-id", "pizza-0",
         "--dead-letter-topic", "orders.dlq",
         "--session-timeout-ms", "1500", "--transaction-timeout-ms", "4000", "--max-records", "15", *extra],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def test_pizza_pipeline_killed_and_restarted_outputs_each_order_exactly_once(launcher):  # type: ignore[no-untyped-def]
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    url = launcher.server(coordinator_interval_ms=100).url
    for topic in ("orders", "income", "orders.dlq"):
        _create(url, topic, 2)
    # The README's orders, and now and then one the example cannot turn into income.
    orders: dict[str, object] = {}
    poison: set[str] = set()
    for i in range(300):
        key = f"order-{i}"
        if rng.random() < 0.05:
            orders[key] = rng.choice(["margherita", {"pizza": "funghi"}, {"pizza": "diavola", "price": "11"}])
            poison.add(key)
        else:
            orders[key] = {"pizza": rng.choice(["margherita", "diavola", "funghi"]), "price": i % 17 + 0.5}
    producer = Producer(url)
    for key, value in orders.items():
        producer.send("orders", value, key=key)
    producer.flush()

    for _ in range(4):  # killed at random points while it works
        proc = _pipeline(url)
        time.sleep(rng.uniform(0.8, 2.5))
        proc.kill()
        proc.wait()
    final = _pipeline(url, "--idle-exit-s", "4")
    assert final.wait(timeout=120) == 0, f"seed {seed}"

    partition_of = {r.key: r.partition for r in _all_committed(url, "orders", 2)}
    income = sorted((r.key, r.partition, r.value) for r in _all_committed(url, "income", 2))
    assert income == sorted(
        (key, partition_of[key], {"amount": value["price"]})  # type: ignore[index]
        for key, value in orders.items() if key not in poison
    ), f"seed {seed}"
    dead = sorted((r.key, r.value) for r in _all_committed(url, "orders.dlq", 2))
    assert dead == sorted((key, orders[key]) for key in poison), f"seed {seed}"
    ends = {p["partition"]: p["log_end_offset"] for p in httpx.get(f"{url}/v1/topics/orders").json()["partitions"]}
    committed = {o["partition"]: o["offset"] for o in httpx.get(f"{url}/v1/groups/pizza-income/offsets").json()["offsets"]}
    assert committed == ends, f"seed {seed}"
