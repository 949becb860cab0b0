"""Where one large idempotent Produce's latency goes, in-process, for COPY piece sizes side by side.

    .venv/bin/python benchmarks/produce_phases.py --records 9000 --pieces 1048576,131072 --reps 25

On a scratch PostgreSQL database (or --db sqlite), one idempotent producer sends batches of
`--records` records (benchmarks/run.py's value, keys k0, k1, ...: what librdkafka's idempotent
producer sends through the Kafka door, one request at a time) straight to Produce's partition
path (`ProduceApi._produce_partition`: no socket, and no request decoding, ACL check or answer
building, so "Produce (whole)" is that path), each piece size of `--pieces` (app.storage.record_rows
COPY_PIECE_CHARS) in turn, `--reps` rounds. Each phase's wall time is taken by wrapping the
functions that do it: the door's decode and check (`send_batch`), the topics' checks
(`batches_to_append`), the offsets statement, the building of the COPY's pieces, their writes,
the COPY's end (psycopg waits there for the backend to store what it was sent), and the whole.
A round's first request is left out. Medians and extremes, in ms, and each later size's
difference from the first, round by round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
from aiokafka.record.default_records import DefaultRecordBatchBuilder

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import VALUE  # noqa: E402 - the benchmark's own modules, not a package

from app.composition import Services  # noqa: E402
from app.domain.clock import system_clock  # noqa: E402
from app.kafka import records as kafka_records  # noqa: E402
from app.kafka.decompressed import DecompressedBudget  # noqa: E402
from app.kafka.produce import ProduceApi  # noqa: E402
from app.services import log_service  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import append, dialect, record_rows  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402

VALUE_BYTES = orjson.dumps(VALUE)
PHASES = ("decode and check (send_batch)", "topics' checks (batches_to_append)", "offsets statement",
          "COPY: build the pieces", "COPY: write", "COPY: end (the backend finishing)", "COPY (whole)",
          "LogService.send (whole)", "Produce (whole)")


class Phases:
    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.pieces = 0

    def add(self, name: str, seconds: float) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds

    def timed(self, name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - start)
        return wrapper

    def timed_pieces(self, make: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        def pieces(*args: Any, **kwargs: Any) -> Iterator[Any]:
            made = make(*args, **kwargs)
            while True:
                start = time.perf_counter()
                piece = next(made, None)
                self.add("COPY: build the pieces", time.perf_counter() - start)
                if piece is None:
                    return
                self.pieces += 1
                yield piece
        return pieces


def _batch(records: int, producer_id: int, epoch: int, base_sequence: int) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, 0, producer_id, epoch, base_sequence, 2**31 - 1)
    for i in range(records):
        b.append(i, 1_700_000_000_000 + i, f"k{i}".encode(), VALUE_BYTES, [])
    return bytes(b.build())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--records", type=int, default=9_000)
    parser.add_argument("--pieces", default=f"{1 << 20},{record_rows.COPY_PIECE_CHARS}")
    parser.add_argument("--reps", type=int, default=25)
    args = parser.parse_args(argv)
    sizes = list(dict.fromkeys(int(x) for x in args.pieces.split(",")))
    phases = Phases()
    kafka_records.send_batch = phases.timed(PHASES[0], kafka_records.send_batch)
    log_service.batches_to_append = phases.timed(PHASES[1], log_service.batches_to_append)
    append.take_offsets_with = phases.timed(PHASES[2], append.take_offsets_with)
    append.take_offsets = phases.timed(PHASES[2], append.take_offsets)
    record_rows._copy_pieces = phases.timed_pieces(record_rows._copy_pieces)
    psycopg.Copy.write = phases.timed(PHASES[4], psycopg.Copy.write)  # type: ignore[method-assign]
    psycopg.Copy.__exit__ = phases.timed(PHASES[5], psycopg.Copy.__exit__)  # type: ignore[method-assign]
    dialect.copy_pieces = phases.timed(PHASES[6], dialect.copy_pieces)
    dialect.bulk_insert = phases.timed(PHASES[6], dialect.bulk_insert)

    with scratch_database(args.db, "producephases") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False, console_lag_interval_ms=0)
        db = Database(build_engine(url, pool_size=5))
        try:
            services = Services.build(settings, db, system_clock)
            services.topics.create("t", 1)
            producer = services.coordinator.init_producer_id(transactional_id=None, transaction_timeout_ms=None)
            services.log.send = phases.timed(PHASES[7], services.log.send)  # type: ignore[method-assign]
            produce = ProduceApi(services)
            rounds: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
            pieces: dict[int, int] = {}
            sequence = 0
            for _ in range(args.reps):
                for size in sizes:
                    record_rows.COPY_PIECE_CHARS = size
                    data = _batch(args.records, producer.producer_id, producer.producer_epoch, sequence)
                    sequence += args.records
                    phases.times, phases.pieces = {}, 0
                    start = time.perf_counter()
                    budget = DecompressedBudget(settings.kafka_socket_request_max_bytes)
                    done = produce._produce_partition("t", 0, data, None, 9, budget)
                    phases.add(PHASES[8], time.perf_counter() - start)
                    assert done.code == 0, (done.code, done.message)
                    rounds[size].append(phases.times)
                    pieces[size] = phases.pieces
        finally:
            db.dispose()
    print(f"# {args.db}, {args.records} records a Produce, {args.reps} rounds (the first left out), ms: "
          "median (least-most)\n")
    print("| phase | " + " | ".join(f"pieces of {s:,} chars ({pieces[s]} a Produce)" for s in sizes) + " |")
    print("| --- |" + " ---: |" * len(sizes))
    for name in PHASES:
        cells = []
        for size in sizes:
            ms = [r.get(name, 0.0) * 1e3 for r in rounds[size][1:]]
            cells.append(f"{statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    # Each later size against the first, request by request of one round (the same moment of
    # the machine): the median of the differences, and their quarters.
    for size in sizes[1:]:
        for name in ("COPY (whole)", "Produce (whole)"):
            diffs = sorted((later.get(name, 0.0) - first.get(name, 0.0)) * 1e3
                           for first, later in zip(rounds[sizes[0]][1:], rounds[size][1:]))
            q1, median, q3 = statistics.quantiles(diffs, n=4)
            print(f"\n{name}, pieces of {size:,} less pieces of {sizes[0]:,} in the same round: "
                  f"median {median:+.1f} ms (quartiles {q1:+.1f} to {q3:+.1f}), {len(diffs)} rounds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
