"""aiokafka's plain, idempotent and transactional producers through the Kafka door, in the same run.

    .venv/bin/python benchmarks/aiokafka_door.py                       # PostgreSQL
    .venv/bin/python benchmarks/aiokafka_door.py --db sqlite --rounds 8
    .venv/bin/python benchmarks/aiokafka_door.py --tree /tmp/outbox-before   # another checkout's service

benchmarks/kafka_door.py's counterpart for a producer that does not busy-wait: librdkafka's
idempotent producer keeps one request out and its broker thread spins while it waits
(docs/benchmarks.md, 2026-11-30), on the cores the service needs. aiokafka's waits on its
event loop. One `outbox serve` with its Kafka listener on a scratch database; in turns of
`--turn-seconds` taken in an order shuffled afresh each round (from a printed seed), each
producer sends kafka_door.py's records to a topic of its own, one partition, `acks=all`,
linger 5 ms, batches up to 1 MiB, and waits for every delivery at the turn's end; the
transactional one commits a transaction every 100 ms (kafka_door.py's TXN_EVERY_S), as the
issue's target says, its commit in the turn's time. Prints per producer the records a second,
the CPU a record of the service, this process (the client) and the database's backends, the
door's Produce requests (records a request, its time on each from its
outbox_kafka_request_duration_seconds, the share of the turns it was busy; a transactional
producer's AddPartitionsToTxn and EndTxn are not Produce requests and count as not busy; a
line for each says how many there were and the door's time on them), and idempotent ÷ plain and
transactional ÷ plain with their extremes over each quarter of the rounds. aiokafka builds its
batches in Python, and its sender keeps one request out to a broker whatever the producer: its
CPU a record is the client's bound, not the door's.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_door import (  # noqa: E402 - the benchmark's own modules, not a package
    KEYS, TXN_EVERY_S, VALUE_BYTES, _door_requests)
from run import ROOT, Cpu, CpuMeter, Service, Turn, _free_port, create_topic, ratio_line  # noqa: E402
from scratch import scratch_database  # noqa: E402

MODES = ("plain", "idempotent", "transactional")
# The requests of a transaction's bounds: aiokafka (transaction version 1) adds the partition
# before the transaction's first batch and ends it with EndTxn, each a round trip the producer
# waits for.
TRANSACTION_APIS = ("AddPartitionsToTxn", "EndTxn")
# Deliveries awaited at most this many at a time: the producer's own buffer bounds the rest.
AWAIT_EVERY = 20_000


async def _started(port: int, mode: str) -> AIOKafkaProducer:
    # A transactional producer is idempotent too, as Kafka's are.
    transactional_id = f"bench-aiokafka-{random.getrandbits(32)}" if mode == "transactional" else None
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks="all", linger_ms=5,
                                max_batch_size=1 << 20, enable_idempotence=mode != "plain",
                                transactional_id=transactional_id)
    await producer.start()
    return producer


async def _send_until(producer: AIOKafkaProducer, topic: str, deadline: float) -> int:
    """Records sent until `deadline` (perf_counter), every delivery awaited."""
    n, pending = 0, []
    while time.perf_counter() < deadline:
        pending.append(await producer.send(topic, VALUE_BYTES, key=KEYS[n % len(KEYS)], partition=0))
        n += 1
        if len(pending) >= AWAIT_EVERY:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    return n


async def _turn(producer: AIOKafkaProducer, mode: str, topic: str, seconds: float) -> Turn:
    t0 = time.perf_counter()
    deadline = t0 + seconds
    if mode != "transactional":
        return await _send_until(producer, topic, deadline), time.perf_counter() - t0
    n = 0
    while time.perf_counter() < deadline:
        await producer.begin_transaction()
        n += await _send_until(producer, topic, min(deadline, time.perf_counter() + TXN_EVERY_S))
        await producer.commit_transaction()
    return n, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="source tree of the service")
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turn-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=random.randrange(2**32), help="of the rotation's shuffle (printed)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    loop = asyncio.new_event_loop()
    turns: dict[str, list[Turn]] = {m: [] for m in MODES}
    cpu = {m: Cpu(database=None) for m in MODES}
    door = {m: [0.0, 0.0] for m in MODES}  # Produce requests, the door's seconds on them
    # The transactional turns' requests of each of TRANSACTION_APIS, the door's seconds on them.
    bounds = {api: [0.0, 0.0] for api in TRANSACTION_APIS}
    with scratch_database(args.db, "aiokafka", migrate_with=(args.tree,)) as db_url:
        port = _free_port()
        service = Service(db_url, args.tree, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{port}")
        meter = CpuMeter(service, db_url)
        producers: dict[str, AIOKafkaProducer] = {}
        try:
            for mode in MODES:
                create_topic(service.url, f"aiokafka-{mode}", 1)
                producers[mode] = loop.run_until_complete(_started(port, mode))
                loop.run_until_complete(_turn(producers[mode], mode, f"aiokafka-{mode}", 0.3))  # warm-up, not counted
            for _ in range(args.rounds):
                order = list(MODES)
                rng.shuffle(order)
                for mode in order:
                    d0 = _door_requests(service.url)
                    b0 = {api: _door_requests(service.url, (api,)) for api in TRANSACTION_APIS}
                    turn, used = meter.measure(lambda mode=mode: loop.run_until_complete(
                        _turn(producers[mode], mode, f"aiokafka-{mode}", args.turn_seconds)))
                    d1 = _door_requests(service.url)
                    b1 = {api: _door_requests(service.url, (api,)) for api in TRANSACTION_APIS}
                    if mode == "transactional":
                        for api, (count, busy) in b1.items():
                            bounds[api][0] += count - b0[api][0]
                            bounds[api][1] += busy - b0[api][1]
                    turns[mode].append(turn)
                    cpu[mode].add(used)
                    door[mode][0] += d1[0] - d0[0]
                    door[mode][1] += d1[1] - d0[1]
        finally:
            for producer in producers.values():
                loop.run_until_complete(producer.stop())
            loop.close()
            meter.close()
            service.stop()

    import aiokafka

    print(f"# {args.db}: {args.rounds} rounds of {args.turn_seconds:g} s turns, order shuffled each round "
          f"(--seed {args.seed}); aiokafka {aiokafka.__version__}; service from {args.tree}\n")
    print("| aiokafka producer | records/s | CPU µs / record: service | client | database | records / request "
          "| the door's ms / request | the door busy, share of the turns |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rate = {}
    for mode in MODES:
        n, seconds = sum(r for r, _ in turns[mode]), sum(t for _, t in turns[mode])
        rate[mode] = n / seconds
        requests, busy = door[mode]
        c = cpu[mode]
        database = "" if c.database is None else f"{c.database / n * 1e6:.1f}"
        # No Produce request seen (the door's log off, or nothing produced): no per-request figures.
        per_request = f"{n / requests:,.0f} | {busy / requests * 1000:.1f}" if requests else "– | –"
        print(f"| {mode} | {rate[mode]:,.0f} | {c.service / n * 1e6:.1f} | {c.client / n * 1e6:.1f} | {database} | "
              f"{per_request} | {busy / seconds:.2f} |")
    seconds = sum(t for _, t in turns["transactional"])
    for api, (requests, busy) in bounds.items():
        if requests:
            print(f"\nThe transactional producer's {api}: {requests / seconds:.1f} a second, "
                  f"the door's {busy / requests * 1000:.2f} ms on each, {busy / seconds:.3f} of the turns.")
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    for mode in MODES[1:]:
        print(ratio_line(f"aiokafka {mode} ÷ aiokafka plain", rate[mode] / rate["plain"], turns[mode], turns["plain"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
