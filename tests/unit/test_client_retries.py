"""The client's retries: KIP-580's backoff, and the refusals that are never retried.

The service is an httpx.MockTransport answering from a script; sleeping, the clock and the
jitter's random draw are injected, so nothing here waits.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from app.client import (
    AbortableError,
    ClientError,
    Consumer,
    ExponentialBackoff,
    FatalError,
    Producer,
    RetriableError,
    UnknownTopicOrPartitionError,
)
from app.client.http import Session

URL = "http://outbox.test"


class Draw(random.Random):
    """A random source whose uniform(a, b) always answers the same point of [a, b]."""

    def __init__(self, at: float) -> None:
        super().__init__(0)
        self.at = at

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.at


LOWEST, MIDDLE, HIGHEST = Draw(0.0), Draw(0.5), Draw(1.0)


class FakeTime:
    """sleep() moves the clock; nothing waits."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


class Script:
    """A fake service: each request takes the next answer scripted for its method and path."""

    def __init__(self, answers: dict[tuple[str, str], list[httpx.Response]]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path)
        self.requests.append(key)
        queue = self.answers.get(key)
        assert queue, f"unscripted request {key}"
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=URL, transport=httpx.MockTransport(self))


def refusal(status: int, code: str, retriable: bool, message: str = "scripted") -> httpx.Response:
    return httpx.Response(status, json={"error_code": code, "message": message, "retriable": retriable})


def unavailable() -> httpx.Response:
    return refusal(503, "STORAGE_UNAVAILABLE", True)


def unknown_topic(name: str = "nope") -> httpx.Response:
    return refusal(404, "UNKNOWN_TOPIC_OR_PARTITION", False, f"unknown topic {name!r}")


def ok(body: Any = None, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body if body is not None else {})


def session(script: Script, fake: FakeTime, backoff: ExponentialBackoff) -> Session:
    return Session(URL, client=script.client(), backoff=backoff, sleep=fake.sleep, clock=fake.clock)


# --- the backoff ------------------------------------------------------------------------------


def delays_ms(backoff: ExponentialBackoff, n: int = 7) -> list[float]:
    return [round(backoff.backoff_ms(a), 6) for a in range(n)]


def test_backoff_doubles_from_retry_backoff_ms_up_to_retry_backoff_max_ms() -> None:
    assert delays_ms(ExponentialBackoff(100, 1000, rng=MIDDLE)) == [100, 200, 400, 800, 1000, 1000, 1000]


def test_jitter_reaches_20_percent_below_the_exponential_term() -> None:
    assert delays_ms(ExponentialBackoff(100, 1000, rng=LOWEST)) == [80, 160, 320, 640, 800, 800, 800]


def test_jitter_reaches_20_percent_above_the_exponential_term_but_never_the_cap() -> None:
    assert delays_ms(ExponentialBackoff(100, 1000, rng=HIGHEST)) == [120, 240, 480, 960, 1000, 1000, 1000]


def test_jittered_delays_stay_within_20_percent_of_the_capped_term() -> None:
    backoff = ExponentialBackoff(100, 1000, rng=random.Random(580))
    for attempts in range(8):
        term = min(100 * 2**attempts, 1000)
        low, high = 0.8 * term, min(1.2 * term, 1000)
        drawn = [backoff.backoff_ms(attempts) for _ in range(500)]
        assert low <= min(drawn) < max(drawn) <= high
        assert max(drawn) - min(drawn) > 0.9 * (high - low)  # spread over the range, not one value


def test_exponent_stops_growing_at_the_cap_so_capped_delays_keep_their_jitter() -> None:
    # 100 ms doubling reaches 1000 ms at 2 ** 3.32…: from there the term is the cap itself.
    assert delays_ms(ExponentialBackoff(100, 1000, rng=LOWEST), 12)[4:] == [800] * 8


def test_initial_backoff_above_the_cap_is_a_constant_backoff_of_the_cap() -> None:
    assert delays_ms(ExponentialBackoff(2000, 500, rng=LOWEST), 4) == [500, 500, 500, 500]


def test_zero_initial_backoff_retries_without_pausing() -> None:
    assert delays_ms(ExponentialBackoff(0, 1000, rng=HIGHEST), 3) == [0, 0, 0]


@pytest.mark.parametrize("initial_ms, max_ms", [(-1, 1000), (100, -1)])
def test_negative_backoff_is_refused(initial_ms: int, max_ms: int) -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        ExponentialBackoff(initial_ms, max_ms)


# --- the session's retries ---------------------------------------------------------------------


def test_retriable_refusals_are_retried_after_the_exponential_pauses() -> None:
    script = Script({("GET", "/v1/topics/t"): [unavailable()] * 5 + [ok({"partition_count": 1})]})
    fake = FakeTime()
    answer = session(script, fake, ExponentialBackoff(100, 1000, rng=MIDDLE)).call("GET", "/v1/topics/t")
    assert answer == {"partition_count": 1}
    assert fake.sleeps == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert len(script.requests) == 6


def test_a_wait_refused_past_the_services_bound_is_retried_after_the_pauses() -> None:
    throttled = refusal(429, "THROTTLING_QUOTA_EXCEEDED", True, "too many requests already wait")
    script = Script({("POST", "/v1/fetch"): [throttled] * 2 + [ok({"partitions": []})]})
    fake = FakeTime()
    answer = session(script, fake, ExponentialBackoff(100, 1000, rng=MIDDLE)).call(
        "POST", "/v1/fetch", json={"partitions": [], "max_wait_ms": 5000})
    assert answer == {"partitions": []}
    assert fake.sleeps == [0.1, 0.2]


def unreachable_then_ok(times: int, fake: FakeTime) -> Session:
    """A session whose service refuses the connection `times` times, then answers
    {"done": true}."""
    failures = iter([httpx.ConnectError("[Errno 111] Connection refused")] * times)

    def handler(request: httpx.Request) -> httpx.Response:
        error = next(failures, None)
        if error is not None:
            raise error
        return ok({"done": True})

    return Session(URL, client=httpx.Client(base_url=URL, transport=httpx.MockTransport(handler)),
                   backoff=ExponentialBackoff(100, 1000, rng=LOWEST), sleep=fake.sleep, clock=fake.clock)


def test_transport_errors_are_retried_after_the_same_pauses() -> None:
    fake = FakeTime()
    s = unreachable_then_ok(2, fake)
    assert s.call("POST", "/v1/records", json={}) == {"done": True}
    assert fake.sleeps == [0.08, 0.16]


def test_an_unreachable_service_is_said_once_as_a_warning_while_it_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    s = unreachable_then_ok(3, FakeTime())
    with caplog.at_level("WARNING", logger="app.client.http"):
        assert s.call("GET", "/v1/topics/orders") == {"done": True}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "cannot reach http://outbox.test ([Errno 111] Connection refused); retrying GET /v1/topics/orders "
                    "for up to 60 s")]


def test_the_unreachable_warning_leaves_out_the_address_s_credentials(caplog: pytest.LogCaptureFixture) -> None:
    s = unreachable_then_ok(1, FakeTime())
    s.http.base_url = "http://svc:hunter2@outbox.test/?token=secret"
    with caplog.at_level("WARNING", logger="app.client.http"):
        s.call("GET", "/v1/topics/orders")
    assert [r.getMessage() for r in caplog.records] == [
        "cannot reach http://outbox.test/ ([Errno 111] Connection refused); retrying GET /v1/topics/orders "
        "for up to 60 s"]


def test_a_consumer_s_heartbeat_retries_an_unreachable_service_without_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    # Its calls repeat every few seconds in a thread of their own, for as long as the consumer
    # lives; the consumer's own calls say the service cannot be reached.
    consumer = Consumer(URL, "g")
    s = unreachable_then_ok(3, FakeTime())
    s.say_unreachable = consumer._heartbeat_session.say_unreachable
    consumer.close()
    with caplog.at_level("WARNING", logger="app.client.http"):
        assert s.call("POST", "/v1/groups/g/members/m/heartbeat") == {"done": True}
    assert caplog.records == []


def test_retries_stop_when_the_next_pause_would_pass_the_deadline() -> None:
    script = Script({("GET", "/v1/topics/t"): [unavailable()]})
    fake = FakeTime()
    with pytest.raises(RetriableError) as raised:
        session(script, fake, ExponentialBackoff(100, 1000, rng=MIDDLE)).call("GET", "/v1/topics/t", deadline_s=1.0)
    assert raised.value.error_code == "STORAGE_UNAVAILABLE"
    assert fake.sleeps == [0.1, 0.2, 0.4]  # 0.7 s slept; 0.8 s more would end past 1.0 s
    assert len(script.requests) == 4


def test_unknown_topic_is_raised_at_once_and_never_retried() -> None:
    script = Script({("GET", "/v1/topics/nope"): [unknown_topic()]})
    fake = FakeTime()
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        session(script, fake, ExponentialBackoff()).call("GET", "/v1/topics/nope")
    assert raised.value.error_code == "UNKNOWN_TOPIC_OR_PARTITION"
    assert not isinstance(raised.value, AbortableError | RetriableError)
    assert script.requests == [("GET", "/v1/topics/nope")]
    assert fake.sleeps == []


# --- the settings on Producer and Consumer act ---------------------------------------------------


def _pauses_of(make: Callable[[httpx.Client], Any], run: Callable[[Any], Any], script: Script) -> list[float]:
    fake = FakeTime()
    thing = make(script.client())
    thing._session.sleep, thing._session.clock = fake.sleep, fake.clock
    run(thing)
    return fake.sleeps


def test_producer_retry_backoff_settings_set_its_pauses() -> None:
    script = Script({("POST", "/v1/producers"): [refusal(409, "CONCURRENT_TRANSACTIONS", True)] * 3
                     + [ok({"producer_id": 7, "producer_epoch": 0})]})
    pauses = _pauses_of(
        lambda client: Producer(URL, "tx", retry_backoff_ms=30, retry_backoff_max_ms=50, client=client),
        lambda producer: producer.init_transactions(),
        script,
    )
    # 30 ms ±20 %, then the 50 ms cap (its term 30 * 2 ** 0.74 = 50, jittered down to 40).
    assert len(pauses) == 3
    assert 0.024 <= pauses[0] <= 0.036
    assert all(0.040 <= p <= 0.050 for p in pauses[1:])


def test_consumer_retry_backoff_settings_set_its_pauses() -> None:
    script = Script({
        ("POST", "/v1/fetch"): [unavailable()] * 3 + [ok({"partitions": [
            {"topic": "in", "partition": 0, "records": [], "next_offset": 0, "high_watermark": 0}]})],
    })

    def poll(consumer: Consumer) -> None:
        consumer.assign([("in", 0)])
        consumer.seek(("in", 0), 0)
        consumer.poll(timeout_s=0)

    pauses = _pauses_of(
        lambda client: Consumer(URL, retry_backoff_ms=500, retry_backoff_max_ms=5000, client=client),
        poll,
        script,
    )
    assert len(pauses) == 3
    for attempts, pause in enumerate(pauses):
        term = 0.5 * 2**attempts
        assert 0.8 * term <= pause <= 1.2 * term


# --- a topic that does not exist ---------------------------------------------------------------


def _transactional_producer(script: Script, transaction_version: int = 1) -> Producer:
    script.answers.setdefault(("POST", "/v1/producers"), [ok({"producer_id": 7, "producer_epoch": 0,
                                                              "transaction_version": transaction_version})])
    script.answers.setdefault(("POST", "/v1/transactions/tx/begin"), [ok({"txn_id": 1})])
    producer = Producer(URL, "tx", client=script.client(), transaction_version=transaction_version)
    producer.init_transactions()
    producer.begin_transaction()
    return producer


def test_send_to_a_missing_topic_raises_before_buffering_and_the_transaction_goes_on() -> None:
    script = Script({
        ("GET", "/v1/topics/nope"): [unknown_topic()],
        ("POST", "/v1/transactions/tx/commit"): [ok({"state": "CompleteCommit"})],
    })
    producer = _transactional_producer(script)
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        producer.send("nope", {"amount": 1}, key="order-1")
    assert raised.value.topic == "nope"
    producer.commit_transaction()  # nothing of the refused record was buffered
    assert script.requests == [
        ("POST", "/v1/producers"), ("POST", "/v1/transactions/tx/begin"),
        ("GET", "/v1/topics/nope"), ("POST", "/v1/transactions/tx/commit"),
    ]


def test_send_to_a_partition_the_topic_lacks_is_refused_after_one_fresh_lookup() -> None:
    script = Script({("GET", "/v1/topics/income"): [ok({"partition_count": 2})]})
    producer = _transactional_producer(script)
    producer.send("income", {"amount": 1}, partition=1)
    with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0..1; got 2"):
        producer.send("income", {"amount": 1}, partition=2)
    assert script.requests.count(("GET", "/v1/topics/income")) == 2  # once more: partitions may have been added


def test_send_refused_for_a_deleted_topic_is_not_retried_and_the_transaction_must_abort() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 2})],
        ("POST", "/v1/records"): [unknown_topic("income")],
        ("POST", "/v1/transactions/tx/abort"): [ok({"state": "CompleteAbort"})],
    })
    producer = _transactional_producer(script)
    producer.send("income", {"amount": 1}, key="order-1")
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        producer.flush()
    assert raised.value.topic == "income"
    assert script.requests.count(("POST", "/v1/records")) == 1
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.commit_transaction()  # refused in the client: the transaction lacks the records
    producer.abort_transaction()
    assert ("POST", "/v1/transactions/tx/commit") not in script.requests
    assert (producer.producer_id, producer.producer_epoch) == (7, 0)  # nothing was written: no epoch bump


def test_offsets_refused_for_a_missing_topic_leave_the_transaction_unable_to_commit() -> None:
    script = Script({("POST", "/v1/transactions/tx/offsets"): [unknown_topic("orders")]})
    producer = _transactional_producer(script)
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.send_offsets_to_transaction({("orders", 0): 3}, "pizza-income")
    with pytest.raises(UnknownTopicOrPartitionError):
        producer.commit_transaction()
    assert script.requests.count(("POST", "/v1/transactions/tx/offsets")) == 1


def test_subscribing_to_a_missing_topic_raises_at_once() -> None:
    script = Script({("POST", "/v1/groups/g/members"): [unknown_topic("nope")]})
    consumer = Consumer(URL, "g", client=script.client())
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        consumer.subscribe(["nope"])
    assert raised.value.topic == "nope"
    assert script.requests == [("POST", "/v1/groups/g/members")]
    assert consumer._heartbeat is None
    consumer.close()


def test_fetching_from_a_missing_topic_raises_at_once() -> None:
    # The multi-partition Fetch answers the partition's error in place.
    script = Script({("POST", "/v1/fetch"): [ok({"partitions": [
        {"topic": "gone", "partition": 0, "error_code": "UNKNOWN_TOPIC_OR_PARTITION",
         "message": "topic 'gone' does not exist"}]})]})
    consumer = Consumer(URL, client=script.client())
    consumer.assign([("gone", 0)])
    consumer.seek(("gone", 0), 0)
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        consumer.poll(timeout_s=5)
    assert raised.value.topic == "gone"
    assert script.requests == [("POST", "/v1/fetch")]


# --- Transaction version 2 -------------------------------------------------------------------


def _records_answer(txn_id: int = 5) -> httpx.Response:
    return ok({"results": [{"topic": "income", "partition": 0, "base_offset": 0}], "txn_id": txn_id})


def test_a_transactional_producer_asks_for_version_2_unless_told_otherwise() -> None:
    import json as _json

    asked: list[dict] = []
    script = Script({("POST", "/v1/producers"): [ok({"producer_id": 7, "producer_epoch": 0, "transaction_version": 2})]})

    def recording(request: httpx.Request) -> httpx.Response:
        asked.append(_json.loads(request.content))
        return script(request)

    producer = Producer(URL, "tx", client=httpx.Client(base_url=URL, transport=httpx.MockTransport(recording)))
    producer.init_transactions()
    assert asked == [{"transactional_id": "tx", "transaction_version": 2}]
    assert producer.transaction_version == 2


def test_version_2_begins_without_a_request_and_commits_nothing_when_nothing_was_sent() -> None:
    script = Script({})
    producer = _transactional_producer(script, transaction_version=2)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.abort_transaction()
    assert script.requests == [("POST", "/v1/producers")]


def test_version_2_takes_the_epoch_its_commit_answers_and_restarts_its_sequences() -> None:
    import json as _json

    bodies: list[dict] = []
    script = Script({
        ("POST", "/v1/producers"): [ok({"producer_id": 7, "producer_epoch": 0, "transaction_version": 2})],
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/records"): [_records_answer()],
        ("POST", "/v1/transactions/tx/commit"): [
            ok({"state": "CompleteCommit", "producer_id": 7, "producer_epoch": 1}),
            ok({"state": "CompleteCommit", "producer_id": 7, "producer_epoch": 2})],
    })

    def recording(request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path != "/v1/producers":
            bodies.append(_json.loads(request.content))
        return script(request)

    producer = Producer(URL, "tx", client=httpx.Client(base_url=URL, transport=httpx.MockTransport(recording)),
                        batch_records=2)
    producer.init_transactions()
    for _ in range(2):
        producer.begin_transaction()
        for amount in (1, 2, 3):  # the first two sent when the third finds the buffer full, the third with the Commit
            producer.send("income", {"amount": amount}, partition=0)
        producer.commit_transaction()

    sent = [(b["producer_epoch"], b["batches"][0]["base_sequence"], "transactional_id" in b) for b in bodies]
    # A Send, then a Commit carrying the rest (no transactional_id in a Commit's body), per transaction.
    assert sent == [(0, 0, True), (0, 2, False), (1, 0, True), (1, 2, False)]
    assert ("POST", "/v1/transactions/tx/begin") not in script.requests
    assert producer.producer_epoch == 2


def test_version_2_commits_a_transaction_that_fits_one_request_in_one_request() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/transactions/tx/commit"): [ok({"state": "CompleteCommit", "producer_id": 7, "producer_epoch": 1})],
    })
    producer = _transactional_producer(script, transaction_version=2)
    producer.send("income", {"amount": 1}, partition=0)
    producer.commit_transaction()
    assert script.requests == [("POST", "/v1/producers"), ("GET", "/v1/topics/income"),
                               ("POST", "/v1/transactions/tx/commit")]


@pytest.mark.parametrize("records, requests", [
    (2, [("POST", "/v1/transactions/tx/commit")]),  # a full buffer waits for the Commit
    (3, [("POST", "/v1/records"), ("POST", "/v1/transactions/tx/commit")]),
    (4, [("POST", "/v1/records"), ("POST", "/v1/transactions/tx/commit")]),
])
def test_version_2_commit_carries_the_last_full_buffer(records: int, requests: list[tuple[str, str]]) -> None:
    import json as _json

    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/records"): [_records_answer()],
        ("POST", "/v1/transactions/tx/commit"): [ok({"state": "CompleteCommit", "producer_id": 7, "producer_epoch": 1})],
    })
    carried: list[tuple[int, list[int]]] = []

    def recording(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/commit"):
            carried.extend((b["base_sequence"], [r["value"] for r in b["records"]])
                           for b in _json.loads(request.content).get("batches", []))
        return script(request)

    script.answers[("POST", "/v1/producers")] = [ok({"producer_id": 7, "producer_epoch": 0, "transaction_version": 2})]
    producer = Producer(URL, "tx", client=httpx.Client(base_url=URL, transport=httpx.MockTransport(recording)),
                        transaction_version=2, batch_records=2)
    producer.init_transactions()
    producer.begin_transaction()
    for value in range(records):
        producer.send("income", value, partition=0)
    producer.commit_transaction()

    assert script.requests[2:] == requests
    first_carried = 2 * ((records - 1) // 2)
    assert carried == [(first_carried, list(range(first_carried, records)))]


def test_version_2_keeps_the_buffer_when_the_commit_carrying_it_is_not_answered() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/transactions/tx/commit"): [unavailable(), ok({"state": "CompleteCommit", "producer_id": 7,
                                                                     "producer_epoch": 1})],
    })
    producer = _transactional_producer(script, transaction_version=2)
    producer.delivery_timeout_s = 0.05
    producer.send("income", {"amount": 1}, partition=0)
    with pytest.raises(RetriableError):
        producer.commit_transaction()
    producer.delivery_timeout_s = 5
    producer.commit_transaction()  # the same request again
    assert producer.producer_epoch == 1


def test_version_2_a_refused_commit_carrying_the_buffer_leaves_the_transaction_to_abort() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/transactions/tx/commit"): [refusal(409, "OUT_OF_ORDER_SEQUENCE_NUMBER", False)],
        ("POST", "/v1/transactions/tx/abort"): [ok({"state": "CompleteAbort", "producer_id": 7, "producer_epoch": 1})],
    })
    producer = _transactional_producer(script, transaction_version=2)
    producer.send("income", {"amount": 1}, partition=0)
    with pytest.raises(AbortableError):
        producer.commit_transaction()
    with pytest.raises(AbortableError):
        producer.commit_transaction()
    producer.abort_transaction()
    assert (producer.producer_epoch, script.requests.count(("POST", "/v1/transactions/tx/commit"))) == (1, 1)


def test_version_2_aborts_after_a_send_of_unknown_outcome_without_initialising_again() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/records"): [refusal(409, "OUT_OF_ORDER_SEQUENCE_NUMBER", False)],
        ("POST", "/v1/transactions/tx/abort"): [ok({"state": "CompleteAbort", "producer_id": 7, "producer_epoch": 1})],
    })
    producer = _transactional_producer(script, transaction_version=2)
    producer.send("income", {"amount": 1}, partition=0)
    with pytest.raises(ClientError):
        producer.flush()
    producer.abort_transaction()
    assert script.requests.count(("POST", "/v1/producers")) == 1  # the Abort bumped the epoch itself
    assert (producer.producer_id, producer.producer_epoch) == (7, 1)


def test_version_2_abort_of_a_transaction_the_service_never_began_goes_on() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/records"): [unavailable()],
        ("POST", "/v1/transactions/tx/abort"): [refusal(409, "INVALID_TXN_STATE", False)],
    })
    script.answers[("POST", "/v1/producers")] = [ok({"producer_id": 7, "producer_epoch": 0, "transaction_version": 2}),
                                                 ok({"producer_id": 7, "producer_epoch": 1, "transaction_version": 2})]
    producer = _transactional_producer(script, transaction_version=2)
    producer.delivery_timeout_s = 0.05
    producer.send("income", {"amount": 1}, partition=0)
    with pytest.raises(ClientError):
        producer.flush()
    producer.abort_transaction()  # the Send never reached it: nothing to abort, the epoch bumped by InitProducerId
    assert (producer.producer_id, producer.producer_epoch) == (7, 1)
    producer.begin_transaction()


def test_after_an_unanswered_commit_only_the_commit_again_is_allowed() -> None:
    """It may have committed: sending more, or aborting, could lose or repeat records."""
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/transactions/tx/commit"): [unavailable(), ok({"state": "CompleteCommit", "producer_id": 7,
                                                                     "producer_epoch": 1})],
    })
    producer = _transactional_producer(script, transaction_version=2)
    producer.delivery_timeout_s = 0.05
    producer.send("income", {"amount": 1}, partition=0)
    with pytest.raises(RetriableError):
        producer.commit_transaction()
    for refused in (lambda: producer.send("income", {"amount": 2}, partition=0), producer.abort_transaction,
                    producer.begin_transaction):
        with pytest.raises(ClientError, match="commit_transaction\\(\\) again"):
            refused()
    producer.delivery_timeout_s = 5
    producer.commit_transaction()
    producer.begin_transaction()  # answered: the producer goes on
    assert producer.producer_epoch == 1


# --- the transaction version the service answers ---------------------------------------------


def test_a_producer_asking_version_2_of_a_service_answering_version_1_speaks_version_1() -> None:
    script = Script({
        ("POST", "/v1/producers"): [ok({"producer_id": 7, "producer_epoch": 0, "transaction_version": 1})],
        ("POST", "/v1/transactions/tx/begin"): [ok({"txn_id": 1})],
    })
    producer = Producer(URL, "tx", client=script.client())  # version 2 is the default
    producer.init_transactions()
    producer.begin_transaction()
    assert producer.transaction_version == 1
    assert script.requests == [("POST", "/v1/producers"), ("POST", "/v1/transactions/tx/begin")]


def test_a_service_that_answers_no_transaction_version_predates_version_2() -> None:
    script = Script({
        ("POST", "/v1/producers"): [ok({"producer_id": 7, "producer_epoch": 0})],
        ("POST", "/v1/transactions/tx/begin"): [ok({"txn_id": 1})],
    })
    producer = Producer(URL, "tx", client=script.client(), transaction_version=2)
    producer.init_transactions()
    producer.begin_transaction()
    assert producer.transaction_version == 1
    assert ("POST", "/v1/transactions/tx/begin") in script.requests


def test_a_producer_answered_version_2_begins_no_transaction_on_the_service() -> None:
    script = Script({("POST", "/v1/producers"): [ok({"producer_id": 7, "producer_epoch": 0, "transaction_version": 2})]})
    producer = Producer(URL, "tx", client=script.client())
    producer.init_transactions()
    producer.begin_transaction()
    assert producer.transaction_version == 2
    assert script.requests == [("POST", "/v1/producers")]


def test_close_writes_what_a_plain_producer_still_buffers() -> None:
    script = Script({
        ("GET", "/v1/topics/income"): [ok({"partition_count": 1})],
        ("POST", "/v1/producers"): [ok({"producer_id": 7, "producer_epoch": 0})],
        ("POST", "/v1/records"): [_records_answer(txn_id=None)],  # type: ignore[arg-type]
    })
    sent: list[list[int]] = []

    def recording(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/records":
            sent.extend([r["value"] for r in b["records"]] for b in json.loads(request.content)["batches"])
        return script(request)

    producer = Producer(URL, client=httpx.Client(base_url=URL, transport=httpx.MockTransport(recording)))
    for value in range(3):
        producer.send("income", value, partition=0)
    assert sent == []
    producer.close()
    assert sent == [[0, 1, 2]]


def test_close_drops_what_an_open_transaction_buffers() -> None:
    script = Script({("GET", "/v1/topics/income"): [ok({"partition_count": 1})]})
    producer = _transactional_producer(script, transaction_version=2)
    producer.send("income", {"amount": 1}, partition=0)
    producer.close()
    assert ("POST", "/v1/records") not in script.requests


def _plain_producer_holding_three(script: Script) -> Producer:
    script.answers.setdefault(("GET", "/v1/topics/income"), [ok({"partition_count": 1})])
    script.answers.setdefault(("POST", "/v1/producers"), [ok({"producer_id": 7, "producer_epoch": 0})])
    producer = Producer(URL, client=script.client())
    for value in range(3):
        producer.send("income", value, partition=0)
    return producer


def test_close_with_timeout_0_drops_the_buffer_and_writes_nothing() -> None:
    script = Script({})
    _plain_producer_holding_three(script).close(timeout_s=0)
    assert ("POST", "/v1/records") not in script.requests


def test_close_of_a_producer_already_failed_writes_nothing() -> None:
    script = Script({})
    producer = _plain_producer_holding_three(script)
    producer._fatal = FatalError("INVALID_TXN_STATE", "failed before")  # as a refused Send leaves it
    producer.close()
    assert ("POST", "/v1/records") not in script.requests


def test_close_whose_write_is_not_answered_raises_within_its_timeout_and_closes() -> None:
    script = Script({("POST", "/v1/records"): [unavailable()] * 1000})
    producer = _plain_producer_holding_three(script)
    closed: list[bool] = []
    producer._session.close = lambda: closed.append(True)  # type: ignore[method-assign]
    started = time.monotonic()
    with pytest.raises(ClientError):  # unanswered: the producer's sequences are then in doubt (abortable)
        producer.close(timeout_s=0.3)
    assert time.monotonic() - started < 0.3 + 5  # the timeout, not delivery_timeout_s (60 s)
    assert closed == [True]
    assert producer.delivery_timeout_s == 60.0


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost:8000", "ftp://127.0.0.1:8000"])
def test_an_address_without_http_or_https_is_refused_at_once_not_retried(
        url: str, caplog: pytest.LogCaptureFixture) -> None:
    # A newcomer's `--url 127.0.0.1:8000`: no retry can send the request anywhere, so the
    # call fails at its first attempt, naming the address, rather than after its deadline.
    fake = FakeTime()
    s = Session(url, sleep=fake.sleep, clock=fake.clock)
    try:
        with caplog.at_level("WARNING", logger="app.client.http"), pytest.raises(FatalError) as raised:
            s.call("GET", "/v1/topics/orders")
    finally:
        s.close()
    assert raised.value.error_code == "INVALID_URL"
    assert "http://127.0.0.1:8000" in raised.value.message and repr(url.split("://")[-1])[1:-1] in raised.value.message
    assert fake.sleeps == []
    assert caplog.records == []


def test_an_answer_that_is_not_the_service_s_is_one_line_naming_the_request_not_the_page() -> None:
    # Another web server at the address (or a path after the service's address): its page,
    # HTML of many lines, would be the message a program prints on its one error line.
    page = "<!DOCTYPE HTML>\n<html>\n<body>\n<h1>Error response</h1>\n<p>Error code: 404</p>\n</body>\n</html>\n"
    client = httpx.Client(base_url="http://user:pw@web.test", transport=httpx.MockTransport(
        lambda request: httpx.Response(404, text=page, headers={"content-type": "text/html"})))
    with pytest.raises(ClientError) as raised:
        Session("http://user:pw@web.test", client=client).call("GET", "/v1/topics/income")
    assert raised.value.error_code == "HTTP_404"
    assert raised.value.message == (
        "GET http://web.test/v1/topics/income was answered HTTP 404 without an outbox error: not the service's "
        "answer (is the URL the outbox service's address, e.g. http://127.0.0.1:8000, with no path? a proxy in "
        "front of it?)")


@pytest.mark.parametrize("make", [
    lambda client: Producer(URL, "tx", client=client, api_key="secret-key"),
    lambda client: Consumer(URL, "group", client=client, api_key="secret-key"),
    lambda client: Producer(URL, "tx", client=client, token="secret-key"),
])
def test_credentials_given_beside_a_client_are_sent_on_its_requests(make: Callable[[httpx.Client], Any]) -> None:
    # A client of the caller's own (a test's in-process one, a proxy's) is used as it is; the
    # credentials given beside it were left out of its requests, each refused 401.
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return ok({"producer_id": 7, "producer_epoch": 0, "topics": []})

    made = make(httpx.Client(base_url=URL, transport=httpx.MockTransport(handler)))
    made._session.call("GET", "/v1/topics")

    assert seen == ["Bearer secret-key"]


def test_a_tls_setting_beside_a_client_is_refused() -> None:
    # The client given is used as it was made: a tls setting could not reach it.
    with pytest.raises(ValueError, match="tls: the client given"):
        Producer(URL, "tx", client=httpx.Client(base_url=URL), tls=False)


def test_a_transaction_timeout_without_a_transactional_id_is_refused() -> None:
    # Only a transactional producer's InitProducerId carries it: an idempotent producer would
    # drop it without a word.
    with pytest.raises(ValueError, match="transaction_timeout_ms needs a transactional_id"):
        Producer(URL, transaction_timeout_ms=120_000)
    assert Producer(URL, "tx", transaction_timeout_ms=120_000).transaction_timeout_ms == 120_000
