"""Where a log start may be placed (app.domain.log_start), on SQLite and PostgreSQL: only at a
clean cut, one that no committed transaction lies across (a record below it, its COMMIT marker
at or past it), by every path that moves it: DeleteRecords (POST …/delete-records, and the Kafka
door's, tests/kafka/test_admin.py), the deletion of consumed records, and retention. A reader
in commit order (read_committed over HTTP, the views, Spark) sees a transaction's records at
its marker, so a log start that cut one would take it from every such reader at or past the
log start, silently: never told OFFSET_OUT_OF_RANGE, never given the transaction."""

from __future__ import annotations

from typing import Any

import pytest

from app.services.log_cleaner import LogCleaner
from tests.helpers import begin, create_topic, fetch, ident, init_producer, read_in_offset_order, send, values

HOUR = 3_600_000


def _records(*vals: str, ts: int | None = None) -> list[dict]:
    return [{"value": v, **({"timestamp_ms": ts} if ts is not None else {})} for v in vals]


def _plain(client: Any, *vals: str, ts: int | None = None) -> None:
    r = send(client, [{"topic": "t", "partition": 0, "records": _records(*vals, ts=ts)}])
    assert r.status_code == 200, r.text


def _in_txn(client: Any, tid: str, *vals: str, ts: int | None = None) -> dict:
    """Begins a transaction of `tid` with these records in t/0; left open."""
    p = init_producer(client, tid)
    begin(client, tid, p)
    r = send(client, [{"topic": "t", "partition": 0, "records": _records(*vals, ts=ts), "base_sequence": 0}], p, tid)
    assert r.status_code == 200, r.text
    return p


def _end(client: Any, tid: str, p: dict, outcome: str = "commit") -> None:
    r = client.post(f"/v1/transactions/{tid}/{outcome}", json=ident(p))
    assert r.status_code == 200, r.text


def _delete_records(client: Any, offset: int) -> Any:
    return client.post("/v1/topics/t/partitions/0/delete-records", json={"offset": offset})


def _log_start(client: Any) -> int:
    return client.get("/v1/topics/t").json()["partitions"][0]["log_start_offset"]


def _transaction_across_plain_records(client: Any, *, ts: list[int] | None = None) -> None:
    """A transaction's record T at offset 0, plain records p1 and p2 at 1 and 2, the
    transaction's COMMIT marker at 3. In commit order: p1 (1), p2 (2), T (3)."""
    create_topic(client, "t")
    old, new = ts or (None, None)
    p = _in_txn(client, "tx", "T", ts=old)
    _plain(client, "p1", ts=old)
    _plain(client, "p2", ts=new)
    _end(client, "tx", p)


# --- DeleteRecords -----------------------------------------------------------------------------


def test_a_reader_in_commit_order_keeps_the_transaction_it_has_not_read(client) -> None:  # type: ignore[no-untyped-def]
    _transaction_across_plain_records(client)
    first = fetch(client, "t", 0, 0, max_records=1)
    assert (values(first), first["next_offset"]) == (["p1"], 2)  # the reader is at position 2

    r = _delete_records(client, 2)

    assert r.status_code == 416, r.text
    assert r.json() == {
        "error_code": "OFFSET_OUT_OF_RANGE",
        "message": "offset 2 would cut a transaction committed at 3 whose records begin at 0 (a reader in commit "
                   "order that has not read it would lose it): delete up to 0, or up to 4 (log [0, 4])",
        "retriable": False,
        "details": {"log_start_offset": 0, "last_stable_offset": 4, "log_end_offset": 4},
    }
    rest = fetch(client, "t", 0, 2)
    assert (values(rest), rest["log_start_offset"], rest["next_offset"]) == (["p2", "T"], 0, 4)


@pytest.mark.parametrize("offset", [1, 3])
def test_every_offset_across_the_transaction_is_refused_and_changes_nothing(client, services, offset: int) -> None:  # type: ignore[no-untyped-def]
    _transaction_across_plain_records(client)

    r = _delete_records(client, offset)

    assert (r.status_code, r.json()["error_code"]) == (416, "OFFSET_OUT_OF_RANGE"), r.text
    assert r.json()["message"].startswith(f"offset {offset} would cut a transaction committed at 3 whose records "
                                          "begin at 0 ")
    assert "delete up to 0, or up to 4" in r.json()["message"]
    assert _log_start(client) == 0
    assert values(fetch(client, "t", 0, 0)) == ["p1", "p2", "T"]
    assert [v for _, _, v in read_in_offset_order(services, "t")] == ["T", "p1", "p2"]


def test_a_clean_cut_below_the_transaction_keeps_it_for_every_reader(client) -> None:  # type: ignore[no-untyped-def]
    _transaction_across_plain_records(client)

    assert _delete_records(client, 0).json() == {"topic": "t", "partition": 0, "log_start_offset": 0}

    assert values(fetch(client, "t", 0, 2)) == ["p2", "T"]


def test_a_clean_cut_past_the_marker_moves_the_log_start_and_a_reader_behind_it_is_told(client) -> None:  # type: ignore[no-untyped-def]
    _transaction_across_plain_records(client)

    assert _delete_records(client, 4).json() == {"topic": "t", "partition": 0, "log_start_offset": 4}

    r = client.get("/v1/topics/t/partitions/0/records", params={"offset": 2, "isolation": "read_committed"})
    assert (r.status_code, r.json()["error_code"], r.json()["details"]) == (
        416, "OFFSET_OUT_OF_RANGE", {"log_start_offset": 4, "log_end_offset": 4})
    page = fetch(client, "t", 0, 4)
    assert (page["records"], page["next_offset"]) == ([], 4)


def _committed_while_another_is_open(client: Any) -> tuple[dict, dict]:
    """a's record at 0, b's at 1 (b left open), a's COMMIT marker at 2, plain p3 at 3: the
    last stable offset is 1, and a (positioned at 2) lies across it."""
    create_topic(client, "t")
    a = _in_txn(client, "a", "a0")
    b = _in_txn(client, "b", "b1")
    _end(client, "a", a)
    _plain(client, "p3")
    return a, b


def test_as_far_as_it_may_go_is_the_highest_clean_cut_at_or_below_the_last_stable_offset(client, services) -> None:  # type: ignore[no-untyped-def]
    _, b = _committed_while_another_is_open(client)
    assert values(fetch(client, "t", 0, 1)) == ["a0", "p3"]  # a reader at 1 has not read a

    assert services.topics.delete_records("t", 0, None) == 0  # the Kafka door's -1

    r = _delete_records(client, 1)
    assert (r.status_code, r.json()["message"]) == (416, (
        "offset 1 would cut a transaction committed at 2 whose records begin at 0 (a reader in commit order that "
        "has not read it would lose it): delete up to 0 (no clean cut lies above it up to the last stable "
        "offset 1) (log [0, 4])"))
    assert values(fetch(client, "t", 0, 1)) == ["a0", "p3"]
    _end(client, "b", b)  # marker 4: the last stable offset 5, a clean cut
    assert services.topics.delete_records("t", 0, None) == 5


# --- the deletion of consumed records -------------------------------------------------------


def test_consumed_records_are_deleted_to_a_clean_cut_not_only_past_the_first_transaction_found(client) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t")
    _plain(client, "p0")                     # 0
    t8 = _in_txn(client, "t8", "t8")         # 1
    _plain(client, "p2")                     # 2
    t7 = _in_txn(client, "t7", "t7")         # 3
    _plain(client, "p4")                     # 4
    _end(client, "t8", t8)                   # 5
    _plain(client, "p6", "p7", "p8")         # 6-8
    _end(client, "t7", t7)                   # 9
    r = client.post("/v1/groups/g/offsets", json={"offsets": [{"topic": "t", "partition": 0, "offset": 8}]})
    assert r.status_code == 200, r.text

    r = client.post("/v1/topics/t/partitions/0/delete-records", json={"consumed_by": ["g"]})

    # t7 (record 3, committed at 9) holds the group's 8 at 3, across which t8 (record 1,
    # committed at 5) lies: a reader at 3 or 4 has not read t8. 1 is the clean cut.
    assert r.json()["log_start_offset"] == 1
    assert values(fetch(client, "t", 0, 3)) == ["p4", "t8", "p6", "p7", "p8", "t7"]


# --- retention ------------------------------------------------------------------------------------


def test_retention_and_delete_records_cut_the_same_log_at_the_same_offsets(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    _transaction_across_plain_records(client, ts=[clock.now_ms - 2 * HOUR, clock.now_ms])
    assert client.patch("/v1/topics/t", json={"config": {"retention_ms": HOUR}}).status_code == 200

    # T and p1 have expired, p2 has not: retention would cut at 2, across the transaction.
    assert LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once().retention == 0
    assert _log_start(client) == 0
    assert _delete_records(client, 2).status_code == 416
    assert values(fetch(client, "t", 0, 2)) == ["p2", "T"]


def test_retention_may_cut_an_aborted_transaction(client, services, clock) -> None:  # type: ignore[no-untyped-def]
    create_topic(client, "t", retention_ms=HOUR)
    old = clock.now_ms - 2 * HOUR
    _plain(client, "p0", ts=old)                  # 0
    x = _in_txn(client, "x", "x1", ts=old)        # 1
    _plain(client, "p2", ts=clock.now_ms)         # 2, not expired
    _end(client, "x", x, "abort")                 # 3

    # No read_committed reader is shown x1: x lies across no clean cut.
    assert LogCleaner(services.db, services.settings, clock, chunk_rows=3).run_once().retention == 2
    assert _log_start(client) == 2
    assert values(fetch(client, "t", 0, 2)) == ["p2"]
    assert [v for _, _, v in read_in_offset_order(services, "t")] == ["p2"]
