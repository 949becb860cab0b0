"""What group expiry's deletion of empty groups (GroupExpiry.delete_empty_groups) and expiry of
committed offsets (GroupExpiry.expire_offsets, OUTBOX_OFFSETS_RETENTION_MINUTES set to 7 days)
add to a group-expiry pass, which runs every OUTBOX_COORDINATOR_INTERVAL_MS (200 ms; both looks
once a minute): against the pass's member expiry (GroupExpiry.expire_members) on the same
database in the same run, the reference.

    .venv/bin/python benchmarks/empty_groups.py --groups 100000 --rounds 30
    .venv/bin/python benchmarks/empty_groups.py --groups 100000 --rounds 30 --stable 1
    .venv/bin/python benchmarks/empty_groups.py --groups 100000 --rounds 30 --stable 10
    .venv/bin/python benchmarks/empty_groups.py --groups 100000 --rounds 30 --stable 10 --offsets-age-days 8

On a scratch database of each kind, `--groups` group rows written with SQL, every tenth with a
member whose session is live, then, in turns, one call of each, timed (wall clock, in this
process, which is the service's cost and the database's together on SQLite, the service's wait
for it on PostgreSQL): the median of `--rounds` each, and its ratio to the reference. Nothing
is to expire or delete in either layout (the offsets' groups have members or rows changed
within the offsets' retention):

- without --stable, every other group has one committed offset and every row changed a minute
  ago: the look's `updated_ms` test excludes every row, and its members' and offsets' checks
  never run (the cheapest case);
- with --stable N, every group has N committed offsets and every row changed an hour ago, as
  in a service whose groups have been Stable for a while (heartbeats write members, not the
  group's row): every row passes the `updated_ms` test, every group's members are looked for,
  and the offsets of every group without a member (nine in ten).

With --offsets-age-days D, every offset was committed D days ago: past the offsets' retention
(7 days), every offset passes the look's `committed_ms` test and its group's members, row and
staged offsets are looked for (the costliest look); otherwise they were committed now.

Then one pass that deletes: as many empty groups as a pass deletes (EMPTY_GROUPS_PER_PASS),
their rows older than the retention; and one that expires as many offsets as a pass expires
(EXPIRED_OFFSETS_PER_PASS), simple consumers' committed 8 days ago. With --explain, PostgreSQL's plan of the look (EXPLAIN
ANALYZE) after the timings. With --vacuum, on PostgreSQL, VACUUM ANALYZE of the groups' tables
after they are written, as autovacuum leaves tables that have stopped growing: without it the
planner has no statistics, and each index probe into group_offsets also reads the row's heap
page (the visibility map is not set yet).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import insert, select

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratch import scratch_database  # noqa: E402

from app.services.group_expiry import (  # noqa: E402
    EMPTY_GROUP_RETENTION_MS,
    EMPTY_GROUPS_PER_PASS,
    EXPIRED_OFFSETS_PER_PASS,
    GroupExpiry,
)
from app.storage import groups as stored_groups  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.engine import Database, build_engine  # noqa: E402
from app.storage.tables import consumer_groups, group_members, group_offsets  # noqa: E402
from app.services.topic_service import TopicService  # noqa: E402

NOW_MS = 1_700_000_000_000
CHUNK = 5_000
DAY_MS = 24 * 3600 * 1000


def _fill(db: Database, groups: int, *, empty: int, now_ms: int, stable: int | None = None,
          committed_ms: int | None = None, simple: int = 0) -> None:
    """`stable`: None, the quiet layout; N, the Stable one with N offsets a group (module docstring).
    `committed_ms`: when the offsets were committed (None: now). `simple`: groups without a row
    with one offset each, committed 8 days ago."""
    rows, members, offsets = [], [], []
    committed_ms = now_ms if committed_ms is None else committed_ms
    updated_ms = now_ms - (60_000 if stable is None else 3_600_000)
    for i in range(groups):
        g = f"group-{i:07d}"
        rows.append({"group_id": g, "generation_id": 1, "updated_ms": updated_ms})
        if i % 10 == 0:
            members.append({"group_id": g, "member_id": "m", "topics": '["t"]', "assignment": "[]",
                            "session_timeout_ms": 45_000, "last_heartbeat_ms": now_ms, "joined_ms": now_ms})
        offsets += [{"group_id": g, "topic_id": 1, "partition": p, "committed_offset": 0,
                     "committed_ms": committed_ms}
                    for p in range(1 if stable is None and i % 2 == 0 else stable or 0)]
    offsets += [{"group_id": f"simple-{i:07d}", "topic_id": 1, "partition": 0, "committed_offset": 0,
                 "committed_ms": now_ms - 8 * DAY_MS} for i in range(simple)]
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


def _explain(db: Database) -> None:
    look = select(stored_groups.consumer_groups.c.group_id).where(
        *stored_groups._empty_since(NOW_MS - EMPTY_GROUP_RETENTION_MS)).limit(EMPTY_GROUPS_PER_PASS)
    with db.read() as conn:
        sql = str(look.compile(conn, compile_kwargs={"literal_binds": True}))
        for line in conn.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + sql).scalars():
            print("    " + line)


def measure(kind: str, groups: int, rounds: int, stable: int | None, explain: bool, vacuum: bool,
            offsets_age_days: int) -> None:
    layout = "quiet, rows a minute old" if stable is None else f"Stable, rows an hour old, {stable} offsets a group"
    layout += f", offsets committed {offsets_age_days} days ago" if offsets_age_days else ", offsets committed now"
    with scratch_database(kind, "emptygroups") as url:
        settings = Settings(database_url=url, run_coordinator=False, auto_migrate=False,
                            offsets_retention_minutes=10_080)  # unset, expire_offsets does nothing
        db = Database(build_engine(url, pool_size=2))
        try:
            TopicService(db, settings, lambda: NOW_MS).create("t", max(stable or 1, 1))
            _fill(db, groups, empty=0, now_ms=NOW_MS, stable=stable, committed_ms=NOW_MS - offsets_age_days * DAY_MS)
            if vacuum and kind == "postgresql":
                with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                    conn.exec_driver_sql("VACUUM ANALYZE consumer_groups, group_members, group_offsets, "
                                         "transaction_offsets")
            service = GroupExpiry(db, settings)
            reference, deletion, expiry = [], [], []
            for _ in range(rounds):
                reference.append(_timed(lambda: service.expire_members(NOW_MS)))
                deletion.append(_timed(lambda: service.delete_empty_groups(NOW_MS)))
                expiry.append(_timed(lambda: service.expire_offsets(NOW_MS)))
            ref, new, offs = statistics.median(reference), statistics.median(deletion), statistics.median(expiry)
            print(f"{kind}: {groups} groups ({layout}), nothing to do: expire_members {ref:.2f} ms, "
                  f"delete_empty_groups {new:.2f} ms, expire_offsets {offs:.2f} ms (medians of {rounds}), "
                  f"ratios {new / ref:.2f} and {offs / ref:.2f}")
            if explain and kind == "postgresql":
                _explain(db)
            _fill(db, 0, empty=EMPTY_GROUPS_PER_PASS, now_ms=NOW_MS)
            deleted: list[int] = []
            took = _timed(lambda: deleted.append(service.delete_empty_groups(NOW_MS).deleted))
            print(f"{kind}: one pass deleting {deleted[0]} empty groups among them: {took:.1f} ms, "
                  f"{took / ref:.1f} x the idle expire_members")
            _fill(db, 0, empty=0, now_ms=NOW_MS, simple=EXPIRED_OFFSETS_PER_PASS)
            expired: list[int] = []
            took = _timed(lambda: expired.append(service.expire_offsets(NOW_MS).expired))
            print(f"{kind}: one pass expiring {expired[0]} simple consumers' offsets among them: {took:.1f} ms, "
                  f"{took / ref:.1f} x the idle expire_members")
        finally:
            db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--stable", type=int, metavar="N", help="the Stable layout, N offsets a group")
    parser.add_argument("--explain", action="store_true", help="PostgreSQL's plan of the look")
    parser.add_argument("--vacuum", action="store_true", help="PostgreSQL: VACUUM ANALYZE once written")
    parser.add_argument("--offsets-age-days", type=int, default=0, metavar="D",
                        help="the groups' offsets committed D days ago (0: now)")
    args = parser.parse_args()
    for kind in (["sqlite", "postgresql"] if args.database == "both" else [args.database]):
        measure(kind, args.groups, args.rounds, args.stable, args.explain, args.vacuum, args.offsets_age_days)


if __name__ == "__main__":
    main()
