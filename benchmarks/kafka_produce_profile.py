"""Where the service's time goes while librdkafka produces through the Kafka listener.

    .venv/bin/python benchmarks/kafka_produce_profile.py                         # plain, idempotent, transactional
    .venv/bin/python benchmarks/kafka_produce_profile.py --modes plain --seconds 8 --keep /tmp/plain.txt

Starts one `outbox serve` with its Kafka listener on a scratch database, drives it with
benchmarks/kafka_door.py's librdkafka producer (the same records, batching and commits), and
samples the service's process with py-spy (`py-spy record --format raw`, extra `bench`) for the
turn. Prints, per mode, the records a second and the service's CPU per record (from /proc),
and the share of the busy samples of each part of a Produce: the decode (aiokafka's reader,
its CRC, the records' iteration), the checks and the batch's construction (app.domain.kafka_records
.kafka_batch), the append (the COPY's row formatting, the rest of LogService.send) and the
asyncio loop. Samples waiting on PostgreSQL, idle threads and the background threads
(listeners, chores) are counted apart, not in the shares. A sample goes to the first part
listed in PARTS that one of its frames names.

Samples are of one turn on a shared machine: the shares move by a few points from run to run.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_door import KafkaPath  # noqa: E402 - the benchmark's own modules, not a package
from run import ROOT, Service, _free_port, create_topic  # noqa: E402
from scratch import scratch_database  # noqa: E402

SAMPLES_PER_S = 200
# (part, substrings of a frame naming it), looked for in this order.
PARTS = [
    ("waiting on PostgreSQL", ["Connection.wait (psycopg", "Connection.notifies", "copy_end", "copy_to ("]),
    ("append: COPY row formatting (psycopg)", ["TextFormatter.write_row", "Copy.write_row"]),
    ("decode: aiokafka reader, CRC, records' iteration",
     ["read_batches (app/kafka", "validate_crc", "send_batch.<locals>.<listcomp>", "DecompressedBudget.take"]),
    ("check: JSON values", ["_each_json", "_json_value", "may_hold_infinite", "orjson"]),
    ("check: UTF-8 of keys and values", ["joined_texts ("]),
    ("build: a RecordToAppend a record", ["kafka_batch.<locals>.<listcomp>"]),
    ("build: sizes", ["record_sizes"]),
    ("build: the columns and the rest of kafka_batch", ["send_batch (app/kafka", "kafka_batch (", "_json_columns",
                                                        "_timestamps_in_range", "_header_texts"]),
    ("append: statements, rows, SQLAlchemy", ["LogService.send"]),
    ("request parse, answer encode (kio)", ["app/kafka/protocol.py"]),
    ("rest of the Produce handler", ["ProduceApi.produce", "ProduceApi._produce_partition"]),
    # The event loop's thread (uvicorn's, which the listener shares) before the other threads.
    ("asyncio loop, thread handoff", ["KafkaListener", "asyncio", "to_thread", "ThreadPoolExecutor"]),
    ("background threads", ["LogChanges", "Chore"]),
]
APART = ("waiting on PostgreSQL", "background threads", "idle")
# A thread whose innermost frame is one of these is waiting: the loop's select, an idle worker.
IDLE_LEAVES = ("Runner.run (", "_worker (concurrent", "Condition.wait", "Event.wait", "sleep (", "Server.main_loop")


def shares(raw: Path) -> tuple[dict[str, int], int]:
    """Samples per part, and the busy samples (all but APART)."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, n = line.rsplit(" ", 1)
        frames = stack.split(";")
        if frames[-1].startswith(IDLE_LEAVES):
            part = "idle"
        else:
            part = next((name for name, keys in PARTS if any(k in f for f in frames for k in keys)), "other")
        counts[part] += int(n)
    return dict(counts), sum(v for k, v in counts.items() if k not in APART)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["plain", "idempotent", "transactional"],
                        choices=["plain", "idempotent", "transactional"])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--keep", type=Path, default=None, help="a path for py-spy's raw samples (one mode)")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if spy is None:
        parser.error("py-spy is not installed: pip install -e '.[bench]'")
    table: dict[str, tuple[float, float, dict[str, int], int]] = {}
    with scratch_database(args.db, "kprof") as url:
        port = _free_port()
        service = Service(url, ROOT, OUTBOX_KAFKA_LISTENER=f"127.0.0.1:{port}")
        try:
            for mode in args.modes:
                topic = f"profile-{mode}"
                create_topic(service.url, topic, 1)
                producer = KafkaPath(f"127.0.0.1:{port}", mode)
                producer.turn(topic, 1.0)  # connections, metadata, the producer id
                with tempfile.TemporaryDirectory() as tmp:
                    raw = args.keep or Path(tmp) / "samples.txt"
                    sampler = subprocess.Popen(
                        [spy, "record", "-p", str(service.proc.pid), "-r", str(SAMPLES_PER_S), "-d", str(args.seconds),
                         "-f", "raw", "-o", str(raw), "--nonblocking"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    cpu = service.cpu_seconds()
                    records, seconds = producer.turn(topic, args.seconds)
                    cpu = service.cpu_seconds() - cpu
                    sampler.wait()
                    parts, busy = shares(raw)
                producer.close()
                table[mode] = (records / seconds, cpu / records * 1e6, parts, busy)
        finally:
            service.stop()
    modes = list(table)
    print(f"# {args.db}: librdkafka through the Kafka listener, {args.seconds} s a mode, "
          f"py-spy at {SAMPLES_PER_S} samples a second")
    print()
    print("| | " + " | ".join(modes) + " |")
    print("| --- |" + " ---: |" * len(modes))
    print("| records/s | " + " | ".join(f"{table[m][0]:,.0f}" for m in modes) + " |")
    print("| service CPU µs / record | " + " | ".join(f"{table[m][1]:.1f}" for m in modes) + " |")
    for name in [p for p, _ in PARTS if p not in APART] + ["other"]:
        print(f"| {name} | " + " | ".join(f"{100 * table[m][2].get(name, 0) / max(table[m][3], 1):.0f} %"
                                            for m in modes) + " |")
    print("| busy samples (the shares' whole) | " + " | ".join(str(table[m][3]) for m in modes) + " |")
    print("| samples apart: waiting on PostgreSQL, background, idle | " + " | ".join(
        ", ".join(str(table[m][2].get(a, 0)) for a in APART) for m in modes) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
