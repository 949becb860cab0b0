"""IncrementalAlterConfigs' APPEND and SUBTRACT of cleanup.policy, two at once, on both
databases: each is applied to the value the other committed, never to one read before it
(TopicService.alter_config computes them under the topic's row lock).

The first request is held inside its database transaction, its config written and not yet
committed (its storage step wrapped to wait before returning); the second is let go once it
has asked TopicService for its alter, so whatever it read of the topic before that, it read
before the first committed; then the first commits. So the interleaving is the dangerous one
every time, without timing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from app.kafka.topic_admin import AlterOperation
from app.kafka.protocol import request_class
from app.storage import topics
from tests.helpers import create_topic
from tests.integration.test_topic_admin_races import Held, Run
from tests.kafka.conftest import Listener, ask

VERSION = 1


def _alter(kafka: Listener, operation: AlterOperation, value: str) -> tuple[ErrorCode, str | None]:
    """One IncrementalAlterConfigs of cleanup.policy of topic "t", on a connection of its own:
    its resource's error code and message."""
    cls = request_class(44, VERSION)
    mod = __import__(cls.__module__, fromlist=["x"])  # type: ignore[union-attr]
    body = cls(validate_only=False, resources=(mod.AlterConfigsResource(  # type: ignore[misc]
        resource_type=2, resource_name="t",
        configs=(mod.AlterableConfig(name="cleanup.policy", config_operation=operation, value=value),)),))
    with kafka.connect() as s:
        (answer,) = ask(s, 44, VERSION, body).responses
    return answer.error_code, answer.error_message


@pytest.mark.parametrize(("start", "first", "second", "codes", "end"), [
    # Both apply, the second to the first's value: from it, compact remains.
    pytest.param("delete", (AlterOperation.APPEND, "compact"), (AlterOperation.SUBTRACT, "delete"),
                 (ErrorCode.none, ErrorCode.none), "compact", id="append-then-subtract"),
    # From the first's value ("delete") the second would leave none: refused, and the first's
    # value stays (from the value before the first, it took "compact", undoing the first).
    pytest.param("compact,delete", (AlterOperation.SUBTRACT, "compact"), (AlterOperation.SUBTRACT, "delete"),
                 (ErrorCode.none, ErrorCode.invalid_config), "delete", id="subtract-then-subtract"),
])
def test_an_append_or_subtract_waiting_for_another_applies_to_the_value_the_other_committed(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch, start: str, first: tuple[AlterOperation, str],
        second: tuple[AlterOperation, str], codes: tuple[ErrorCode, ErrorCode], end: str) -> None:
    create_topic(kafka.client, "t", 1, cleanup_policy=start)
    held = Held(monkeypatch, topics, "update_config")
    a = Run(lambda: _alter(kafka, *first))
    assert held.reached.wait(30), a.outcome()

    service = kafka.services.topics
    asked = threading.Event()
    alter_config = service.alter_config

    def asking(*args: Any, **kwargs: Any) -> Any:
        asked.set()
        return alter_config(*args, **kwargs)

    monkeypatch.setattr(service, "alter_config", asking)
    b = Run(lambda: _alter(kafka, *second))
    assert asked.wait(30), b.outcome()
    held.release()

    assert (a.outcome()[0], b.outcome()[0]) == codes
    assert kafka.client.get("/v1/topics/t").json()["config"]["cleanup_policy"] == end
