"""What large Produce frames cost the process beyond their bytes (docs/benchmarks.md, "The
Kafka door's frames in memory"; README, OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES).

    .venv/bin/python benchmarks/kafka_frame_memory.py                            # this tree
    .venv/bin/python benchmarks/kafka_frame_memory.py --before /tmp/frames-before --runs 2

Starts one `outbox serve` with its Kafka listener per tree, on a scratch SQLite file each,
creates a topic of `--format` (bytes, json, or both in turn), and sends it `--frames` Produce
v9 frames at once from as many threads, each one uncompressed batch of 90 records of 1 MB. It
prints the service's resident set (/proc/<pid>/status VmRSS, sampled every 50 ms) before and
at its highest, and that rise as a multiple of the frames' bytes: the ratio is what to size the
process's memory by against the frame budget. With --before DIR (another source tree, e.g.
`git archive main | tar -x -C DIR`), each run measures it first, then this tree.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))

from tests.kafka.conftest import frame, read_frame  # noqa: E402
from tests.kafka.test_wire import _produce  # noqa: E402

MIB = 1 << 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))


def _frame(value_format: str) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(90):
        letter = bytes([65 + i % 26])
        value = b'"' + letter * 999_998 + b'"' if value_format == "json" else letter * 1_000_000
        builder.append(i, 1_700_000_000_000 + i, None, value, [])
    return frame(0, 9, _produce("big", 0, bytes(builder.build())))


def measure(tree: Path, value_format: str, frames: int) -> tuple[int, int, float]:
    """(RSS before, its highest, the rise over the frames' bytes) of one service from `tree`."""
    http, kafka = _free_port(), _free_port()
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "PYTHONPATH": str(tree), "OUTBOX_DATABASE_URL": f"sqlite:///{d}/m.db"}
        outbox = [sys.executable, "-m", "app.cli"]
        subprocess.run([*outbox, "migrate"], env=env, cwd=tree, check=True, capture_output=True)
        service = subprocess.Popen([*outbox, "serve", "--port", str(http), "--kafka-listener", f"127.0.0.1:{kafka}"],
                                   env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(120):
                try:
                    urllib.request.urlopen(urllib.request.Request(
                        f"http://127.0.0.1:{http}/v1/topics", method="POST", headers={"Content-Type": "application/json"},
                        data=f'{{"name": "big", "partitions": 1, "config": {{"value_format": "{value_format}"}}}}'.encode()))
                    break
                except OSError:
                    time.sleep(0.5)
            data = _frame(value_format)
            before, peak, stop = _rss_mib(service.pid), [0], threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    peak[0] = max(peak[0], _rss_mib(service.pid))
                    time.sleep(0.05)

            def produce() -> None:
                with socket.create_connection(("127.0.0.1", kafka), timeout=300) as s:
                    s.sendall(data)
                    assert read_frame(s) is not None

            sampler = threading.Thread(target=sample)
            sampler.start()
            producers = [threading.Thread(target=produce) for _ in range(frames)]
            for t in producers:
                t.start()
            for t in producers:
                t.join()
            stop.set()
            sampler.join()
            return before, peak[0], (peak[0] - before) * MIB / (frames * len(data))
        finally:
            service.terminate()
            service.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="another source tree, measured first in each run")
    parser.add_argument("--format", choices=["bytes", "json", "both"], default="both")
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    trees = [("before", args.before)] if args.before else []
    trees.append(("this tree", HERE))
    formats = ["bytes", "json"] if args.format == "both" else [args.format]
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M:%S} UTC, load {os.getloadavg()[0]:.1f}")
    for run in range(args.runs):
        for value_format in formats:
            for name, tree in trees:
                before, peak, ratio = measure(tree, value_format, args.frames)
                print(f"run {run + 1} {value_format:5} {name:9}: RSS {before} -> {peak} MiB, "
                      f"rise {peak - before} MiB = {ratio:.2f} x the frames' bytes")


if __name__ == "__main__":
    main()
