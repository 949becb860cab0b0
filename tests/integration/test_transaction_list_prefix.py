"""GET /v1/transactions?transactional_id_prefix=…: the transactional ids that start with the
prefix, exactly, filtered in the database, on both databases."""

from __future__ import annotations

import pytest

from tests.helpers import begin, init_producer


def _listed(client, **params) -> list[str]:  # type: ignore[no-untyped-def]
    r = client.get("/v1/transactions", params=params)
    assert r.status_code == 200, r.text
    return [t["transactional_id"] for t in r.json()["transactions"]]


def test_a_prefix_lists_exactly_the_ids_that_start_with_it(client) -> None:  # type: ignore[no-untyped-def]
    for tid in ("sink.0", "sink.1", "sink.10", "sink.x.2", "sink", "sink-0", "sinK.3", "Sink.4",
                "other.sink.1", "sinl.0"):
        init_producer(client, tid)

    assert _listed(client, transactional_id_prefix="sink.") == ["sink.0", "sink.1", "sink.10", "sink.x.2"]


def test_percent_and_underscore_in_a_prefix_are_plain_characters(client) -> None:  # type: ignore[no-untyped-def]
    for tid in ("a_b.1", "axb.1", "a%.1", "a%b.1", "aZZ.1", "a\\_b.1"):
        init_producer(client, tid)

    assert _listed(client, transactional_id_prefix="a_b") == ["a_b.1"]
    assert _listed(client, transactional_id_prefix="a%") == ["a%.1", "a%b.1"]
    assert _listed(client, transactional_id_prefix="a\\_") == ["a\\_b.1"]


def test_a_prefix_combines_with_state_and_limit(client) -> None:  # type: ignore[no-untyped-def]
    producers = {tid: init_producer(client, tid) for tid in ("s.0", "s.1", "s.2", "s.3", "t.0")}
    for tid in ("s.0", "s.2", "s.3", "t.0"):
        begin(client, tid, producers[tid])

    assert _listed(client, transactional_id_prefix="s.", state="Ongoing", limit=2) == ["s.0", "s.2"]
    assert _listed(client, transactional_id_prefix="s.", state="Empty") == ["s.1"]


def test_a_prefix_ending_in_the_last_code_point_lists_the_ids_after_it(client) -> None:  # type: ignore[no-untyped-def]
    # The range's upper bound is the prefix's successor: with nothing after U+10FFFF it is the
    # character before it, plus one.
    last = "\U0010ffff"
    for tid in (f"z{last}", f"z{last}{last}.1", f"z{last}a", "z", "{", "z~"):
        init_producer(client, tid)

    assert _listed(client, transactional_id_prefix=f"z{last}") == [f"z{last}", f"z{last}a", f"z{last}{last}.1"]


def test_a_prefix_filters_the_hanging_transactions(client, clock, settings) -> None:  # type: ignore[no-untyped-def]
    for tid in ("s.0", "t.0"):
        begin(client, tid, init_producer(client, tid))
    clock.advance(settings.max_transaction_timeout_ms + 1)  # no coordinator ran

    assert _listed(client, hanging=True) == ["s.0", "t.0"]
    assert _listed(client, hanging=True, transactional_id_prefix="s.") == ["s.0"]


@pytest.mark.parametrize("prefix", ["", "a/b", "a\x01", "a\x7f", "x" * 256],
                         ids=["empty", "slash", "control", "delete", "256-chars"])
def test_a_prefix_no_transactional_id_could_have_is_refused(client, prefix: str) -> None:  # type: ignore[no-untyped-def]
    r = client.get("/v1/transactions", params={"transactional_id_prefix": prefix})

    assert (r.status_code, r.json()["error_code"]) == (422, "INVALID_REQUEST")
    assert [e["field"] for e in r.json()["details"]["errors"]] == ["query.transactional_id_prefix"]


def test_a_prefix_ending_just_before_the_surrogates_lists_its_ids(client) -> None:  # type: ignore[no-untyped-def]
    # U+D7FF's successor is U+E000: the surrogates between are no text either database stores.
    for tid in ("\ud7ff", "\ud7ff.1", "\ue000", "\ud7fe"):
        init_producer(client, tid)

    assert _listed(client, transactional_id_prefix="\ud7ff") == ["\ud7ff", "\ud7ff.1"]
