"""What reading a Kafka request frame costs the listener (app.kafka.protocol.parse), per frame, for
a few requests a client sends all the time, against a reference tree in the same run.

    .venv/bin/python benchmarks/kafka_parse.py --reference /tmp/old_tree [--rounds 4] [--n 5000]

--reference names a directory holding another revision of the repository (`git archive REV | tar
-x -C DIR`): each round runs this tree and the reference in processes of their own, one after
the other, and the best of five timings of `n` parses is kept per frame. It prints µs a parse
for each and this tree's ÷ the reference's, by round and as the median of rounds. CPU only: no
socket, no database. The frames are built with kio's own writers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(n: int) -> dict[str, float]:
    """µs a parse, best of five runs of `n`, for each frame, in this process's tree."""
    import datetime
    import inspect
    import io
    import time

    import kio.schema.metadata.v12.request as m12
    import kio.schema.produce.v9.request as p9
    from kio.serial import entity_writer

    from app.kafka import protocol
    from app.kafka.protocol import request_class

    def frame(api_key: int, version: int, **fields: object) -> bytes:
        cls = request_class(api_key, version)
        assert cls is not None
        buf = io.BytesIO()
        header = cls.__header_schema__  # type: ignore[attr-defined]
        entity_writer(header)(buf, header(request_api_key=api_key, request_api_version=version, correlation_id=7,
                                          client_id="bench"))
        entity_writer(cls)(buf, cls(**fields))
        return buf.getvalue()

    fetch = request_class(1, 12)
    module = sys.modules[fetch.__module__]  # type: ignore[union-attr]
    frames = {
        "ApiVersions v3": frame(18, 3, client_software_name="bench", client_software_version="1"),
        "Produce v9, 1 partition, 10 kB of records": frame(
            0, 9, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
            topic_data=(p9.TopicProduceData(name="orders", partition_data=(
                p9.PartitionProduceData(index=0, records=bytes(10_000)),)),)),
        "Fetch v12, 1 partition": frame(
            1, 12, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=52_428_800,
            isolation_level=1, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
            topics=(module.FetchTopic(topic="orders", partitions=(module.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1_048_576),)),)),
        "Metadata v12, 1 topic": frame(3, 12, topics=(m12.MetadataRequestTopic(topic_id=None, name="orders"),),
                                       allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    }
    takes_bound = "max_entries" in inspect.signature(protocol.parse).parameters
    out = {}
    for name, f in frames.items():
        parse = (lambda f=f: protocol.parse(f, 100_000)) if takes_bound else (lambda f=f: protocol.parse(f))
        parse()
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(n):
                parse()
            best = min(best, (time.perf_counter() - started) / n * 1e6)
        out[name] = best
    return out


def _run(tree: Path, n: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", str(n)], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reference", type=Path, help="a directory holding the revision to compare with")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--n", type=int, default=5000, help="parses a timing")
    ap.add_argument("--measure", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return 0
    if args.reference is None:
        ap.error("--reference: a directory holding the revision to compare with")
    ratios: dict[str, list[float]] = {}
    for r in range(args.rounds):
        this, reference = _run(ROOT, args.n), _run(args.reference, args.n)
        for name in this:
            ratios.setdefault(name, []).append(this[name] / reference[name])
            print(f"round {r + 1}  {name:<45} this {this[name]:6.1f} µs  reference {reference[name]:6.1f} µs  "
                  f"÷ {this[name] / reference[name]:.2f}")
    for name, values in ratios.items():
        print(f"median ÷  {name:<45} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
