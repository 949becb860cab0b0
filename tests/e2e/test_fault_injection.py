"""Issue 5's fault-injection suite, short version: exactly-once copying on both databases while
copiers, API servers, the coordinator worker and (PostgreSQL) the database connections are
killed and restarted, with two more kinds of client writing to the same output partitions and
killed the same way (the in-database appends work): applications appending in their own database transactions,
and the prepared-transaction shop of examples/mariadb_orders.py (MariaDB on 127.0.0.1:3306;
without it the run goes without the shop, and the test is then skipped saying so). The
harness, the checks and the long script are in tests/e2e/faults.py; repeat a failed run with
the seed it prints (OUTBOX_FAULTS_SEED=… runs the test with it).

The checks themselves are tested first, on fabricated runs with a duplicate, a lost record, an
aborted read, a skip, a nonmonotonic poll and a torn transaction, and for the applications and
the shop a record or event twice, lost, without its row or order, a rolled-back one read,
one out of commit order: the suite can fail.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.conftest import unavailable
from tests.e2e.conftest import ADMIN_URL
from tests.e2e.faults import (
    OUTPUT,
    Apps,
    Config,
    Seen,
    ShopOrders,
    check_outcome,
    check_poll,
    failure_report,
    mariadb_problem,
    parse_app_logs,
    parse_copier_logs,
    parse_shop_logs,
    run_with,
)
from tests.e2e.order_app import rolls_back

MARIADB = "mysql://root@127.0.0.1:3306"

# --- the checks, on fabricated runs -------------------------------------------------------------

INPUTS = {0: [{"p": 0, "i": 0}, {"p": 0, "i": 1}, {"p": 0, "i": 2}], 1: [{"p": 1, "i": 0}]}


def _out(src: dict, offset: int, commit_position: int, tag: str) -> Seen:
    return Seen(offset, commit_position, {"src": src, "in": src["i"], "tag": tag})


def _clean() -> dict[int, list[Seen]]:
    # partition 0: transaction A (offsets 0, 1; COMMIT at 2), transaction B (3; COMMIT at 4)
    # partition 1: transaction A (0; COMMIT at 1)
    return {
        0: [_out(INPUTS[0][0], 0, 2, "A"), _out(INPUTS[0][1], 1, 2, "A"), _out(INPUTS[0][2], 3, 4, "B")],
        1: [_out(INPUTS[1][0], 0, 1, "A")],
    }


DECLARED = {"A": {0: 2, 1: 1}, "B": {0: 1}}
ENDS = {0: 3, 1: 1}


def _check(final=None, seen=None, **kw):  # type: ignore[no-untyped-def]
    final = _clean() if final is None else final
    args = dict(inputs=INPUTS, final=final, seen=_clean() if seen is None else seen, declared=DECLARED,
                acknowledged={"A", "B"}, group_offsets=ENDS, input_ends=ENDS)
    args.update(kw)
    return check_outcome(**args)


def test_a_clean_run_passes() -> None:
    o = _check()
    assert o.violations == []
    assert (o.records_in, o.records_out, o.offsets_ok) == (4, 4, True)


def test_a_duplicate_is_caught() -> None:
    final = _clean()
    final[0].append(_out(INPUTS[0][2], 5, 6, "C"))  # input 0/2 copied again by transaction C
    o = _check(final, final, declared={**DECLARED, "C": {0: 1}})
    assert o.duplicates == 1 and o.order_violations == 1
    assert any(v.startswith("duplicate: input fi-in/0 offset 2") for v in o.violations)


def test_a_lost_record_is_caught() -> None:
    final = _clean()
    del final[0][2]  # transaction B's only record
    o = _check(final, final, acknowledged={"A"}, declared={"A": DECLARED["A"]})
    assert o.lost == 1 and o.order_violations == 1
    assert any(v.startswith("lost: input fi-in/0 offset 2") for v in o.violations)


def test_a_misrouted_record_is_caught() -> None:
    final = _clean()
    final[1].append(final[0].pop())  # B's record in the wrong output partition
    final[1][-1] = Seen(2, 3, final[1][-1].value)
    o = _check(final, final, declared={"A": DECLARED["A"], "B": {1: 1}})
    assert o.extra == 1 and any(v.startswith("misrouted") for v in o.violations)


def test_an_aborted_read_is_caught() -> None:
    seen = _clean()
    # The reader was given a record of an aborted transaction X at offset 3 ...
    seen[0].insert(2, Seen(3, 3, {"src": INPUTS[0][2], "in": 2, "tag": "X"}))
    o = _check(seen=seen)
    assert o.aborted_reads == 1
    assert any(v.startswith(f"aborted read: {OUTPUT}/0 offset 3") for v in o.violations)


def test_a_record_the_tailing_reader_never_got_is_a_skip() -> None:
    seen = _clean()
    del seen[0][1]
    o = _check(seen=seen)
    assert o.skipped == 1 and o.aborted_reads == 0
    assert any(v.startswith(f"skipped: {OUTPUT}/0 offset 1") for v in o.violations)


def test_records_given_twice_or_out_of_order_are_caught() -> None:
    seen = _clean()
    seen[0].append(seen[0][0])
    assert any(v.startswith("returned twice") for v in _check(seen=seen).violations)
    seen = _clean()
    seen[0][0], seen[0][1] = seen[0][1], seen[0][0]
    assert any(v.startswith("reordered") for v in _check(seen=seen).violations)


def test_polls_that_go_back_or_return_commit_points_before_the_position_are_caught() -> None:
    rec = {"offset": 3, "commit_position": 4, "value": 1}
    assert check_poll(0, 5, {"records": [], "next_offset": 5}) == []
    assert check_poll(0, 4, {"records": [rec], "next_offset": 5}) == []
    assert any("nonmonotonic" in v for v in check_poll(0, 5, {"records": [], "next_offset": 4}))
    assert any("nonmonotonic" in v for v in check_poll(0, 5, {"records": [rec], "next_offset": 6}))
    assert any("nonmonotonic" in v for v in check_poll(0, 4, {"records": [rec], "next_offset": 4}))
    back = [{"offset": 5, "commit_position": 6, "value": 1}, rec]
    assert any("go back" in v for v in check_poll(0, 0, {"records": back, "next_offset": 7}))
    # And a run whose verifier reported one fails.
    assert _check(poll_violations=["nonmonotonic: x"]).poll_violations == 1


def test_a_torn_or_lost_transaction_is_caught() -> None:
    # Transaction A committed only its partition-0 records: torn.
    final = _clean()
    final[1] = []
    o = _check(final, final)
    assert o.txn_violations == 1 and o.lost == 1
    assert any(v.startswith("atomicity: transaction A") for v in o.violations)
    # An acknowledged commit that is not in the output.
    o = _check(acknowledged={"A", "B", "Z"})
    assert o.violations == ["durability: transaction Z was acknowledged as committed but is not in the output"]
    # A transaction whose copier never called Commit.
    o = _check(declared={"A": DECLARED["A"]}, acknowledged={"A"})
    assert any(v.startswith("atomicity: transaction B is in the output but") for v in o.violations)


def test_group_offsets_short_of_the_input_ends_fail() -> None:
    o = _check(group_offsets={0: 2, 1: 1})
    assert not o.offsets_ok and len(o.violations) == 1


def test_copier_logs_are_parsed_whatever_sigkill_cut(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "fi-001-copier-0.log"
    log.write_text('{"ev":"started"}\nsome warning\n{"ev":"commit","tag":"t1","n":{"0":2}}\n'
                   '{"ev":"committed","tag":"t1"}\n{"ev":"violation","what":"gap"}\n{"ev":"commit","ta')
    declared, acked, violations, counts = parse_copier_logs([log])
    assert declared == {"t1": {0: 2}} and acked == {"t1"}
    assert violations == ["fi-001-copier-0.log: gap"] and counts["commit"] == 1


# --- the applications' and the shop's checks, on fabricated runs ------------------------------------

EVERY = 7                      # the applications roll back every seventh order:
ROLLED_BACK = 1_000_005        # 1_000_005 % 7 == 6


def _app(order: int, offset: int, app: str = "app-0") -> Seen:
    return Seen(offset, offset, {"order": order, "app": app})  # plain records: visible at their offsets


def _shop(order: int, offset: int, commit_position: int, total: int | None = None) -> Seen:
    return Seen(offset, commit_position, {"order": order, "total": order * 125 if total is None else total})


def _mixed() -> dict[int, list[Seen]]:
    # The copiers' output (_clean) with, after it, app-0's orders 1_000_000 and 1_000_001,
    # app-1's order 2_000_001, and the shop's order 1 (a transaction: COMMIT marker at 7).
    final = _clean()
    final[0] += [_app(1_000_000, 5), _shop(1, 6, 7)]
    final[1] += [_app(1_000_001, 2), _app(2_000_001, 3, "app-1")]
    return final


ROWS = {1_000_000, 1_000_001, 2_000_001}


def _check_clients(final=None, seen=None, rows=ROWS, printed=ROWS, orders=None, placed=None):  # type: ignore[no-untyped-def]
    final = _mixed() if final is None else final
    return _check(final, final if seen is None else seen, apps=Apps(set(rows), set(printed), EVERY),
                  shop=ShopOrders({1: 125} if orders is None else orders, {1} if placed is None else placed))


def test_a_clean_run_with_applications_and_the_shop_passes() -> None:
    assert rolls_back(ROLLED_BACK, EVERY) and not any(rolls_back(n, EVERY) for n in ROWS)
    o = _check_clients()
    assert o.violations == []
    assert (o.app_rows, o.app_records, o.shop_orders, o.shop_events) == (3, 3, 1, 1)
    assert (o.records_out, o.duplicates, o.extra) == (8, 0, 0)  # their records are not the copiers'


def test_their_records_are_extra_in_a_run_without_them() -> None:
    o = _check(_mixed(), _mixed())
    assert o.extra == 4 and o.violations[0].startswith(f"extra: {OUTPUT}/0 offset 5")


def test_an_application_record_published_twice_is_caught() -> None:
    final = _mixed()
    final[1].append(_app(1_000_001, 4))  # the retry after a kill published order 1_000_001 again
    o = _check_clients(final)
    assert (o.app_duplicates, o.app_order_violations) == (1, 1)
    assert "duplicate: application order 1000001 has 2 records" in o.violations


def test_a_committed_row_without_its_record_is_caught() -> None:
    final = _mixed()
    del final[1][1]  # order 1_000_001's record
    o = _check_clients(final)
    assert o.app_lost == 1
    assert o.violations == ["lost: application order 1000001 committed its row but has no record"]


def test_an_application_record_without_its_row_is_caught_and_a_rolled_back_one_named() -> None:
    o = _check_clients(rows=ROWS - {2_000_001}, printed=ROWS - {2_000_001})
    assert o.app_orphans == 1
    assert o.violations == [f"orphan: {OUTPUT}/1 offset 3 holds application order 2000001, which has no row"]
    final = _mixed()
    final[1].append(_app(ROLLED_BACK, 4))  # a record of a rolled-back transaction was committed
    o = _check_clients(final)  # (and given to the tailing reader)
    assert (o.app_orphans, o.app_rolled_back_reads) == (1, 1)
    assert o.violations == [f"rolled back: application order {ROLLED_BACK}'s transaction was rolled back, "
                            f"but its record is at {OUTPUT}/1 offset 4",
                            f"rolled-back read: the tailing reader was given {OUTPUT}/1 offset 4, application "
                            f"order {ROLLED_BACK}, whose transaction was rolled back"]


def test_a_rolled_back_application_record_given_to_the_tailing_reader_is_caught() -> None:
    seen = _mixed()
    seen[1].append(_app(ROLLED_BACK, 4))  # the reader got it; the committed log has no such record
    o = _check_clients(seen=seen)
    assert (o.app_rolled_back_reads, o.aborted_reads) == (1, 1)
    assert any(v.startswith(f"rolled-back read: the tailing reader was given {OUTPUT}/1 offset 4") for v in o.violations)


def test_an_order_an_application_printed_without_its_row_is_caught() -> None:
    o = _check_clients(printed=ROWS | {1_000_002})
    assert o.app_lost == 1
    assert o.violations == ["durability: an application printed order 1000002 as committed, but its row is not there"]


def test_application_records_out_of_commit_order_are_caught() -> None:
    final = _mixed()
    # app-0 committed 1_000_001 before 1_000_003, yet the log has them the other way round.
    final[1][1] = _app(1_000_003, 2)
    final[1].append(_app(1_000_001, 4))
    o = _check_clients(final, rows=ROWS | {1_000_003}, printed=ROWS | {1_000_003})
    assert o.app_order_violations == 1
    assert o.violations == [f"commit order: {OUTPUT}/1 has app-0's order 1000001 at offset 4, after its order "
                            "1000003 at offset 2"]


def test_a_shop_event_twice_is_caught() -> None:
    final = _mixed()
    final[1].append(_shop(1, 4, 5))  # a second transaction published order 1's event again
    o = _check_clients(final)
    assert o.shop_duplicates == 1 and o.violations == ["duplicate: shop order 1 has 2 events"]


def test_a_shop_order_without_its_event_is_caught() -> None:
    o = _check_clients(orders={1: 125, 2: 250}, placed={1, 2})
    assert o.shop_lost == 1 and o.violations == ["lost: MariaDB holds shop order 2, but its event is not in the output"]


def test_a_shop_event_without_its_order_or_with_another_total_is_caught() -> None:
    o = _check_clients(orders={}, placed=set())
    assert o.shop_orphans == 1
    assert o.violations == [f"orphan: {OUTPUT}/0 offset 6 holds the event of shop order 1, which MariaDB does not hold"]
    o = _check_clients(orders={1: 126})
    assert o.violations == [f"wrong event: {OUTPUT}/0 offset 6 says shop order 1 totals 125, MariaDB says 126"]


def test_an_order_the_shop_printed_but_mariadb_lacks_is_caught() -> None:
    o = _check_clients(placed={1, 2})
    assert o.shop_lost == 1
    assert o.violations == ["durability: the shop printed order 2 as placed, but MariaDB does not hold it"]


def test_application_and_shop_logs_are_parsed_whatever_sigkill_cut(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = tmp_path / "fi-007-app-0.log"
    app.write_text("1000000\nrolled back 1000005\nTraceback (most recent call last):\n1000006\n100000")
    assert parse_app_logs([app]) == ([1_000_000, 1_000_006], [1_000_005])
    shop = tmp_path / "fi-009-shop-0.log"
    shop.write_text("INFO mariadb_orders: prepared transaction 4 of the last run committed: MariaDB had its order\n"
                    "order 3 placed\nINFO mariadb_orders: prepared transaction 9 of the last run aborted: MariaDB "
                    "had no order of it\norder 4 placed\norder 5 pla")
    placed, recoveries = parse_shop_logs([shop])
    assert placed == {3, 4} and dict(recoveries) == {"commit": 1, "abort": 1}


# --- the short run, on both databases ------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(480)
def test_copiers_applications_and_the_shop_killed_with_the_servers_coordinator_and_database_write_each_record_once(backend, launcher):  # type: ignore[no-untyped-def]
    seed = int(os.environ.get("OUTBOX_FAULTS_SEED") or random.randrange(1 << 31))
    pg = backend.name == "postgresql"
    no_shop = mariadb_problem(MARIADB)
    cfg = Config(
        backend=backend.name, seed=seed, duration_s=35, fault_rate=0.4, copiers=3, partitions=4,
        records=1500, max_records=5, servers=2, complete_inline="mixed", drain_timeout_s=180,
        apps=2, app_pause_s=0.25, shop_mariadb=None if no_shop else MARIADB,
    )
    result = run_with(cfg, backend, launcher, admin_url=ADMIN_URL)
    print(result.summary())
    assert result.ok, failure_report(result)
    backend.assert_batch_rows_match()
    # The faults really happened, every kind (the schedule deals each kind in turn).
    s, o = result.stats, result.outcome
    assert s["kill_copier"] and s["kill_server"] and s["kill_coordinator"] and s["kill_app"], failure_report(result)
    assert no_shop or s["kill_shop"], failure_report(result)
    assert not pg or s["db_terminate"], failure_report(result)
    assert s["server_inline"] and s["server_not_inline"], failure_report(result)  # both commit paths
    assert s["txn_committed"] > 0
    # The input was trimmed under the copiers (DeleteRecords consumed_by), and the cleaner,
    # killed with the coordinator, deleted below the log starts (checked in the outcome).
    assert s["trims"] and s["input_trimmed"] > 0, failure_report(result)
    # The applications committed and rolled back orders beside the copiers; the shop placed its own.
    assert o.app_rows > 0 and o.app_records == o.app_rows and s["app_rolled_back"] > 0, failure_report(result)
    assert no_shop or o.shop_orders > 0 and o.shop_events == o.shop_orders, failure_report(result)
    # The shop recovered both ways: an order MariaDB had committed, and one it had not.
    assert no_shop or s["shop_recovered_commit"] and s["shop_recovered_abort"], failure_report(result)
    if no_shop:
        unavailable(f"{no_shop}: the fault run went without the prepared-transaction shop (all else in it passed)")


# --- what the fault runs found ------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_consumer_that_rejoins_resumes_from_the_committed_offset(launcher):  # type: ignore[no-untyped-def]
    """Deterministic reproduction of the duplicate seen with seed 2099127605 (sqlite): copier A
    lost its membership (its server was down past the session timeout), aborted, rewound with
    seek_to_committed() while B owned the partition, B went on and committed, then A rejoined,
    got the partition back and resumed from its rewound position."""
    import time

    import httpx

    from app.client import Consumer, Producer

    url = launcher.server(coordinator_interval_ms=100).url
    assert httpx.post(f"{url}/v1/topics", json={"name": "in", "partitions": 1}).status_code == 201
    p = Producer(url)
    for i in range(10):
        p.send("in", i, partition=0)
    p.flush()

    a = Consumer(url, "g", session_timeout_ms=1000, max_records=5)
    a.subscribe(["in"])
    a._stop.set()  # A stalls: no heartbeats, and the coordinator expires its membership
    a._heartbeat.join()
    deadline = time.monotonic() + 30
    while httpx.get(f"{url}/v1/groups/g").json().get("members"):
        assert time.monotonic() < deadline, "A's membership never expired"
        time.sleep(0.1)
    b = Consumer(url, "g", session_timeout_ms=30_000, max_records=5)
    b.subscribe(["in"])
    assert [r.value for r in b.poll(5)] == [0, 1, 2, 3, 4]
    b.commit()
    a.seek_to_committed()  # A rewinds (after an aborted transaction): offset 5
    assert a.position_offsets() == {("in", 0): 5}
    assert [r.value for r in b.poll(5)] == [5, 6, 7, 8, 9]
    b.commit()  # B is done: the group's offset is 10
    b.close()
    a._rejoin = True  # what A's heartbeat thread sets on UNKNOWN_MEMBER_ID
    again = a.poll(2)  # A rejoins as the only member and gets in/0 back
    assert a.assignment() == [("in", 0)]
    assert [r.value for r in again] == [], "A re-read records the group had already committed"
    a.close()
