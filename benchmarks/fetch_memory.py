"""What one reader can make `outbox serve` hold in memory: the security review's reproduction.

    .venv/bin/python benchmarks/fetch_memory.py [--tree DIR] [--records 10] [--record-mb 20] [--readers 6]
    git worktree add /tmp/outbox-before <commit>   # with its own .venv, for the tree before
    /tmp/outbox-before/.venv/bin/python benchmarks/fetch_memory.py --tree /tmp/outbox-before

Starts `outbox serve` from the source tree `--tree` on a scratch PostgreSQL database, creates a
topic (max_message_bytes raised to 25 MB where the tree has it), sends `--records` records of
`--record-mb` MB each (one Send each), then measures the service process's resident memory
(VmRSS) and its peak (VmHWM, reset through /proc/<pid>/clear_refs before each step: needs root)
around one Fetch of max_records=10, then `--readers` such Fetches at once; with the tree's
default byte limits, and, where the tree has them, asking the most bytes it allows.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import ROOT, Service  # noqa: E402 - the benchmark's own modules

MB = 1_000_000


def _status(pid: int, field: str) -> int:
    """A VmRSS / VmHWM line of /proc/<pid>/status, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS


def _fetch(url: str, params: dict, sizes: list[int]) -> None:
    with httpx.Client(timeout=300) as c:
        r = c.get(f"{url}/v1/topics/big/partitions/0/records", params=params)
        r.raise_for_status()
        sizes.append(len(r.content))


def _step(service: Service, label: str, params: dict, readers: int) -> None:
    pid = service.proc.pid
    _reset_peak(pid)
    before = _status(pid, "VmRSS")
    sizes: list[int] = []
    threads = [threading.Thread(target=_fetch, args=(service.url, params, sizes)) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak, after = _status(pid, "VmHWM"), _status(pid, "VmRSS")
    print(f"| {label} | {readers} | {sum(sizes) / MB:,.1f} | {before / 2**30:.2f} | {peak / 2**30:.2f} | "
          f"{after / 2**30:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--records", type=int, default=10)
    parser.add_argument("--record-mb", type=int, default=20)
    parser.add_argument("--readers", type=int, default=6)
    args = parser.parse_args()
    tree = args.tree.resolve()
    with scratch_database("postgresql", "fetchmem", migrate_with=[tree]) as url:
        service = Service(url, root=tree)
        try:
            with httpx.Client(base_url=service.url, timeout=300) as c:
                c.post("/v1/topics", json={"name": "big"}).raise_for_status()
                config = c.get("/v1/topics/big").json()["config"]
                limits = "max_message_bytes" in config
                if limits:
                    c.patch("/v1/topics/big", json={"config": {"max_message_bytes": 25 * MB}}).raise_for_status()
                value = "x" * (args.record_mb * MB - 2)  # with its quotes, record_mb MB
                for i in range(args.records):
                    body = {"batches": [{"topic": "big", "partition": 0, "records": [{"value": value}]}]}
                    c.post("/v1/records", json=body).raise_for_status()
                del value, body
            print(f"tree {tree}: {args.records} records of {args.record_mb} MB; resident memory of the service "
                  "(GiB) before, at its peak, after")
            print("| fetch | readers at once | answered MB in all | before | peak | after |")
            print("|---|---:|---:|---:|---:|---:|")
            wanted = {"max_records": 10}
            _step(service, "max_records=10", wanted, 1)
            _step(service, "max_records=10", wanted, args.readers)
            if limits:
                most = {**wanted, "max_bytes": 57_671_680}
                _step(service, "max_records=10, max_bytes=57671680", most, 1)
                _step(service, "max_records=10, max_bytes=57671680", most, args.readers)
        finally:
            service.stop()


if __name__ == "__main__":
    main()
