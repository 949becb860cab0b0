"""The Send path's own CPU in process, before and after: no HTTP, no other process's work.

    .venv/bin/python benchmarks/send_path.py --before /tmp/outbox-before --rounds 6

For each tree (this one is "after" unless --after names another), one process at a time, in
turns: a scratch PostgreSQL database, a topic, and plain Sends of `--records` of run.py's
records each (a decoded body: app.api.send_body's decode and to_domain, then LogService.send),
`--sends` of them a turn after a warm-up. Each turn reports its thread's CPU time (user and
system, the driver's included) per Send, split into the decoding and the rest; the table gives
each tree's median over its turns and the after ÷ before ratio. The database's own CPU is not
in it (another process's): the figures are what the service spends around it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def turn(records: int, sends: int) -> dict[str, float]:
    """One turn in this process (the tree's own `app` first on sys.path): µs of thread CPU per Send."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import orjson

    from scratch import scratch_database

    from app.api.json_body import decode
    from app.api.send_body import SendBody, to_domain
    from app.composition import Services
    from app.settings import Settings
    from app.storage.engine import Database, build_engine

    from run import VALUE  # the benchmark's own record

    body = orjson.dumps({"batches": [{"topic": "t", "partition": 0, "records": [
        {"key": f"k{i}", "value": VALUE} for i in range(records)]}]})
    with scratch_database("postgresql", "sendpath") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        services = Services.build(settings, db, lambda: int(time.time() * 1000))
        services.topics.create("t", 1)
        decoder = SendBody()._decoder
        decoding = sending = 0.0
        for i in range(sends + sends // 5):
            t0 = time.thread_time()
            decoded = to_domain(decode(decoder, body), body, int(time.time() * 1000))
            t1 = time.thread_time()
            services.log.send(decoded.batches, producer_id=None, producer_epoch=None, transactional_id=None)
            t2 = time.thread_time()
            if i >= sends // 5:  # the first fifth warms up
                decoding += t1 - t0
                sending += t2 - t1
        db.engine.dispose()
    return {"decode": decoding / sends * 1e6, "send": sending / sends * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the 'before' side")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the 'after' side (this one)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--sends", type=int, default=300)
    parser.add_argument("--turn", action="store_true", help=argparse.SUPPRESS)  # one turn, in a child
    args = parser.parse_args(argv)
    if args.turn:
        print(json.dumps(turn(args.records, args.sends)))
        return 0
    seen: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        # Alternating which goes first, so that neither always meets the machine's same moment.
        for side in (("before", "after") if r % 2 == 0 else ("after", "before")):
            tree = getattr(args, side).resolve()
            out = subprocess.run(
                [sys.executable, __file__, "--before", str(args.before), "--turn", "--records", str(args.records),
                 "--sends", str(args.sends)],
                cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, check=True, capture_output=True,
                text=True).stdout
            seen[side].append(json.loads(out.strip().splitlines()[-1]))
    print(f"# {args.rounds} rounds, {args.sends} plain Sends of {args.records} records a turn; µs of thread CPU a Send, "
          "median (range)\n")
    print("| part | before | after | after ÷ before |\n| --- | ---: | ---: | ---: |")
    for part in ("decode", "send", "total"):
        cols = []
        for side in ("before", "after"):
            xs = [t["decode"] + t["send"] if part == "total" else t[part] for t in seen[side]]
            cols.append((statistics.median(xs), min(xs), max(xs)))
        print(f"| {part} | {cols[0][0]:,.0f} ({cols[0][1]:,.0f}-{cols[0][2]:,.0f}) | "
              f"{cols[1][0]:,.0f} ({cols[1][1]:,.0f}-{cols[1][2]:,.0f}) | {cols[1][0] / cols[0][0]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
