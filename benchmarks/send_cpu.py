"""A plain Send's service CPU, split into what a request costs whatever it carries and what
each record adds, before and after, in one run.

    git worktree add --detach /tmp/outbox-before <commit>
    .venv/bin/python benchmarks/send_cpu.py --before /tmp/outbox-before --rounds 12

Starts one `outbox serve` from each tree (the same venv, each tree's own `app` package, as
benchmarks/ab.py) on one fresh PostgreSQL database, and drives plain producers of `--large`
and `--small`-record Sends against both, in turns taken in rotation, so that every path meets
the same drift of the machine. The service's CPU (user + system, from /proc) per request of
each size gives the per-request part (fixed) and the per-record part (slope) as a line through
the two sizes. A raw COPY of the same rows, made before the rounds, is the reference the
records/s are set against.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import (  # noqa: E402 - the benchmark's own modules, not a package
    BATCH,
    ROOT,
    Producer,
    RawInserter,
    Service,
    _records,
    create_topic,
    ratio_line,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the 'before' service")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the 'after' service")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    parser.add_argument("--large", type=int, default=BATCH, help="records in a large Send")
    parser.add_argument("--small", type=int, default=10, help="records in a small Send")
    parser.add_argument("--seed", type=int, default=None, help="of the rotation's shuffle (printed; random if not given)")
    args = parser.parse_args(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    rng = random.Random(seed)

    with scratch_database("postgresql", "sendcpu", migrate_with=(args.before, args.after)) as db_url:
        services = {"before": Service(db_url, args.before), "after": Service(db_url, args.after)}
        raw = RawInserter(db_url)
        sizes = (args.large, args.small)
        try:
            producers = {(side, n): (service, Producer(service.url, "plain", records=_records(n)))
                         for side, service in services.items() for n in sizes}
            method = raw.methods[-1]
            keys = list(producers)
            records: dict[object, list[tuple[int, float]]] = {key: [] for key in [*keys, "raw"]}
            cpu = dict.fromkeys(keys, 0.0)
            for r in range(args.rounds):
                rng.shuffle(keys)
                for key in keys:
                    service, producer = producers[key]
                    topic = f"sc-{key[0]}-{key[1]}-{r}"
                    create_topic(service.url, topic, 1)
                    before_cpu = service.cpu_seconds()
                    counted, took = producer.turn(topic, args.turn_seconds)
                    cpu[key] += service.cpu_seconds() - before_cpu
                    # Producer.turn counts BATCH records a Send: its Sends here carry key[1].
                    records[key].append((counted // BATCH * key[1], took))
                topic = f"sc-raw-{r}"
                create_topic(services["after"].url, topic, 1)
                records["raw"].append(raw.turn(method, raw.topic_id(topic), args.turn_seconds))
            for _, producer in producers.values():
                producer.close()
        finally:
            raw.close()
            for service in services.values():
                service.stop()

    def rate(turns: list[tuple[int, float]]) -> float:
        return sum(n for n, _ in turns) / sum(took for _, took in turns)

    print(f"# PostgreSQL, seed {seed}: {args.rounds} rounds of {args.turn_seconds:g} s turns; reference: raw {method}\n")
    print("| side | records a Send | Sends | records/s | service CPU µs / Send | µs / record |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    per_send: dict[tuple[str, int], float] = {}
    for side in services:
        for n in sizes:
            done = sum(k for k, _ in records[(side, n)])
            sends = done // n
            per_send[(side, n)] = cpu[(side, n)] / sends * 1e6
            print(f"| {side} | {n:,} | {sends:,} | {rate(records[(side, n)]):,.0f} | {per_send[(side, n)]:,.0f} | "
                  f"{per_send[(side, n)] / n:.2f} |")
    print(f"| raw {method}, no HTTP | | | {rate(records['raw']):,.0f} | | |")
    print("\n| side | per Send, fixed (µs) | per record (µs) |\n| --- | ---: | ---: |")
    for side in services:
        large, small = per_send[(side, args.large)], per_send[(side, args.small)]
        slope = (large - small) / (args.large - args.small)
        print(f"| {side} | {small - slope * args.small:,.0f} | {slope:.2f} |")
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    for n in sizes:
        a, b = records[("after", n)], records[("before", n)]
        print(ratio_line(f"{n:,}-record Sends, after ÷ before, records/s", rate(a) / rate(b), a, b))
        for side in services:
            s = records[(side, n)]
            print(ratio_line(f"{n:,}-record Sends, {side} ÷ raw {method}", rate(s) / rate(records["raw"]), s,
                             records["raw"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
