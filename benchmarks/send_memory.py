"""A large plain Send's peak memory in the service, before and after: one Send of `--records`
values of `--value-bytes` each (the default makes a body of about 32 MB, the default
max_request_bytes), with or without one character outside the Basic Multilingual Plane in one
value (which makes a Python string joined from every value take 4 bytes a character).

    git worktree add --detach /tmp/sendcpu-before main
    .venv/bin/python benchmarks/send_memory.py --before /tmp/sendcpu-before

Each Send gets a service of its own (`outbox serve` from the tree, as benchmarks/ab.py), the
sides taking turns (in each repeat, before's two bodies, then after's), and the
figure is how far the Send raised the process's peak resident memory (VmHWM in /proc, read
before and after the Send): what the Send's request, batch and COPY held at once, at its worst.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from before_after import tree_arguments  # noqa: E402
from run import Service, create_topic  # noqa: E402 - the benchmark's own modules, not a package


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def _body(topic: str, records: int, value_bytes: int, emoji: bool) -> bytes:
    filler = "x" * (value_bytes - len('{"p":""}'))
    value = b'{"value":{"p":"' + filler.encode() + b'"}}'
    odd = b'{"value":{"p":"' + ("\U0001F600" + filler[4:]).encode() + b'"}}'  # 4 bytes in UTF-8 too
    values = [value] * records
    if emoji:
        values[records // 2] = odd
    return (b'{"batches":[{"topic":"' + topic.encode() + b'","partition":0,"records":['
            + b",".join(values) + b"]}]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    tree_arguments(parser)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--value-bytes", type=int, default=1_600)
    parser.add_argument("--repeat", type=int, default=2, help="services started for each side and body")
    args = parser.parse_args(argv)
    print(f"# PostgreSQL: one Send of {args.records:,} values of {args.value_bytes:,} bytes; "
          "the Send's rise of the service's peak resident memory (VmHWM), MiB\n")
    print("| side | one non-BMP character | body MiB | peak rise, MiB (each service) |\n| --- | --- | ---: | --- |")
    trees = {"before": args.before, "after": args.after}
    rises: dict[tuple[str, bool], list[float]] = {(side, emoji): [] for side in trees for emoji in (False, True)}
    sizes: dict[bool, int] = {}
    with scratch_database("postgresql", "sendmem", migrate_with=(args.before, args.after)) as db_url:
        # Repeats outermost: before and after take turns, so both meet the same state of the machine.
        for n, (_, (side, emoji)) in enumerate((r, key) for r in range(args.repeat) for key in rises):
            topic = f"m{n}"
            body = _body(topic, args.records, args.value_bytes, emoji)
            sizes[emoji] = len(body)
            service = Service(db_url, trees[side])
            try:
                create_topic(service.url, topic, 1)
                start = _peak_kib(service.proc.pid)
                r = httpx.post(f"{service.url}/v1/records", content=body, timeout=300,
                               headers={"content-type": "application/json"})
                r.raise_for_status()
                rises[(side, emoji)].append((_peak_kib(service.proc.pid) - start) / 1024)
            finally:
                service.stop()
    for (side, emoji), rise in rises.items():
        print(f"| {side} | {'yes' if emoji else 'no'} | {sizes[emoji] / 2**20:.1f} | "
              f"{', '.join(f'{x:.0f}' for x in rise)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
