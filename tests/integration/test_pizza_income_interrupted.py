"""examples/pizza_income.py interrupted (Ctrl-C) while its Commit is under way, against the
service in process: whatever the service did with that Commit, the totals it reports are
what the service holds (tests/e2e/test_pizza_income_example.py runs it as a process)."""

from __future__ import annotations

from typing import Any

import pytest

from app.client import Consumer, ExponentialBackoff, Producer
from examples.pizza_income import GROUP, PizzaIncome, Totals
from tests.helpers import batch, create_topic, read_all, send

ORDERS = [batch("orders", 0, [{"pizza": "margherita", "price": 9.5}, {"pizza": "diavola", "price": 11}]),
          batch("orders", 1, [{"pizza": "funghi", "price": 10}])]


def _interrupt_the_commit(monkeypatch: pytest.MonkeyPatch, client: Any, *, after_the_service: bool) -> None:
    """Ctrl-C lands during the example's first Commit request: once the service has answered
    it (the answer is lost), or before the request leaves."""
    request = client.request
    interrupted = []

    def interrupting(method: str, url: Any, **kwargs: Any) -> Any:
        commit = method == "POST" and str(url).endswith("/commit") and not interrupted
        if commit and not after_the_service:
            interrupted.append(url)
            raise KeyboardInterrupt
        response = request(method, url, **kwargs)
        if commit:
            interrupted.append(url)
            raise KeyboardInterrupt
        return response

    monkeypatch.setattr(client, "request", interrupting)


def _run_until_interrupted(client: Any, request: pytest.FixtureRequest) -> PizzaIncome:
    producer = Producer("http://testserver", "pizza-income-0", client=client)
    consumer = Consumer("http://testserver", GROUP, client=client, auto_offset_reset="earliest")
    # Closed when the test ends, as the example's main() closes it: left open, its heartbeat
    # thread outlives the test and goes on calling a service that is gone, in the middle of
    # later tests of the same worker.
    request.addfinalizer(consumer.close)
    app = PizzaIncome(producer, consumer, None, ExponentialBackoff())
    with pytest.raises(KeyboardInterrupt):
        app.run(idle_exit_s=None)
    return app


def _income(client: Any) -> list[tuple[int, int, Any]]:
    return [(p, r["offset"], r["value"]) for p in range(2) for r in read_all(client, "income", p)]


def _group_offsets(client: Any) -> list[tuple[str, int, int]]:
    return [(o["topic"], o["partition"], o["offset"]) for o in client.get(f"/v1/groups/{GROUP}/offsets").json()["offsets"]]


@pytest.fixture
def orders(client: Any) -> None:
    create_topic(client, "orders", 2)
    create_topic(client, "income", 2)
    send(client, ORDERS)


@pytest.mark.usefixtures("orders")
def test_a_commit_the_service_committed_before_ctrl_c_is_counted(monkeypatch: pytest.MonkeyPatch, client: Any,
                                                                request: pytest.FixtureRequest) -> None:
    _interrupt_the_commit(monkeypatch, client, after_the_service=True)
    app = _run_until_interrupted(client, request)

    totals = app.interrupted()

    assert totals == Totals(orders=3, income=3)
    assert _income(client) == [(0, 0, {"amount": 9.5}), (0, 1, {"amount": 11}), (1, 0, {"amount": 10})]
    assert _group_offsets(client) == [("orders", 0, 2), ("orders", 1, 1)]


@pytest.mark.usefixtures("orders")
def test_a_commit_that_never_left_before_ctrl_c_is_aborted_and_not_counted(monkeypatch: pytest.MonkeyPatch,
                                                                           client: Any,
                                                                           request: pytest.FixtureRequest) -> None:
    _interrupt_the_commit(monkeypatch, client, after_the_service=False)
    app = _run_until_interrupted(client, request)

    totals = app.interrupted()

    assert totals == Totals()
    assert _income(client) == []
    assert _group_offsets(client) == []
    assert client.get("/v1/transactions/pizza-income-0").json()["state"] == "CompleteAbort"
