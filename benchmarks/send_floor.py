"""A plain Send against the floor of a Send served by Python, in one run.

    .venv/bin/python benchmarks/send_floor.py --rounds 8

`outbox serve` (this tree) and benchmarks/send_floor_app.py (a bare ASGI app that only decodes
the body and COPYs the records: what any Python service must do for a Send, and nothing the
service's contract adds) each on a scratch PostgreSQL database of its own, driven by the same
plain producer of benchmarks/run.py (1,000-record Sends, and --small-record ones, one
connection each) in turns taken in rotation, in an order shuffled each round from a printed
--seed. Per side: records/s, and CPU µs a record of the server's process and of its database's
backends; from the two sizes, as benchmarks/send_cpu.py, the server's CPU a Send whatever it
carries (fixed) and what each record adds (per record). The ratios say how far the
service's own work is from that floor: where a Send's CPU could go, were it served by the
thinnest Python that still writes the records, and so which design changes could reach
a target such as PGMQ's CPU a record (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import random
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import BATCH, Cpu, CpuMeter, Producer, Service, _free_port, _psycopg_url, _records, create_topic  # noqa: E402

HERE = Path(__file__).resolve().parent


class FloorService(Service):
    """benchmarks/send_floor_app.py under uvicorn, as `outbox serve` runs (httptools, uvloop)."""

    def __init__(self, db_url: str) -> None:
        self.port = _free_port()
        self._start([sys.executable, "-m", "uvicorn", "send_floor_app:app", "--app-dir", str(HERE),
                     "--port", str(self.port), "--http", "httptools", "--loop", "uvloop", "--no-access-log",
                     "--log-level", "warning"],
                    HERE, {"SEND_FLOOR_DSN": _psycopg_url(db_url), "PATH": "/usr/bin:/bin"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--turn-seconds", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=None, help="of each round's order (printed; random if not given)")
    parser.add_argument("--small", type=int, default=10, help="records in a small Send")
    args = parser.parse_args(argv)
    seed = random.randrange(2**32) if args.seed is None else args.seed
    rng = random.Random(seed)

    with ExitStack() as stack:
        service_db = stack.enter_context(scratch_database("postgresql", "sendfloor_service"))
        floor_db = stack.enter_context(scratch_database("postgresql", "sendfloor_floor", migrate_with=()))
        service = Service(service_db)
        stack.callback(service.stop)
        floor = FloorService(floor_db)
        stack.callback(floor.stop)
        sides = {"service": (service, CpuMeter(service, service_db)), "floor": (floor, CpuMeter(floor, floor_db))}  # type: ignore[arg-type]
        for _, meter in sides.values():
            stack.callback(meter.close)
        sizes = (BATCH, args.small)
        paths = [(side, n) for side in sides for n in sizes]
        producers = {(side, n): Producer(sides[side][0].url, "plain", records=_records(n)) for side, n in paths}
        for producer in producers.values():
            stack.callback(producer.close)
        records = dict.fromkeys(paths, 0)
        sends = dict.fromkeys(paths, 0)
        seconds = dict.fromkeys(paths, 0.0)
        cpu = {path: Cpu(database=0.0) for path in paths}
        for r in range(-1, args.rounds):  # round -1: the warm-up, not counted
            for side, n in rng.sample(paths, len(paths)):
                server, meter = sides[side]
                topic = f"floor-{side}-{n}-{r + 1}"
                create_topic(server.url, topic, 1)
                (counted, took), used = meter.measure(lambda: producers[(side, n)].turn(topic, args.turn_seconds))  # noqa: B023
                if r >= 0:
                    # Producer.turn counts BATCH records a Send, whatever its records.
                    sends[(side, n)] += counted // BATCH
                    records[(side, n)] += counted // BATCH * n
                    seconds[(side, n)] += took
                    cpu[(side, n)].add(used)

    print(f"# PostgreSQL, seed {seed}: {args.rounds} rounds of {args.turn_seconds:g} s turns, plain Sends\n")
    print("| side | records a Send | records/s | server CPU µs / Send | server CPU µs / record | database CPU µs / record |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: |")
    rate, server, database, per_send = {}, {}, {}, {}
    for side, n in paths:
        path = (side, n)
        rate[path] = records[path] / seconds[path]
        per_send[path] = cpu[path].service / sends[path] * 1e6
        server[path] = cpu[path].service / records[path] * 1e6
        database[path] = (cpu[path].database or 0.0) / records[path] * 1e6
        print(f"| {side} | {n:,} | {rate[path]:,.0f} | {per_send[path]:,.0f} | {server[path]:.2f} | {database[path]:.2f} |")
    print("\n| side | server CPU a Send, fixed (µs) | per record (µs) |\n| --- | ---: | ---: |")
    for side in sides:
        slope = (per_send[(side, BATCH)] - per_send[(side, args.small)]) / (BATCH - args.small)
        print(f"| {side} | {per_send[(side, args.small)] - slope * args.small:,.0f} | {slope:.2f} |")
    big = lambda side: (side, BATCH)  # noqa: E731
    print(f"\n{BATCH:,}-record Sends, service ÷ floor: records/s {rate[big('service')] / rate[big('floor')]:.2f}, "
          f"server CPU a record {server[big('service')] / server[big('floor')]:.2f}, "
          f"database CPU a record {database[big('service')] / database[big('floor')]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
