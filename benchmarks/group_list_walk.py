"""What walking every consumer group a page at a time costs (GroupService.list_page: the Kafka
door's ListGroups walks every id in pages of GROUP_LIST_CHUNK; GET /v1/groups pages the same
way) against reading every group in one statement (storage.groups.list_groups without a limit),
the reference, on the same database in the same run.

    .venv/bin/python benchmarks/group_list_walk.py --groups 100000 --rounds 3

On a scratch database of each kind, `--groups` group rows written with SQL, every other with a
member and every third with a committed offset; then, in turns, the walk (every page, in id
order) and the one read, timed (wall clock, in this process). Prints the median of each and
walk ÷ one read: a walk whose pages each cost their own size stays a small multiple of the one
read whatever the number of groups; one whose pages read every id after their start grows with
it (the number of pages times half the table)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch import scratch_database  # noqa: E402

from app.services.group_service import GROUP_LIST_CHUNK, GroupService  # noqa: E402
from app.services.topic_service import TopicService  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage import groups as stored_groups  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402
from app.storage.tables import consumer_groups, group_members, group_offsets  # noqa: E402

NOW_MS = 1_700_000_000_000
CHUNK = 5_000


def _fill(db: Database, count: int) -> None:
    rows, members, offsets = [], [], []
    for i in range(count):
        g = f"group-{i:07d}"
        rows.append({"group_id": g, "generation_id": 1, "updated_ms": NOW_MS})
        if i % 2 == 0:
            members.append({"group_id": g, "member_id": "m", "topics": '["t"]', "assignment": "[]",
                            "session_timeout_ms": 45_000, "last_heartbeat_ms": NOW_MS, "joined_ms": NOW_MS})
        if i % 3 == 0:
            offsets.append({"group_id": g, "topic_id": 1, "partition": 0, "committed_offset": 0,
                            "committed_ms": NOW_MS})
    for table, values in ((consumer_groups, rows), (group_members, members), (group_offsets, offsets)):
        for i in range(0, len(values), CHUNK):
            with db.write() as conn:
                conn.execute(insert(table), values[i:i + CHUNK])


def _timed(call) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(kind: str, count: int, rounds: int) -> None:
    with scratch_database(kind, "grouplistwalk") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        try:
            TopicService(db, settings, lambda: NOW_MS).create("t", 1)
            _fill(db, count)
            if kind == "postgresql":
                with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.exec_driver_sql("VACUUM ANALYZE consumer_groups, group_members, group_offsets")
            service = GroupService(db, settings, lambda: NOW_MS)
            walked: list[int] = []

            def walk() -> None:
                page = service.list_page(limit=10 * count, bounded=False)
                walked.append(len(page.groups))

            def one_read() -> None:
                with db.read() as conn:
                    walked.append(len(stored_groups.list_groups(conn)))

            walks, reads = [], []
            for _ in range(rounds):
                walks.append(_timed(walk))
                reads.append(_timed(one_read))
            assert set(walked) == {count}, walked
            w, r = statistics.median(walks), statistics.median(reads)
            print(f"{kind:10s} {count:8d} groups, pages of {GROUP_LIST_CHUNK}: walk {w:7.2f} s, "
                  f"one read {r:6.2f} s, walk ÷ one read {w / r:5.1f}")
        finally:
            db.engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="sqlite,postgresql")
    args = parser.parse_args()
    for kind in args.kinds.split(","):
        measure(kind, args.groups, args.rounds)


if __name__ == "__main__":
    main()
