"""aiokafka's plain and idempotent producers through the Kafka door, in the same run.

    .venv/bin/python benchmarks/aiokafka_door.py                       # PostgreSQL
    .venv/bin/python benchmarks/aiokafka_door.py --db sqlite --rounds 8
    .venv/bin/python benchmarks/aiokafka_door.py --tree /tmp/outbox-before   # another checkout's service

benchmarks/kafka_door.py's counterpart for a producer that does not busy-wait: librdkafka's
idempotent producer keeps one request out and its broker thread spins while it waits
(docs/benchmarks.md, 2026-11-30), on the cores the service needs. aiokafka's waits on its
event loop. One `outbox serve` with its Kafka listener on a scratch database; in turns of
`--turn-seconds` taken in an order shuffled afresh each round (from a printed seed), each
producer sends kafka_door.py's records to a topic of its own, one partition, `acks=all`,
linger 5 ms, batches up to 1 MiB, and waits for every delivery at the turn's end. Prints per
producer the records a second, the CPU a record of the service, this process (the client) and
the database's backends, the door's Produce requests (records a request, its time on each from
its outbox_kafka_request_duration_seconds, the share of the turns it was busy), and
idempotent ÷ plain with its extremes over each quarter of the rounds. aiokafka builds its
batches in Python: its CPU a record is the client's bound, not the door's.
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
from kafka_door import KEYS, VALUE_BYTES, _door_produce  # noqa: E402 - the benchmark's own modules, not a package
from run import ROOT, Cpu, CpuMeter, Service, Turn, _free_port, create_topic, ratio_line  # noqa: E402
from scratch import scratch_database  # noqa: E402

MODES = ("plain", "idempotent")
# Deliveries awaited at most this many at a time: the producer's own buffer bounds the rest.
AWAIT_EVERY = 20_000


async def _started(port: int, *, idempotent: bool) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks="all", linger_ms=5,
                                max_batch_size=1 << 20, enable_idempotence=idempotent)
    await producer.start()
    return producer


async def _turn(producer: AIOKafkaProducer, topic: str, seconds: float) -> Turn:
    n, pending = 0, []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pending.append(await producer.send(topic, VALUE_BYTES, key=KEYS[n % len(KEYS)], partition=0))
        n += 1
        if len(pending) >= AWAIT_EVERY:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
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
    with scratch_database(args.db, "aiokafka", migrate_with=(args.tree,)) as db_url:
        port = _free_port()
        service = Service(db_url, args.tree, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{port}")
        meter = CpuMeter(service, db_url)
        producers: dict[str, AIOKafkaProducer] = {}
        try:
            for mode in MODES:
                create_topic(service.url, f"aiokafka-{mode}", 1)
                producers[mode] = loop.run_until_complete(_started(port, idempotent=mode == "idempotent"))
                loop.run_until_complete(_turn(producers[mode], f"aiokafka-{mode}", 0.3))  # warm-up, not counted
            for _ in range(args.rounds):
                order = list(MODES)
                rng.shuffle(order)
                for mode in order:
                    d0 = _door_produce(service.url)
                    turn, used = meter.measure(lambda mode=mode: loop.run_until_complete(
                        _turn(producers[mode], f"aiokafka-{mode}", args.turn_seconds)))
                    d1 = _door_produce(service.url)
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
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    print(ratio_line("aiokafka idempotent ÷ aiokafka plain", rate["idempotent"] / rate["plain"],
                     turns["idempotent"], turns["plain"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
