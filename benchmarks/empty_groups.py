"""What group expiry's deletion of empty groups (GroupService.delete_empty_groups) adds to each
group-expiry pass, which runs every OUTBOX_COORDINATOR_INTERVAL_MS (200 ms): against the pass's
member expiry (GroupService.expire_members) on the same database in the same run, the reference.

    .venv/bin/python benchmarks/empty_groups.py --groups 100000 --rounds 30

On a scratch database of each kind, `--groups` group rows written with SQL (every tenth with a
member whose session is live, every other one with a committed offset, every row changed a
minute ago, so that nothing is to expire or delete: the pass of a quiet service), then, in
turns, one call of each, timed (wall clock, in this process, which is the service's cost and
the database's together on SQLite, the service's wait for it on PostgreSQL): the median of
`--rounds` each, and its ratio to the reference. Then one pass that deletes: as many empty groups
as a pass deletes (EMPTY_GROUPS_PER_PASS), their rows older than the retention.
"""

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

from app.services.group_service import EMPTY_GROUP_RETENTION_MS, EMPTY_GROUPS_PER_PASS, GroupService  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402
from app.storage.tables import consumer_groups, group_members, group_offsets  # noqa: E402
from app.services.topic_service import TopicService  # noqa: E402

NOW_MS = 1_700_000_000_000
CHUNK = 5_000


def _fill(db: Database, groups: int, *, empty: int, now_ms: int) -> None:
    rows, members, offsets = [], [], []
    for i in range(groups):
        g = f"group-{i:07d}"
        rows.append({"group_id": g, "generation_id": 1, "updated_ms": now_ms - 60_000})
        if i % 10 == 0:
            members.append({"group_id": g, "member_id": "m", "topics": '["t"]', "assignment": "[]",
                            "session_timeout_ms": 45_000, "last_heartbeat_ms": now_ms, "joined_ms": now_ms})
        if i % 2 == 0:
            offsets.append({"group_id": g, "topic_id": 1, "partition": 0, "committed_offset": 0, "committed_ms": now_ms})
    old = now_ms - EMPTY_GROUP_RETENTION_MS - 1
    rows += [{"group_id": f"empty-{i:07d}", "generation_id": 2, "updated_ms": old} for i in range(empty)]
    for table, values in ((consumer_groups, rows), (group_members, members), (group_offsets, offsets)):
        for i in range(0, len(values), CHUNK):
            with db.write() as conn:
                conn.execute(insert(table), values[i:i + CHUNK])


def _timed(call) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    call()
    return (time.perf_counter() - start) * 1000


def measure(kind: str, groups: int, rounds: int) -> None:
    with scratch_database(kind, "emptygroups") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False)
        db = Database(build_engine(url, pool_size=2))
        try:
            TopicService(db, settings, lambda: NOW_MS).create("t", 1)
            _fill(db, groups, empty=0, now_ms=NOW_MS)
            service = GroupService(db, settings, lambda: NOW_MS)
            reference, deletion = [], []
            for _ in range(rounds):
                reference.append(_timed(lambda: service.expire_members(NOW_MS)))
                deletion.append(_timed(lambda: service.delete_empty_groups(NOW_MS)))
            ref, new = statistics.median(reference), statistics.median(deletion)
            print(f"{kind}: {groups} groups, nothing to do: expire_members {ref:.2f} ms, "
                  f"delete_empty_groups {new:.2f} ms (median of {rounds}), ratio {new / ref:.2f}")
            _fill(db, 0, empty=EMPTY_GROUPS_PER_PASS, now_ms=NOW_MS)
            deleted: list[int] = []
            took = _timed(lambda: deleted.append(service.delete_empty_groups(NOW_MS).deleted))
            print(f"{kind}: one pass deleting {deleted[0]} empty groups among them: {took:.1f} ms, "
                  f"{took / ref:.1f} x the idle expire_members")
        finally:
            db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    args = parser.parse_args()
    for kind in (["sqlite", "postgresql"] if args.database == "both" else [args.database]):
        measure(kind, args.groups, args.rounds)


if __name__ == "__main__":
    main()
