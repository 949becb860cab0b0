"""A librdkafka consumer reading librdkafka 0038_performance's records through the Kafka
listener, from two source trees on one database, in the same run.

    git worktree add --detach /tmp/outbox-before main
    .venv/bin/python benchmarks/kafka_consume.py --before /tmp/outbox-before --db sqlite
    .venv/bin/python benchmarks/kafka_consume.py --before /tmp/outbox-before --db postgresql

Starts one `outbox serve` with its Kafka listener per tree (`--before`, `--after`: this one by
default; benchmarks/before_after.py's flags, as ab.py and send_cpu.py take them) on a scratch
database migrated by both, produces `--records` records of the test's shape into one partition
through librdkafka (a key of 127 bytes, a value of 100, acks=1, linger.ms 100, as 0038 produces
them), then takes turns of `--turn-seconds` reading them in an
order shuffled afresh each round (from a printed seed): kafka_door.py's KafkaReader, a
read_committed consumer with librdkafka's default fetch sizes (1 MB a partition, as 0038's
consumer), starting over at the log start at the end of the log. Prints records/s and CPU µs
per record of each side (the service's, and on PostgreSQL its database backends': run.py's
CpuMeter), and after ÷ before with its spread over each quarter of the rounds.
"""

from __future__ import annotations

import argparse
import random
import sys
from contextlib import ExitStack, closing
from pathlib import Path

from confluent_kafka import Producer as KafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from before_after import rate, services, tree_arguments  # noqa: E402 - the benchmark's own modules, not a package
from kafka_door import KafkaReader  # noqa: E402
from run import Cpu, CpuMeter, Turn, _free_port, ratio_line  # noqa: E402
from scratch import scratch_database  # noqa: E402

TOPIC = "perf"
KEY_BYTES, VALUE_BYTES = 127, 100  # 0038's: its key text padded with '!', the value the key repeated


def produce(bootstrap: str, records: int) -> None:
    producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 100,
                              "queue.buffering.max.messages": 10_000_000})
    failed = []
    for i in range(records):
        key = f"testid=1, partition=0, msg={i}\n".encode().ljust(KEY_BYTES, b"!")
        producer.produce(TOPIC, key=key, value=(key * 2)[:VALUE_BYTES], partition=0,
                         on_delivery=lambda err, _msg: err is not None and failed.append(err))
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush()
    if failed:
        raise RuntimeError(f"{len(failed)} records not delivered: {failed[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    tree_arguments(parser)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--turn-seconds", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=None, help="of the rotation's shuffle (printed)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    rng = random.Random(seed)
    sides = ("before", "after")
    turns: dict[str, list[Turn]] = {side: [] for side in sides}
    cpu: dict[str, Cpu] = {side: Cpu(database=None) for side in sides}
    ports: dict[str, int] = {}

    def listener(side: str) -> dict[str, str]:
        ports[side] = _free_port()
        return {"OUTBOX_KAFKA_LISTENER": f"127.0.0.1:{ports[side]}", "OUTBOX_KAFKA_AUTO_CREATE_TOPICS": "true",
                "OUTBOX_KAFKA_NUM_PARTITIONS": "1"}

    with (scratch_database(args.db, "consume", migrate_with=(args.before, args.after)) as db_url,
          services(db_url, args.before, args.after, listener) as started, ExitStack() as meters_open):
        meters = {side: meters_open.enter_context(closing(CpuMeter(started[side], db_url))) for side in sides}
        readers = {side: KafkaReader(f"127.0.0.1:{ports[side]}", TOPIC) for side in sides}
        produce(readers["after"].bootstrap, args.records)
        for side in sides:  # a warm-up turn each, not counted
            readers[side].turn(1.0)
        for _ in range(args.rounds):
            order = list(sides)
            rng.shuffle(order)
            for side in order:
                turn, used = meters[side].measure(lambda side=side: readers[side].turn(args.turn_seconds))
                turns[side].append(turn)
                cpu[side].add(used)

    def per_record(side: str, seconds: float | None) -> float | None:
        return None if seconds is None else seconds / sum(n for n, _ in turns[side]) * 1e6

    print(f"# {args.db}: {args.records:,} records of 0038's shape, {args.rounds} rounds of {args.turn_seconds:g} s "
          f"turns, order shuffled each round (--seed {seed}); before: {args.before}, after: {args.after}\n")
    print("| side | records/s | CPU µs / record: service | database |\n| --- | ---: | ---: | ---: |")
    for side in sides:
        database = per_record(side, cpu[side].database)
        print(f"| {side} | {rate(turns[side]):,.0f} | {per_record(side, cpu[side].service):.2f} | "
              f"{'' if database is None else f'{database:.2f}'} |")
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    print(ratio_line("records/s, after ÷ before", rate(turns["after"]) / rate(turns["before"]), turns["after"],
                     turns["before"]))
    service = [per_record(side, cpu[side].service) for side in sides]
    print(f"| service CPU per record, after ÷ before | {service[1] / service[0]:.2f} | |")
    database = [per_record(side, cpu[side].database) for side in sides]
    if None not in database:
        print(f"| database CPU per record, after ÷ before | {database[1] / database[0]:.2f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
