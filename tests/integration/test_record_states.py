"""A read_uncommitted fetch says where each record stands (the console's record browser):
committed, with the position read_committed readers get it at; aborted; or open."""

from __future__ import annotations

from typing import Any

from tests.helpers import batch, begin, create_topic, fetch, ident, init_producer, send


def test_each_record_says_whether_it_is_committed_aborted_or_open_and_where_it_is_exposed(client: Any) -> None:
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["plain"])]).status_code == 200  # 0
    for tid, end in (("a", "abort"), ("c", "commit"), ("o", None)):
        p = init_producer(client, tid)
        begin(client, tid, p)
        assert send(client, [batch("orders", 0, [f"{tid}0", f"{tid}1"], 0)], p, tid).status_code == 200
        if end:
            assert client.post(f"/v1/transactions/{tid}/{end}", json=ident(p)).status_code == 200
    # a: 1, 2, ABORT 3; c: 4, 5, COMMIT 6; o: 7, 8 (open)
    page = fetch(client, "orders", 0, isolation="read_uncommitted")
    assert [(r["offset"], r["value"], r["state"], r["commit_position"]) for r in page["records"]] == [
        (0, "plain", "committed", 0),
        (1, "a0", "aborted", None), (2, "a1", "aborted", None),
        (4, "c0", "committed", 6), (5, "c1", "committed", 6),
        (7, "o0", "open", None), (8, "o1", "open", None),
    ]


def test_read_committed_records_carry_no_state_field(client: Any) -> None:
    create_topic(client, "orders")
    assert send(client, [batch("orders", 0, ["plain"])]).status_code == 200
    assert "state" not in fetch(client, "orders", 0)["records"][0]
