"""examples/pizza_income.py's transform and its missing-topic hint (the pipeline itself runs
against a live service in tests/e2e/test_pizza_income_example.py)."""

from __future__ import annotations

import http.server
import threading
from typing import Any

import pytest

from app.client import AbortableError, ConsumerRecord, ExponentialBackoff, FatalError, UnknownTopicOrPartitionError
from examples import pizza_income
from examples.pizza_income import NotAnOrder, PizzaIncome, Totals, income_of, missing_topic_line


@pytest.mark.parametrize("order, income", [
    ({"pizza": "margherita", "price": 9.5}, {"amount": 9.5}),
    ({"pizza": "diavola", "price": 11}, {"amount": 11}),
    ({"price": 0}, {"amount": 0}),
])
def test_an_order_earns_its_price_as_the_amount(order: dict, income: dict) -> None:
    assert income_of(order) == income
    assert type(income_of(order)["amount"]) is type(order["price"])  # 11 stays 11, as in the walkthrough


@pytest.mark.parametrize("value, reason", [
    ("margherita", "value is not a JSON object but a string"),
    (["margherita", 9.5], "value is not a JSON object but an array"),
    (None, "value is not a JSON object but null"),
    (9.5, "value is not a JSON object but a number"),
    ({"pizza": "margherita"}, "order has no price"),
    ({"pizza": "margherita", "price": "9.5"}, "price is not a number but a string"),
    ({"pizza": "margherita", "price": True}, "price is not a number but a boolean"),
    ({"pizza": "margherita", "price": None}, "price is not a number but null"),
    ({"pizza": "margherita", "price": {"eur": 9.5}}, "price is not a number but an object"),
])
def test_a_value_that_is_not_an_order_is_refused_with_the_reason(value: Any, reason: str) -> None:
    with pytest.raises(NotAnOrder) as raised:
        income_of(value)
    assert str(raised.value) == reason


def test_missing_topic_hint_is_one_line_with_the_curl_that_creates_it() -> None:
    error = UnknownTopicOrPartitionError("UNKNOWN_TOPIC_OR_PARTITION", "unknown topic 'income'", 404, topic="income")
    assert missing_topic_line("http://127.0.0.1:8000", "income", error) == (
        "topic 'income' does not exist; create it with: curl -s -X POST http://127.0.0.1:8000/v1/topics "
        """-H 'content-type: application/json' -d '{"name": "income", "partitions": 2}'"""
    )


class FakeProducer:
    """Fails `failures` commits with an abortable error, then commits."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[str] = []

    def partitions_for(self, topic: str) -> list[int]:
        return [0, 1]

    def init_transactions(self) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send(self, topic: str, value: Any, **kwargs: Any) -> None:
        self.calls.append(f"send {topic}")

    def send_offsets_to_transaction(self, offsets: Any, group_metadata: Any) -> None:
        self.calls.append("offsets")

    def commit_transaction(self) -> None:
        if self.failures:
            self.failures -= 1
            raise AbortableError("ILLEGAL_GENERATION", "scripted", 409)
        self.calls.append("commit")

    def abort_transaction(self) -> None:
        self.calls.append("abort")


class FakeConsumer:
    """Answers one order until it is committed, then nothing."""

    def __init__(self, producer: FakeProducer) -> None:
        self.producer = producer
        self.seeks = 0

    def subscribe(self, topics: list[str]) -> None:
        assert topics == ["orders"]

    def poll(self, timeout_s: float) -> list[ConsumerRecord]:
        if "commit" in self.producer.calls:
            return []
        return [ConsumerRecord("orders", 0, 0, None, "order-1", {"pizza": "margherita", "price": 9.5}, None, 0)]

    def position_offsets(self) -> dict:
        return {("orders", 0): 1}

    def group_metadata(self) -> str:
        return "pizza-income"

    def seek_to_committed(self) -> None:
        self.seeks += 1


def test_a_transaction_that_keeps_aborting_is_redone_after_the_clients_growing_backoff() -> None:
    producer = FakeProducer(failures=5)
    consumer = FakeConsumer(producer)
    sleeps: list[float] = []
    app = PizzaIncome(producer, consumer, None, ExponentialBackoff(100, 1000, jitter=0), sleep=sleeps.append)  # type: ignore[arg-type]

    totals = app.run(idle_exit_s=0)

    assert sleeps == [0.1, 0.2, 0.4, 0.8, 1.0]
    assert consumer.seeks == 5
    assert producer.calls.count("abort") == 5
    assert (totals.orders, totals.income) == (1, 1)


class InterruptedCommitProducer(FakeProducer):
    """Its Commit reaches the service, which leaves the transaction in `state`, and Ctrl-C lands
    before the answer is read; the abort that follows is refused, as the service refuses one
    of an ended transaction."""

    def __init__(self, state: str) -> None:
        super().__init__(failures=0)
        self.state = state

    def commit_transaction(self) -> None:
        self.calls.append("commit sent")
        raise KeyboardInterrupt

    def abort_transaction(self) -> None:
        self.calls.append("abort")
        raise FatalError("INVALID_TXN_STATE", "the transaction has ended", 409)

    def describe_transaction(self) -> dict:
        self.calls.append("describe")
        return {"state": self.state}


def _interrupted_in_commit(state: str) -> tuple[Totals, list[str]]:
    producer = InterruptedCommitProducer(state)
    app = PizzaIncome(producer, FakeConsumer(producer), None, ExponentialBackoff())  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        app.run(idle_exit_s=0)
    return app.interrupted(), producer.calls


@pytest.mark.parametrize("state", ["CompleteCommit", "PrepareCommit"])
def test_interrupted_before_its_commits_answer_it_counts_the_transaction_the_service_committed(state: str) -> None:
    totals, calls = _interrupted_in_commit(state)

    assert totals == Totals(orders=1, income=1)
    assert calls[-3:] == ["commit sent", "abort", "describe"]


@pytest.mark.parametrize("state", ["CompleteAbort", "PrepareAbort", "Ongoing"])
def test_interrupted_before_its_commits_answer_it_counts_nothing_the_service_did_not_commit(state: str) -> None:
    totals, calls = _interrupted_in_commit(state)

    assert totals == Totals()
    assert calls[-3:] == ["commit sent", "abort", "describe"]


def test_interrupted_with_no_commit_under_way_it_aborts_and_asks_nothing() -> None:
    producer = FakeProducer(failures=0)
    app = PizzaIncome(producer, FakeConsumer(producer), None, ExponentialBackoff())  # type: ignore[arg-type]
    app.run(idle_exit_s=0)  # one order, committed and counted

    totals = app.interrupted()

    assert totals == Totals(orders=1, income=1)
    assert producer.calls[-2:] == ["commit", "abort"]


class _NotTheService(http.server.BaseHTTPRequestHandler):
    """Another web server at --url's address: a 404 page for every path."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


class _ServiceWithAPath(_NotTheService):
    """The service's own answer for a path no route matches (--url http://host:8000/v1)."""

    def do_GET(self) -> None:  # noqa: N802
        body = b'{"error_code":"NOT_FOUND","message":"Not Found","retriable":false}'
        self.send_response(404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("handler, line", [
    (_NotTheService, "stopping: HTTP_404: GET http://127.0.0.1:{port}/v1/topics/income was answered HTTP 404 "
                     "without an outbox error"),
    (_ServiceWithAPath, "stopping: NOT_FOUND: Not Found (is --url the outbox service's address, e.g. "
                        "http://127.0.0.1:8000, with no path?)"),
], ids=["another server", "a path after the address"])
def test_a_url_that_is_not_the_service_s_address_ends_it_with_one_line(
        handler: type, line: str, caplog: pytest.LogCaptureFixture) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        with caplog.at_level("ERROR", logger="pizza_income"):
            status = pizza_income.main(["--url", f"http://127.0.0.1:{port}", "--idle-exit-s", "1"])
    finally:
        server.shutdown()
        server.server_close()
    assert status == 1
    messages = [r.getMessage() for r in caplog.records if r.name == "pizza_income"]
    assert len(messages) == 1 and messages[0].startswith(line.format(port=port)), messages
    assert "\n" not in messages[0] and "<" not in messages[0]
