"""A read_committed fetch walks the commit points in pages (docs/GUARANTEES.md#commit-order): whatever the page
sizes, it returns exactly the first commit points that reach max_records, whole."""

from __future__ import annotations

import json

from app.domain.records import RecordToAppend
from app.domain.types import IsolationLevel
from app.services.log_service import SendBatch


def _records(values: list[int]) -> list[RecordToAppend]:
    return [RecordToAppend(None, json.dumps(v), None, 1) for v in values]


def _fetch(services, offset: int, max_records: int):  # type: ignore[no-untyped-def]
    _topic, result = services.log.fetch("pages", 0, offset=offset, max_records=max_records,
                                        isolation=IsolationLevel.READ_COMMITTED)
    return [json.loads(r.value) for r in result.records], result.next_offset, result.high_watermark


def test_plain_records_beyond_the_first_page_are_returned_in_order(services) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("pages", 1)
    for v in range(300):  # one Send each: 300 commit points
        services.log.send([SendBatch("pages", 0, _records([v]))], producer_id=None, producer_epoch=None,
                          transactional_id=None)

    assert _fetch(services, 0, 250) == (list(range(250)), 250, 300)
    assert _fetch(services, 250, 1000) == (list(range(250, 300)), 300, 300)


def test_a_fetch_stops_at_the_first_transaction_that_reaches_max_records(services) -> None:  # type: ignore[no-untyped-def]
    services.topics.create("pages", 1)
    p = services.coordinator.init_producer_id(transactional_id="pager", transaction_timeout_ms=None)
    seq, committed = 0, []
    for t in range(120):  # transactions of 10 records; every 7th aborts
        services.coordinator.begin("pager", p.producer_id, p.producer_epoch)
        values = list(range(t * 10, t * 10 + 10))
        services.log.send([SendBatch("pages", 0, _records(values), seq)], producer_id=p.producer_id,
                          producer_epoch=p.producer_epoch, transactional_id="pager")
        seq += 10
        commit = t % 7 != 6
        services.coordinator.end_transaction("pager", p.producer_id, p.producer_epoch, commit=commit)
        if commit:
            committed.append(values)
    # Each transaction takes 11 offsets (10 records and its marker).
    marker_of = {tuple(v): (v[0] // 10) * 11 + 10 for v in committed}

    got, next_offset, _ = _fetch(services, 0, 505)  # 51 transactions: 510 records, none split
    assert got == [x for v in committed[:51] for x in v]
    assert next_offset == marker_of[tuple(committed[50])] + 1

    rest, end, high_watermark = _fetch(services, next_offset, 10_000)
    assert rest == [x for v in committed[51:] for x in v]
    assert end == high_watermark == 120 * 11
