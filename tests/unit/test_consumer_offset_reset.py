"""The consumer's auto_offset_reset (Kafka's auto.offset.reset): where a partition starts without
a committed offset, and where it goes when its position is out of range (416), per mode.

The service is an httpx.MockTransport over a fake log per partition whose fetch answers as
app/storage/read.py's does: 416 OFFSET_OUT_OF_RANGE with `details.log_start_offset` and
`details.log_end_offset` outside [log start, log end], else the records from the position on.
Every record is plain, its value its offset, so a commit point is the record itself.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from app.client import (
    AbortableError,
    Consumer,
    InvalidOffsetError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RetriableError,
)
from app.client.http import Session

URL = "http://outbox.test"
ORDERS_0, ORDERS_1 = ("orders", 0), ("orders", 1)


@dataclass
class Log:
    log_start: int
    log_end: int


class FakeService:
    """Topic `orders`, its partitions' logs, one group's committed offsets; every request is
    recorded as (method, path, offset asked for or None)."""

    def __init__(self, logs: dict[int, Log], committed: dict[int, int] | None = None,
                 bounds_in_416: bool = True) -> None:
        self.logs = logs
        self.committed = committed or {}
        self.bounds_in_416 = bounds_in_416
        self.requests: list[tuple[str, str, int | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        offset = request.url.params.get("offset")
        self.requests.append((request.method, path, None if offset is None else int(offset)))
        if path == "/v1/topics/orders":
            return httpx.Response(200, json={"name": "orders", "partition_count": len(self.logs), "partitions": [
                {"partition": p, "log_start_offset": log.log_start, "log_end_offset": log.log_end,
                 "last_stable_offset": log.log_end} for p, log in sorted(self.logs.items())]})
        if request.method == "DELETE":  # leaving the group
            return httpx.Response(204)
        if path == "/v1/groups/g/members":
            return httpx.Response(200, json={"member_id": "m-1", "generation_id": 1, "assignment": [
                {"topic": "orders", "partition": p} for p in sorted(self.logs)]})
        if path == "/v1/groups/g/offsets":
            return httpx.Response(200, json={"group_id": "g", "offsets": [
                {"topic": "orders", "partition": p, "offset": o} for p, o in sorted(self.committed.items())]})
        if path.startswith("/v1/topics/orders/partitions/") and path.endswith("/records"):
            return self._fetch(int(path.split("/")[5]), int(offset), int(request.url.params["max_records"]))
        if path == "/v1/fetch":  # the multi-partition Fetch a poll makes: each partition as above
            self.requests.pop()
            body = json.loads(request.content)
            answers = []
            for part in body["partitions"]:
                self.requests.append(("GET", f"/v1/topics/orders/partitions/{part['partition']}/records", part["offset"]))
                one = self._fetch(part["partition"], part["offset"], body["max_records"]).json()
                answers.append({"topic": part["topic"], "partition": part["partition"], **one})
            return httpx.Response(200, json={"partitions": answers})
        raise AssertionError(f"unscripted request {request.method} {path}")

    def _fetch(self, partition: int, offset: int, max_records: int) -> httpx.Response:
        log = self.logs[partition]
        if offset < log.log_start or offset > log.log_end:
            body: dict[str, Any] = {
                "error_code": "OFFSET_OUT_OF_RANGE", "retriable": False,
                "message": f"offset {offset} is outside the log [{log.log_start}, {log.log_end}]"}
            if self.bounds_in_416:
                body["details"] = {"log_start_offset": log.log_start, "log_end_offset": log.log_end}
            return httpx.Response(416, json=body)
        upto = min(log.log_end, offset + max_records)
        return httpx.Response(200, json={
            "records": [{"offset": o, "commit_position": o, "key": None, "value": o, "headers": None,
                         "timestamp_ms": 0} for o in range(offset, upto)],
            "next_offset": upto, "high_watermark": log.log_end, "last_stable_offset": log.log_end,
            "log_start_offset": log.log_start})

    def fetched(self, partition: int = 0) -> list[int | None]:
        """The offsets fetched from orders/partition, in order."""
        return [o for _, path, o in self.requests if path == f"/v1/topics/orders/partitions/{partition}/records"]

    def described(self) -> int:
        return sum(1 for _, path, _ in self.requests if path == "/v1/topics/orders")


def consumer(service: FakeService, reset: str, group: bool = True) -> Consumer:
    c = Consumer(URL, "g" if group else None, auto_offset_reset=reset,
                 client=httpx.Client(base_url=URL, transport=httpx.MockTransport(service)))
    c._session.sleep = lambda _s: None  # nothing here is retried; never wait if it were
    return c


def manual(service: FakeService, reset: str, partitions: tuple[int, ...] = (0,)) -> Consumer:
    """A manually assigned consumer of group g (no membership): committed offsets still count."""
    c = consumer(service, reset)
    c.assign([("orders", p) for p in partitions])
    return c


def offsets(records: list) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for r in records]


def reset_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "app.client.consumer"]


@pytest.fixture(autouse=True)
def _capture_client_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="app.client.consumer")


# --- no committed offset ----------------------------------------------------------------------


def test_earliest_starts_a_partition_without_committed_offset_at_its_log_start(caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(8, 12)})
    c = manual(service, "earliest")
    assert offsets(c.poll(timeout_s=0)) == [(0, 8), (0, 9), (0, 10), (0, 11)]
    assert service.fetched() == [8]  # straight to the log start: no 416 on the way
    assert reset_lines(caplog) == [
        ("INFO", "group g: orders/0: no committed offset; starting at the log start, offset 8 (auto_offset_reset=earliest)")]


def test_latest_starts_a_partition_without_committed_offset_at_its_log_end(caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(8, 12)})
    c = manual(service, "latest")
    assert c.poll(timeout_s=0) == []
    assert c.position(ORDERS_0) == 12
    service.logs[0].log_end = 13  # a new record
    assert offsets(c.poll(timeout_s=0)) == [(0, 12)]
    assert reset_lines(caplog) == [
        ("INFO", "group g: orders/0: no committed offset; starting at the log end, offset 12 (auto_offset_reset=latest)")]


def test_a_consumer_without_a_group_starts_by_auto_offset_reset_too() -> None:
    service = FakeService({0: Log(3, 5)})
    c = consumer(service, "earliest", group=False)
    c.assign([ORDERS_0])
    assert offsets(c.poll(timeout_s=0)) == [(0, 3), (0, 4)]
    assert ("GET", "/v1/groups/g/offsets", None) not in service.requests


def test_none_without_committed_offset_raises_no_offset_for_partition_and_fetches_nothing() -> None:
    service = FakeService({0: Log(0, 3), 1: Log(0, 2)}, committed={1: 1})
    c = manual(service, "none", partitions=(0, 1))
    with pytest.raises(NoOffsetForPartitionError) as raised:
        c.poll(timeout_s=0)
    e = raised.value
    assert (e.error_code, e.topic, e.partition, e.status) == ("NO_OFFSET_FOR_PARTITION", "orders", 0, None)
    assert e.message == "group 'g' has no committed offset for orders/0 and auto_offset_reset is 'none'"
    assert isinstance(e, InvalidOffsetError) and not isinstance(e, AbortableError | RetriableError)
    assert service.fetched(0) == service.fetched(1) == [] and service.described() == 0
    with pytest.raises(NoOffsetForPartitionError):
        c.position_offsets()  # nothing to commit for it either

    c.seek(ORDERS_0, 1)  # the caller picks the position
    assert offsets(c.poll(timeout_s=0)) == [(0, 1), (0, 2), (1, 1)]


def test_subscribing_starts_a_newly_assigned_partition_by_auto_offset_reset() -> None:
    service = FakeService({0: Log(4, 6), 1: Log(0, 2)}, committed={1: 1})
    c = consumer(service, "earliest")
    c.subscribe(["orders"])
    try:
        assert c.position_offsets() == {ORDERS_0: 4, ORDERS_1: 1}
        assert offsets(c.poll(timeout_s=0)) == [(0, 4), (0, 5), (1, 1)]
    finally:
        c.close()


# --- out of range (416) ---------------------------------------------------------------------------


def test_earliest_resets_a_committed_offset_below_the_log_start_to_the_log_start(caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(8, 12)}, committed={0: 5})
    c = manual(service, "earliest")
    assert offsets(c.poll(timeout_s=1)) == [(0, 8), (0, 9), (0, 10), (0, 11)]
    assert service.fetched() == [5, 8]  # one refusal, one reset, then the records: no loop
    assert reset_lines(caplog) == [(
        "WARNING",
        "group g: orders/0: position 5 is below the log start 8 (the records before it were deleted); "
        "resetting it to the log start, offset 8 (auto_offset_reset=earliest)")]


def test_latest_resets_a_committed_offset_below_the_log_start_to_the_log_end(caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(8, 12)}, committed={0: 5})
    c = manual(service, "latest")
    assert c.poll(timeout_s=0) == []
    assert c.position(ORDERS_0) == 12
    service.logs[0].log_end = 13
    assert offsets(c.poll(timeout_s=0)) == [(0, 12)]
    assert service.fetched() == [5, 12, 12]
    assert reset_lines(caplog) == [(
        "WARNING",
        "group g: orders/0: position 5 is below the log start 8 (the records before it were deleted); "
        "resetting it to the log end, offset 12 (auto_offset_reset=latest)")]


@pytest.mark.parametrize("reset, new", [("earliest", 2), ("latest", 4)])
def test_a_position_past_the_log_end_is_reset_as_well(reset: str, new: int, caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(2, 4)})
    c = consumer(service, reset, group=False)
    c.assign([ORDERS_0])
    c.seek(ORDERS_0, 20)
    c.poll(timeout_s=0)
    assert service.fetched()[:2] == [20, new]
    assert reset_lines(caplog) == [(
        "WARNING",
        f"orders/0: position 20 is past the log end 4; resetting it to the log "
        f"{'start' if reset == 'earliest' else 'end'}, offset {new} (auto_offset_reset={reset})")]


def test_none_raises_offset_out_of_range_with_the_partition_and_the_bounds_and_moves_nothing(caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(8, 12)}, committed={0: 5})
    c = manual(service, "none")
    with pytest.raises(OffsetOutOfRangeError) as raised:
        c.poll(timeout_s=1)
    e = raised.value
    assert (e.topic, e.partition, e.position, e.log_start_offset, e.log_end_offset) == ("orders", 0, 5, 8, 12)
    assert (e.error_code, e.status) == ("OFFSET_OUT_OF_RANGE", 416)
    assert e.message == ("group g: orders/0: position 5 is below the log start 8 (the records before it "
                         "were deleted), and auto_offset_reset is 'none'")
    assert isinstance(e, InvalidOffsetError) and not isinstance(e, AbortableError | RetriableError)
    assert c.position(ORDERS_0) == 5 and service.fetched() == [5]
    assert reset_lines(caplog) == []
    with pytest.raises(OffsetOutOfRangeError):
        c.poll(timeout_s=0)  # still there: raised again, not skipped

    c.seek(ORDERS_0, 10)
    assert offsets(c.poll(timeout_s=0)) == [(0, 10), (0, 11)]


def test_none_hands_over_records_fetched_before_the_out_of_range_partition_then_raises() -> None:
    service = FakeService({0: Log(0, 2), 1: Log(8, 9)}, committed={0: 0, 1: 5})
    c = manual(service, "none", partitions=(0, 1))
    assert offsets(c.poll(timeout_s=1)) == [(0, 0), (0, 1)]  # their position moved: not lost
    assert c.position(ORDERS_0) == 2
    with pytest.raises(OffsetOutOfRangeError) as raised:
        c.poll(timeout_s=0)
    assert (raised.value.partition, raised.value.position) == (1, 5)
    assert service.fetched(1) == [5]  # raised from the first refusal, not fetched again


def test_a_deferred_out_of_range_error_is_dropped_once_the_caller_seeks_the_partition() -> None:
    service = FakeService({0: Log(0, 2), 1: Log(8, 9)}, committed={0: 0, 1: 5})
    c = manual(service, "none", partitions=(0, 1))
    assert offsets(c.poll(timeout_s=1)) == [(0, 0), (0, 1)]
    c.seek(ORDERS_1, 8)
    assert offsets(c.poll(timeout_s=1)) == [(1, 8)]


def test_a_416_without_bounds_takes_them_from_the_topic_description() -> None:
    service = FakeService({0: Log(8, 12)}, committed={0: 5}, bounds_in_416=False)
    c = manual(service, "earliest")
    assert offsets(c.poll(timeout_s=1))[0] == (0, 8)
    assert service.described() == 1


# --- the reset meets the consumer's other paths ------------------------------------------------


def test_seek_to_committed_returns_a_partition_without_committed_offset_to_where_latest_started_it() -> None:
    service = FakeService({0: Log(0, 3)})
    c = manual(service, "latest")
    assert c.poll(timeout_s=0) == []
    service.logs[0].log_end = 5
    assert offsets(c.poll(timeout_s=0)) == [(0, 3), (0, 4)]
    # The transaction of those records aborted: read them again, not from the new log end.
    c.seek_to_committed()
    assert c.position(ORDERS_0) == 3
    assert offsets(c.poll(timeout_s=0)) == [(0, 3), (0, 4)]
    assert service.described() == 1  # one reset only


def test_seek_to_committed_below_the_log_start_after_an_abort_resets_again_to_records_still_there(caplog) -> None:  # type: ignore[no-untyped-def]
    service = FakeService({0: Log(8, 12)}, committed={0: 5})
    c = manual(service, "earliest")
    assert offsets(c.poll(timeout_s=1))[0] == (0, 8)
    c.seek_to_committed()
    assert offsets(c.poll(timeout_s=1)) == [(0, 8), (0, 9), (0, 10), (0, 11)]
    assert service.fetched() == [5, 8, 5, 8]
    assert [level for level, _ in reset_lines(caplog)] == ["WARNING", "WARNING"]  # one line per reset


def test_a_started_partition_whose_start_was_deleted_restarts_at_the_new_reset_after_an_abort() -> None:
    service = FakeService({0: Log(0, 3)})
    c = manual(service, "latest")
    assert c.poll(timeout_s=0) == []  # started at 3
    service.logs[0] = Log(6, 8)  # retention deleted 3..5 before they were read
    assert c.poll(timeout_s=0) == []  # 416 at 3: reset to the log end, 8
    service.logs[0].log_end = 9
    assert offsets(c.poll(timeout_s=0)) == [(0, 8)]
    c.seek_to_committed()
    assert c.position(ORDERS_0) == 8  # where the last reset started it, not the deleted 3


def test_auto_offset_reset_must_be_one_of_kafkas_values() -> None:
    with pytest.raises(ValueError, match="auto_offset_reset must be one of earliest, latest, none; got 'smallest'"):
        Consumer(URL, auto_offset_reset="smallest")


def test_the_session_raises_416_as_offset_out_of_range_with_its_bounds_at_once() -> None:
    service = FakeService({0: Log(8, 12)})
    s = Session(URL, client=httpx.Client(base_url=URL, transport=httpx.MockTransport(service)),
                sleep=lambda _s: pytest.fail("not retried"))
    with pytest.raises(OffsetOutOfRangeError) as raised:
        s.call("GET", "/v1/topics/orders/partitions/0/records", params={"offset": 5, "max_records": 1})
    assert (raised.value.log_start_offset, raised.value.log_end_offset) == (8, 12)
    assert raised.value.details == {"log_start_offset": 8, "log_end_offset": 12}
    assert len(service.requests) == 1
