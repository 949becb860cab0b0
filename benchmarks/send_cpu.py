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
from before_after import rate, rotate, services_and_reference, tree_arguments  # noqa: E402
from run import BATCH, Producer, _records, ratio_line  # noqa: E402 - the benchmark's own modules, not a package


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    parser.add_argument("--large", type=int, default=BATCH, help="records in a large Send")
    parser.add_argument("--small", type=int, default=10, help="records in a small Send")
    parser.add_argument("--seed", type=int, default=None, help="of the rotation's shuffle (printed; random if not given)")
    args = parser.parse_args(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    sizes = (args.large, args.small)

    with (scratch_database("postgresql", "sendcpu", migrate_with=(args.before, args.after)) as db_url,
          services_and_reference(db_url, args.before, args.after) as (services, raw)):
        producers = {(side, n): (service, Producer(service.url, "plain", records=_records(n)))
                     for side, service in services.items() for n in sizes}
        rotation = rotate(producers, raw, services["after"], rounds=args.rounds, turn_seconds=args.turn_seconds,
                          prefix="sc", rng=random.Random(seed))
    cpu, method = rotation.cpu, rotation.method
    # Producer.turn counts BATCH records a Send: its Sends here carry key[1].
    records = {key: [(counted // BATCH * key[1], took) for counted, took in turns] if key != "raw" else turns
               for key, turns in rotation.turns.items()}

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
