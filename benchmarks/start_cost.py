"""What starting the `outbox` program costs, before and after a change, in turns of one run:

- serve: `python -m app.cli serve` on a copy of a migrated SQLite file, from the process's start
  until GET /readyz answers 200 (the process's CPU seconds by then, and wall seconds), then
  stopped;
- local: `python -m app.cli topics list` on the same kind of file, to its exit (CPU seconds of
  the process, user and system, and wall seconds);
- remote: `python -m app.cli topics list --url ...` against a running `serve` of this tree
  (CPU and wall seconds), the remote admin CLI's start.

Each tree runs its own code (`cwd` and PYTHONPATH at the tree) in this venv, the turns in an
order shuffled afresh each round (--seed prints it). Every process is one the test suite and an
operator start many times: the suite's end-to-end, Kafka and Spark tiers start a `serve` or a
command for most tests. Prints each side's median and after ÷ before.

    .venv/bin/python benchmarks/start_cost.py --before /path/to/a/clone --rounds 12
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(tree: Path, database: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as an installed program runs: its bytecode cached
    return {**env, "PYTHONPATH": str(tree), "OUTBOX_DATABASE_URL": f"sqlite:///{database}"}


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) process `pid` has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(proc: subprocess.Popen, port: int, poll_s: float, timeout_s: float = 60) -> None:
    """Until the `serve` process `proc` answers GET /readyz on `port` with 200."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2.0) as client:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"serve ({proc.args}) exited with {proc.returncode}")
            try:
                if client.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"serve ({proc.args}) did not get ready in {timeout_s:.0f} s")
            time.sleep(poll_s)


def serve_until_ready(tree: Path, database: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a `serve` from its start until /readyz answers."""
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=tree,
                            env=env_for(tree, database), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(proc, port, poll_s=0.01)
        return process_cpu(proc.pid), time.monotonic() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def command(tree: Path, database: Path, *args: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one command run to its exit."""
    cpu, started = children_cpu(), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=tree, env=env_for(tree, database),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"`{' '.join(args)}` in {tree} exited {done.returncode}: {done.stderr}")
    return children_cpu() - cpu, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="source tree of the 'before' side")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the 'after' side (this one)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"seed {seed}; before {args.before}, after {args.after}")
    order = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="outbox-start-cost-"))
    try:
        template = work / "template.db"
        subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=args.after,
                       env=env_for(args.after, template), check=True, capture_output=True)
        remote_db = work / "remote.db"
        shutil.copy(template, remote_db)
        port = free_port()
        remote = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--port", str(port)], cwd=args.after,
                                  env=env_for(args.after, remote_db), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            wait_ready(remote, port, poll_s=0.05)
            sides = {"before": args.before, "after": args.after}
            seen: dict[tuple[str, str], list[float]] = {}
            n = 0
            for _ in range(args.rounds + 1):  # the first round warms the caches, not counted
                turns = [(side, what) for side in sides for what in ("serve", "local", "remote")]
                order.shuffle(turns)
                for side, what in turns:
                    n += 1
                    database = work / f"{n}.db"
                    shutil.copy(template, database)
                    if what == "serve":
                        cpu, wall = serve_until_ready(sides[side], database)
                        taken = {"serve cpu s": cpu, "serve wall s": wall}
                    elif what == "local":
                        cpu, wall = command(sides[side], database, "topics", "list")
                        taken = {"local cpu s": cpu, "local wall s": wall}
                    else:
                        cpu, wall = command(sides[side], database, "topics", "list", "--url",
                                            f"http://127.0.0.1:{port}")
                        taken = {"remote cpu s": cpu, "remote wall s": wall}
                    database.unlink()
                    if n > 6:
                        for key, value in taken.items():
                            seen.setdefault((key, side), []).append(value)
        finally:
            remote.terminate()
            remote.wait(timeout=30)
        print(f"{'':16} {'before':>8} {'after':>8} {'after/before':>12}   (medians of {args.rounds} rounds)")
        for key in ("serve cpu s", "serve wall s", "local cpu s", "local wall s", "remote cpu s", "remote wall s"):
            before, after = statistics.median(seen[(key, "before")]), statistics.median(seen[(key, "after")])
            print(f"{key:16} {before:8.3f} {after:8.3f} {after / before:12.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
