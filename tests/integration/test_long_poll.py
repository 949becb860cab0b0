"""Fetches that wait (Kafka's fetch.max.wait.ms / fetch.min.bytes, in records), and the
multi-partition Fetch, in process on both databases: woken by the commit that brings the
records, never early with records of an open transaction, empty when the wait ends."""

from __future__ import annotations

import threading
import time
from typing import Any

from app import metrics

from tests.helpers import batch, begin, create_topic, ident, init_producer, send

# A wait that a test expects to be cut short asks for LONG_WAIT_MS (the service's default
# maximum wait, OUTBOX_FETCH_MAX_WAIT_MS), and "cut short" means an answer within
# WOKEN_WITHIN_S: far apart, so that a loaded machine's slowness is not taken for a waiter
# that slept to the end.
LONG_WAIT_MS = 30_000
WOKEN_WITHIN_S = 20.0


def later(seconds: float, fn: Any) -> threading.Thread:
    def run() -> None:
        time.sleep(seconds)
        fn()

    t = threading.Thread(target=run)
    t.start()
    return t


def timed_get(client: Any, url: str, **params: Any) -> tuple[float, Any]:
    started = time.monotonic()
    r = client.get(url, params=params)
    assert r.status_code == 200, r.text
    return time.monotonic() - started, r.json()


def test_a_waiting_fetch_answers_as_soon_as_a_send_commits(client: Any) -> None:
    create_topic(client, "orders")
    t = later(0.3, lambda: send(client, [batch("orders", 0, ["late"])]))
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=LONG_WAIT_MS)
    t.join()
    assert [r["value"] for r in page["records"]] == ["late"]
    assert 0.25 <= took < WOKEN_WITHIN_S, took  # woken by the commit, not by the wait's end


def test_a_waiting_fetch_with_nothing_to_read_answers_empty_when_the_wait_ends(client: Any) -> None:
    create_topic(client, "orders")
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=400)
    assert page["records"] == [] and page["next_offset"] == 0
    assert 0.35 <= took < WOKEN_WITHIN_S, took


def test_a_fetch_with_records_there_does_not_wait(client: Any) -> None:
    create_topic(client, "orders")
    send(client, [batch("orders", 0, ["there"])])
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=LONG_WAIT_MS)
    assert [r["value"] for r in page["records"]] == ["there"] and took < WOKEN_WITHIN_S


def test_read_committed_waits_through_an_open_transactions_records_until_it_commits(client: Any) -> None:
    create_topic(client, "orders")
    p = init_producer(client, "tx")
    begin(client, "tx", p)
    t = later(0.2, lambda: send(client, [batch("orders", 0, ["in txn"], 0)], p, "tx"))
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=700)
    t.join()
    assert page["records"] == [] and took >= 0.65  # the append woke it; nothing committed yet
    t = later(0.3, lambda: client.post("/v1/transactions/tx/commit", json=ident(p)))
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=LONG_WAIT_MS)
    t.join()
    assert [r["value"] for r in page["records"]] == ["in txn"] and took < WOKEN_WITHIN_S


def test_min_records_holds_the_answer_until_that_many_are_there(client: Any) -> None:
    create_topic(client, "orders")
    def one_by_one() -> None:
        for i in range(3):
            time.sleep(0.15)
            send(client, [batch("orders", 0, [i])])

    sender = later(0.0, one_by_one)
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=LONG_WAIT_MS, min_records=3)
    sender.join()
    assert [r["value"] for r in page["records"]] == [0, 1, 2]
    assert 0.25 <= took < WOKEN_WITHIN_S, took


def test_a_wait_is_bounded_by_the_services_maximum(client: Any, monkeypatch: Any) -> None:
    create_topic(client, "orders")
    monkeypatch.setattr(client.app.state.services.long_poll, "max_wait_ms", 300)
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=600_000)
    assert page["records"] == [] and took < WOKEN_WITHIN_S


# --- several partitions in one request ------------------------------------------------------------


def fetch_many(client: Any, parts: list[tuple[str, int, int]], **extra: Any) -> list[dict]:
    r = client.post("/v1/fetch", json={"partitions": [{"topic": t, "partition": p, "offset": o} for t, p, o in parts],
                                       **extra})
    assert r.status_code == 200, r.text
    return r.json()["partitions"]


def test_several_partitions_are_read_each_from_its_position(client: Any) -> None:
    create_topic(client, "orders", 2)
    create_topic(client, "income")
    send(client, [batch("orders", 0, ["a0", "a1"]), batch("orders", 1, ["b0"]), batch("income", 0, ["i0", "i1"])])
    got = fetch_many(client, [("orders", 0, 1), ("orders", 1, 0), ("income", 0, 2)])
    assert [(g["topic"], g["partition"], [r["value"] for r in g["records"]], g["next_offset"]) for g in got] == [
        ("orders", 0, ["a1"], 2), ("orders", 1, ["b0"], 1), ("income", 0, [], 2)]


def test_the_record_limit_is_shared_fairly_between_partitions(client: Any) -> None:
    create_topic(client, "orders", 3)
    send(client, [batch("orders", 0, list(range(10))), batch("orders", 1, list(range(10))),
                  batch("orders", 2, [0])])
    got = fetch_many(client, [("orders", 0, 0), ("orders", 1, 0), ("orders", 2, 0)], max_records=9)
    # 3 each, then what partition 2 left (2 records) to the two that filled their share.
    assert [len(g["records"]) for g in got] == [4, 4, 1]
    assert [g["next_offset"] for g in got] == [4, 4, 1]


def test_a_partition_that_cannot_be_read_answers_its_error_and_the_others_are_read(client: Any) -> None:
    create_topic(client, "orders")
    send(client, [batch("orders", 0, ["x"])])
    got = fetch_many(client, [("orders", 0, 0), ("orders", 5, 0), ("nope", 0, 0)])
    assert [(g["topic"], g["partition"], g.get("error_code")) for g in got] == [
        ("orders", 0, None), ("orders", 5, "UNKNOWN_TOPIC_OR_PARTITION"), ("nope", 0, "UNKNOWN_TOPIC_OR_PARTITION")]
    (out_of_range,) = fetch_many(client, [("orders", 0, 7)])
    assert out_of_range["error_code"] == "OFFSET_OUT_OF_RANGE"
    assert out_of_range["details"] == {"log_start_offset": 0, "log_end_offset": 1}


def test_a_partition_named_twice_is_refused(client: Any) -> None:
    create_topic(client, "orders")
    r = client.post("/v1/fetch", json={"partitions": [{"topic": "orders", "partition": 0},
                                                      {"topic": "orders", "partition": 0, "offset": 1}]})
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_REQUEST")


def test_a_multi_partition_fetch_waits_for_records_in_any_of_its_partitions(client: Any) -> None:
    create_topic(client, "orders", 2)
    fetch_many(client, [("orders", 0, 0), ("orders", 1, 0)])  # its topic id is known from here on
    t = later(0.3, lambda: send(client, [batch("orders", 1, ["late"])]))
    started = time.monotonic()
    got = fetch_many(client, [("orders", 0, 0), ("orders", 1, 0)], max_wait_ms=LONG_WAIT_MS)
    took = time.monotonic() - started
    t.join()
    assert [[r["value"] for r in g["records"]] for g in got] == [[], ["late"]]
    assert 0.25 <= took < WOKEN_WITHIN_S, took



def test_a_waiting_fetch_answers_as_soon_as_a_topic_it_reads_is_deleted(client: Any) -> None:
    create_topic(client, "orders")
    create_topic(client, "refunds")
    t = later(0.3, lambda: client.delete("/v1/topics/refunds"))
    started = time.monotonic()
    got = fetch_many(client, [("orders", 0, 0), ("refunds", 0, 0)], max_wait_ms=LONG_WAIT_MS)
    took = time.monotonic() - started
    t.join()
    assert [(g["topic"], g["partition"], g.get("error_code"), len(g.get("records", []))) for g in got] == [
        ("orders", 0, None, 0), ("refunds", 0, "UNKNOWN_TOPIC_OR_PARTITION", 0)]
    assert 0.25 <= took < WOKEN_WITHIN_S, took  # woken by the deletion, not by the wait's end

# --- what a waiter costs: woken by its own partitions only, one read per commit and position ---------


class Waiter:
    """A request that waits, made from a thread of its own; `result()` is (seconds, body)."""

    def __init__(self, client: Any, url: str, **params: Any) -> None:
        self.answer: tuple[float, Any] | None = None
        self.failure: BaseException | None = None  # what the request raised, for a failing test's message

        def run() -> None:
            try:
                self.answer = timed_get(client, url, **params)
            except BaseException as e:
                self.failure = e
                raise

        self.thread = later(0.0, run)

    def result(self) -> tuple[float, Any]:
        self.thread.join(timeout=30)
        assert self.answer is not None, self.failure
        return self.answer


def counted(monkeypatch: Any, obj: Any, name: str) -> list[tuple]:
    """The calls made to obj.name from now on (each with its arguments), obj.name still doing its work."""
    calls: list[tuple] = []
    real = getattr(obj, name)

    def count(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, count)
    return calls


def listening(client: Any) -> None:
    """Until this process hears of other processes' commits. Its listener's first look wakes
    every waiter once (what was committed before it listened is unknown), so a test counting a
    waiter's reads starts the waiter after this."""
    assert client.app.state.log_changes.listening.wait(10)


def wait_for_waiters(client: Any, n: int, waiters: list[Waiter] = ()) -> None:  # type: ignore[assignment]
    """Until n waits are in progress, and this process hears of other processes' commits. The
    deadline is generous (a loaded machine has taken more than 10 s to start two waits); when it
    passes, the message says what each of `waiters` was answered, if it was."""
    changes = client.app.state.log_changes
    began = time.monotonic()
    listening(client)
    deadline = time.monotonic() + 30
    reads_before = _reads_started()
    looks: list[tuple[float, int]] = []  # (seconds since `began`, waits in progress), each look
    while (waiting := changes.waiting) < n:
        looks.append((round(time.monotonic() - began, 3), waiting))
        # When it fails, the message also says how long this waited to hear of other processes'
        # commits, how this thread's looks went (the first and last ones, their number and the
        # most waits seen: a thread that did not look while the waits ran shows a gap), how many
        # reads the process started meanwhile (a wait that returns at once, over and over, reads
        # again each time), and the versions a wait compares with.
        # A string: pytest shortens the repr of a tuple in an assertion's message.
        assert time.monotonic() < deadline, str((
            changes.waiting,
            {"largest_gap_s": round(max((b[0] - a[0] for a, b in zip(looks, looks[1:])), default=0.0), 3),
             "most": max(w for _, w in looks), "looks": len(looks), "first": looks[:3], "last": looks[-3:],
             "reads": _reads_started() - reads_before},
            {"now": changes.now(), "changed_at": changes._changed_at, "everything_at": changes._everything_at,
             "closing": changes.closing},
            [w.answer or w.failure for w in waiters]))
        time.sleep(0.01)


def _reads_started() -> float:
    # The process's count (other tests' too: compare two readings within one test).
    return metrics.FETCH_READS.labels("false")._value.get()


def test_a_commit_to_another_partition_wakes_no_waiter(client: Any, monkeypatch: Any) -> None:
    create_topic(client, "orders", 2)
    create_topic(client, "other")
    reads = counted(monkeypatch, client.app.state.services.long_poll.log, "fetch_partitions")
    listening(client)
    # The first fetch of "orders" in this process: its topic id is not known before the read.
    waiter = Waiter(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=1_500)
    wait_for_waiters(client, 1)
    for partitions in ([batch("orders", 1, ["b"])], [batch("other", 0, ["o"])], [batch("orders", 1, ["b"])]):
        send(client, partitions)
    took, page = waiter.result()
    assert page["records"] == [] and took >= 1.4
    assert len(reads) == 1  # its own read only: no commit woke it


def test_a_commit_to_another_partition_wakes_no_multi_partition_waiter(client: Any, monkeypatch: Any) -> None:
    create_topic(client, "orders", 3)
    reads = counted(monkeypatch, client.app.state.services.long_poll.log, "fetch_partitions")
    listening(client)
    answer: dict[str, Any] = {}
    t = later(0.0, lambda: answer.update(got=fetch_many(client, [("orders", 0, 0), ("orders", 1, 0)],
                                                        max_wait_ms=1_500)))
    wait_for_waiters(client, 2)  # one wait, on each of its partitions
    send(client, [batch("orders", 2, ["c"])])
    send(client, [batch("orders", 2, ["c"])])
    t.join(timeout=30)
    assert [g["records"] for g in answer["got"]] == [[], []]
    assert len(reads) == 1


def test_waiters_of_one_partition_woken_by_one_commit_share_one_read(client: Any, monkeypatch: Any) -> None:
    create_topic(client, "orders")
    waiters = [Waiter(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=LONG_WAIT_MS) for _ in range(20)]
    wait_for_waiters(client, 20)
    reads = counted(monkeypatch, client.app.state.services.long_poll.log, "fetch_partitions")
    send(client, [batch("orders", 0, ["x"])])
    pages = [w.result()[1] for w in waiters]
    assert [[r["value"] for r in p["records"]] for p in pages] == [["x"]] * 20
    assert len(reads) == 1


def test_a_commit_between_a_waiters_read_and_its_wait_is_not_slept_through(client: Any, monkeypatch: Any) -> None:
    create_topic(client, "orders")
    log = client.app.state.services.long_poll.log
    real_fetch = log.fetch_partitions
    sent: list[int] = []

    def fetch_then_commit(*args: Any, **kwargs: Any) -> Any:
        fetched = real_fetch(*args, **kwargs)
        if not sent:  # the first read saw nothing; the record commits before the waiter waits
            sent.append(send(client, [batch("orders", 0, ["between"])]).status_code)
        return fetched

    monkeypatch.setattr(log, "fetch_partitions", fetch_then_commit)
    took, page = timed_get(client, "/v1/topics/orders/partitions/0/records", max_wait_ms=LONG_WAIT_MS)
    assert sent == [200]
    assert [r["value"] for r in page["records"]] == ["between"] and took < WOKEN_WITHIN_S, took
