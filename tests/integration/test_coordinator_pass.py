"""The coordinator worker's pass reads what it has to do in one statement
(app.storage.transactions.coordinator_work), on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, update

from app.domain.types import TransactionState
from app.storage import transactions as txns
from app.storage.tables import transactions
from app.storage.transactions import CoordinatorWork
from app.worker.chore import ChoreConfig
from app.worker.coordinator import CoordinatorPass, CoordinatorWorker


def _statements(services: Any) -> list[str]:
    """The statements the service's engine sends from now on."""
    sent: list[str] = []
    event.listen(services.db.engine, "before_cursor_execute",
                 lambda conn, cursor, statement, *args: sent.append(statement.split()[0].upper()))
    return sent


def test_an_idle_pass_sends_one_statement(services: Any, clock: Any) -> None:
    worker = CoordinatorWorker(services.coordinator, clock, ChoreConfig(interval_ms=200))
    sent = _statements(services)

    assert worker.run_once() == CoordinatorPass(0, 0, 0, 0)
    # SQLite's connection hook begins a deferred transaction on every connection, in the
    # process: no round trip, and no lock until a write.
    assert sent == (["BEGIN", "SELECT"] if services.db.dialect == "sqlite" else ["SELECT"])


def test_one_statement_reads_the_timed_out_the_decided_and_the_expired_each_oldest_first(
        services: Any, clock: Any) -> None:
    coordinator = services.coordinator
    for tid in ("late-2", "late-1"):  # late-1 begins after late-2: the order is by start, not name
        p = coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=1_000)
        coordinator.begin(tid, p.producer_id, p.producer_epoch)
        clock.advance(1)
    for tid in ("decided", "idle"):
        coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=1_000)
    with services.db.write() as conn:
        conn.execute(update(transactions).where(transactions.c.transactional_id == "decided")
                     .values(state=TransactionState.PREPARE_COMMIT.value))
    clock.advance(services.settings.transactional_id_expiration_ms + 1)

    assert coordinator.pass_work(clock()) == CoordinatorWork(
        timed_out=["late-2", "late-1"], prepared=["decided"], expired=["idle"])


def test_each_list_holds_its_oldest_up_to_the_limit_whatever_the_order_of_insertion(
        services: Any, clock: Any) -> None:
    coordinator = services.coordinator
    producers = {tid: coordinator.init_producer_id(transactional_id=tid, transaction_timeout_ms=1_000)
                 for part in ("late", "decided", "idle") for tid in (f"{part}-a", f"{part}-b", f"{part}-c")}
    for x in ("a", "b", "c"):
        coordinator.begin(f"late-{x}", producers[f"late-{x}"].producer_id, producers[f"late-{x}"].producer_epoch)
    clock.advance(10)
    with services.db.write() as conn:
        # Each part's rows inserted, and last written, in the order a, b, c, aged the other way:
        # c the oldest (PostgreSQL's heap keeps rows in the order of their last write).
        for age, x in enumerate(("a", "b", "c")):
            for tid, values in ((f"late-{x}", {"txn_started_ms": clock() - age}),
                                (f"decided-{x}", {"state": TransactionState.PREPARE_COMMIT.value,
                                                  "updated_ms": clock() - age}),
                                (f"idle-{x}", {"updated_ms": clock() - age})):
                conn.execute(update(transactions).where(transactions.c.transactional_id == tid).values(**values))
    clock.advance(services.settings.transactional_id_expiration_ms + 1)

    assert coordinator.pass_work(clock(), limit=2) == CoordinatorWork(
        timed_out=["late-c", "late-b"], prepared=["decided-c", "decided-b"], expired=["idle-c", "idle-b"])
    assert coordinator.pass_work(clock(), limit=1) == CoordinatorWork(
        timed_out=["late-c"], prepared=["decided-c"], expired=["idle-c"])


def test_a_transaction_within_its_timeout_and_an_id_within_its_expiration_are_no_work(
        services: Any, clock: Any) -> None:
    coordinator = services.coordinator
    p = coordinator.init_producer_id(transactional_id="open", transaction_timeout_ms=1_000)
    coordinator.init_producer_id(transactional_id="idle", transaction_timeout_ms=1_000)
    clock.advance(services.settings.transactional_id_expiration_ms - 1_000)
    coordinator.begin("open", p.producer_id, p.producer_epoch)
    clock.advance(1_000)  # "open" open for exactly its timeout, "idle" idle for exactly the expiration

    assert coordinator.pass_work(clock()) == CoordinatorWork(timed_out=[], prepared=[], expired=[])


def test_an_id_used_again_after_the_pass_read_it_as_expired_is_kept(services: Any, clock: Any) -> None:
    coordinator = services.coordinator
    coordinator.init_producer_id(transactional_id="idle", transaction_timeout_ms=1_000)
    clock.advance(services.settings.transactional_id_expiration_ms + 1)
    work = coordinator.pass_work(clock())
    coordinator.init_producer_id(transactional_id="idle", transaction_timeout_ms=1_000)  # meanwhile

    assert work.expired == ["idle"]
    assert coordinator.timeouts.expire_transactional_ids(clock(), work.expired) == []
    with services.db.read() as conn:
        assert txns.get(conn, "idle").updated_ms == clock()


def test_a_transaction_begun_again_after_the_pass_read_it_as_timed_out_is_not_aborted(
        services: Any, clock: Any) -> None:
    coordinator = services.coordinator
    p = coordinator.init_producer_id(transactional_id="late", transaction_timeout_ms=1_000)
    coordinator.begin("late", p.producer_id, p.producer_epoch)
    clock.advance(1_001)
    work = coordinator.pass_work(clock())
    coordinator.end_transaction("late", p.producer_id, p.producer_epoch, commit=False)  # meanwhile
    with services.db.read() as conn:
        meta = txns.get(conn, "late")
    coordinator.begin("late", meta.producer_id, meta.producer_epoch)  # fresh: not past its timeout

    assert work.timed_out == ["late"]
    assert coordinator.timeouts.abort_timed_out(clock(), work.timed_out) == []
    with services.db.read() as conn:
        meta = txns.get(conn, "late")
    assert (meta.state, meta.txn_started_ms) == (TransactionState.ONGOING, clock())
