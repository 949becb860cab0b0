"""A plain offset commit beside transactions staging and committing offsets of the same group's
partition, at once, on SQLite and PostgreSQL: every call succeeds, PostgreSQL finds no deadlock,
and the offset left is one a serial order of the calls leaves (the write numbers,
offsets.next_writes, decide which of a commit and a staging was written last)."""

from __future__ import annotations

import threading

from sqlalchemy import text

from app.composition import Services
from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.storage import offsets

ROUNDS = 40
PLAIN_BASE = 10_000  # plain commits write PLAIN_BASE + i, transactions i


def _deadlocks(services: Services) -> int | None:
    if services.db.engine.dialect.name != "postgresql":
        return None
    with services.db.engine.connect() as conn:
        return conn.execute(text("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")).scalar()


def _offset(i: int) -> OffsetToStage:
    return OffsetToStage("t", 0, i, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)


def test_plain_commits_and_transactions_committing_offsets_of_one_partition_at_once_all_succeed(
        services: Services) -> None:
    services.topics.create("t", 1)
    before = _deadlocks(services)
    coordinator = services.coordinator
    errors: list[BaseException] = []
    last_plain: list[int] = []
    last_staged: list[int] = []

    def transactions() -> None:
        try:
            p = coordinator.init_producer_id(transactional_id="w", transaction_timeout_ms=None)
            pid, epoch = p.producer_id, p.producer_epoch
            for i in range(ROUNDS):
                coordinator.begin("w", pid, epoch)
                coordinator.add_offsets("w", pid, epoch, "g", [_offset(i)])
                last_staged.append(i)
                coordinator.end_transaction("w", pid, epoch, commit=True)
                if not coordinator.settings.complete_inline:
                    coordinator.completion.complete("w")
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    def plain() -> None:
        try:
            for i in range(ROUNDS):
                services.group_offsets.commit("g", [_offset(PLAIN_BASE + i)])
                last_plain.append(PLAIN_BASE + i)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=transactions), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    with services.db.read() as conn:
        [left] = [o.committed_offset for o in offsets.fetch(conn, "g")]
    # The last plain commit, or the last transaction's offset where it was staged after it.
    assert left in (PLAIN_BASE + ROUNDS - 1, ROUNDS - 1)
    services.db.engine.dispose()  # each session's statistics are flushed as it ends
    if before is not None:
        assert _deadlocks(services) == before
