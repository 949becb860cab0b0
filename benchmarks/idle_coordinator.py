"""What an idle coordinator's pass costs, before and after, in one run.

    git worktree add --detach /tmp/outbox-before <commit>
    .venv/bin/python benchmarks/idle_coordinator.py --before /tmp/outbox-before --rounds 8

On one fresh PostgreSQL database with no transactional id (every pass finds nothing, as almost
every pass of a real service does), each round runs `--passes` passes of the coordinator
worker (CoordinatorWorker.run_once, back to back, no interval) in a process of each tree, in
a shuffled order: the tree's own `app` package (PYTHONPATH and cwd, as run.py's Service). It
prints, per tree, the statements SQLAlchemy sent a pass, the wall time a pass, the process's
CPU a pass and the PostgreSQL backend's CPU a pass (/proc of the backends connected to the
database), and the after ÷ before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from before_after import tree_arguments  # noqa: E402 - the benchmark's own modules, not a package

# Run inside each tree's process: its passes, measured.
_PASSES = r"""
import json, os, sys, time
from sqlalchemy import event, text
from app.settings import Settings
from app.storage.engine import open_database
from app.services.transaction_coordinator import TransactionCoordinator
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorWorker

passes = int(sys.argv[1])
settings = Settings(database_url=os.environ["OUTBOX_DATABASE_URL"])
db = open_database(settings, pool_size=1)
clock = lambda: int(time.time() * 1000)
worker = CoordinatorWorker(TransactionCoordinator(db, settings, clock), clock, ChoreConfig(interval_ms=200))
worker.run_once()  # the pool's connection opened, the statements prepared
sent = []
event.listen(db.engine, "before_cursor_execute", lambda *a: sent.append(1))
with db.engine.connect() as c:
    pids = [r[0] for r in c.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"))]

def backend_ticks():
    total = 0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total

ticks, cpu, wall = backend_ticks(), time.process_time(), time.perf_counter()
for _ in range(passes):
    worker.run_once()
wall, cpu, ticks = time.perf_counter() - wall, time.process_time() - cpu, backend_ticks() - ticks
print(json.dumps({"statements": len(sent), "wall": wall, "cpu": cpu, "backend": ticks / os.sysconf("SC_CLK_TCK")}))
"""


def _run(tree: Path, db_url: str, passes: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update({"OUTBOX_DATABASE_URL": db_url, "OUTBOX_LOG_LEVEL": "warning", "PYTHONPATH": str(tree)})
    out = subprocess.run([sys.executable, "-c", _PASSES, str(passes)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--passes", type=int, default=500)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    rng = random.Random(seed)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with scratch_database("postgresql", "idlecoord", migrate_with=(args.before, args.after)) as db_url:
        for _ in range(args.rounds):
            sides = list(runs)
            rng.shuffle(sides)
            for side in sides:
                runs[side].append(_run(getattr(args, side), db_url, args.passes))
    n = args.passes
    print(f"# PostgreSQL, seed {seed}: {args.rounds} rounds of {n} idle passes per tree\n")
    print("| side | statements / pass | wall µs / pass | process CPU µs / pass | backend CPU µs / pass |\n"
          "| --- | ---: | ---: | ---: | ---: |")
    per: dict[tuple[str, str], list[float]] = {}
    for side, rs in runs.items():
        for key in ("statements", "wall", "cpu", "backend"):
            per[(side, key)] = [r[key] / n * (1 if key == "statements" else 1e6) for r in rs]
        print(f"| {side} | {statistics.median(per[(side, 'statements')]):.0f} | "
              + " | ".join(f"{statistics.median(per[(side, k)]):,.0f} ({min(per[(side, k)]):,.0f}–{max(per[(side, k)]):,.0f})"
                           for k in ("wall", "cpu", "backend")) + " |")
    print("\n| after ÷ before, medians over rounds | value |\n| --- | ---: |")
    for key in ("wall", "cpu", "backend"):
        print(f"| {key} | {statistics.median(per[('after', key)]) / statistics.median(per[('before', key)]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
