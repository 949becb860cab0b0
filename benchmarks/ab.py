"""Before and after, side by side: two source trees of the service taking turns on one database.

    git worktree add /tmp/outbox-before <commit>
    .venv/bin/python benchmarks/ab.py --before /tmp/outbox-before --db postgresql --rounds 16

Starts one `outbox serve` from each tree (the same venv, each tree's own `app` package) on one
fresh database, and drives plain, UUID-keyed, idempotent and transactional producers (a Commit after each Send: version
1, version 2, and version 2 with the Send in the Commit; and version 2 with a Commit every 100 ms) against both, with
the database's own insert (COPY on PostgreSQL) as the reference, in turns of half a second
taken in rotation: every path meets the same drift of the machine (docs/benchmarks.md). Prints
records/s, service CPU µs per record and each path's ratio to the reference, before and after,
with the spread of the ratio over each quarter of the rounds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from before_after import rate, rotate, services_and_reference, tree_arguments  # noqa: E402
from run import BATCH, Producer, _records_keyed_by_uuid, ratio_line  # noqa: E402 - the benchmark's own modules, not a package


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    args = parser.parse_args(argv)

    # Both trees share the schema: migrated with the older one, then the newer one.
    with (scratch_database(args.db, "ab", migrate_with=(args.before, args.after)) as db_url,
          services_and_reference(db_url, args.before, args.after) as (services, raw)):
        paths = {}
        for side, service in services.items():
            for name, producer in (
                ("plain", Producer(service.url, "plain")),
                ("plain, UUID keys", Producer(service.url, "plain", records=_records_keyed_by_uuid(BATCH))),
                ("idempotent", Producer(service.url, "idempotent")),
                ("transactional, commit / Send", Producer(service.url, "transactional", f"ab-{side}")),
                ("transactional v2, commit / Send", Producer(service.url, "transactional", f"ab2-{side}",
                                                             transaction_version=2)),
                # The path the transactional target is set on (run.py's "commit / 100 ms"): many
                # Sends a transaction, all but the first of a running one.
                ("transactional v2, commit / 100 ms", Producer(service.url, "transactional", f"ab2h-{side}",
                                                               commit_every_ms=100.0, transaction_version=2)),
                ("transactional v2, last Send in the Commit", Producer(service.url, "transactional", f"ab2f-{side}",
                                                                       transaction_version=2,
                                                                       commit_carries_last_send=True)),
            ):
                paths[(side, name)] = (service, producer)
        rotation = rotate(paths, raw, services["after"], rounds=args.rounds, turn_seconds=args.turn_seconds,
                          prefix="ab")
    turns, cpu, method = rotation.turns, rotation.cpu, rotation.method

    print(f"# {args.db}: {args.rounds} rounds of {args.turn_seconds:g} s turns; reference: raw {method}\n")
    print("| path | side | records/s | service CPU µs / record |\n| --- | --- | ---: | ---: |")
    for key in paths:
        n = sum(records for records, _ in turns[key])
        print(f"| {key[1]} | {key[0]} | {rate(turns[key]):,.0f} | {cpu[key] / n * 1e6:.1f} |")
    print(f"| raw {method}, no HTTP | | {rate(turns['raw']):,.0f} | |")
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    for name in dict.fromkeys(key[1] for key in paths):
        for side in services:
            a = turns[(side, name)]
            print(ratio_line(f"{name}, {side} ÷ raw {method}", rate(a) / rate(turns["raw"]), a, turns["raw"]))
        a, b = turns[("after", name)], turns[("before", name)]
        print(ratio_line(f"{name}, after ÷ before", rate(a) / rate(b), a, b))
    return 0


if __name__ == "__main__":
    sys.exit(main())
