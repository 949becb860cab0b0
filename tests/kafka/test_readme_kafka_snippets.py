"""README.md's confluent-kafka snippets ("Using Kafka clients"), run as written against the
listener (its address put for 127.0.0.1:9092): the plain producer and read_committed consumer
print the record the README shows, and the subscribed consumer commits past it. Both poll in
a loop, so a first poll answered None (nothing within its 5 s) does not end them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import create_topic
from tests.kafka.conftest import Listener

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def _snippet(marker: str) -> str:
    [block] = [b for b in re.findall(r"^```python\n(.*?)^```", README, re.MULTILINE | re.DOTALL) if marker in b]
    return block


def test_the_readme_confluent_kafka_snippets_read_and_commit_the_record_they_produced(
        kafka: Listener, capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(kafka.client, "orders", partitions=1)
    names: dict[str, Any] = {}
    exec(_snippet("OFFSET_BEGINNING").replace("127.0.0.1:9092", kafka.bootstrap), names)
    assert capsys.readouterr().out == "0 b'order-1' b'{\"pizza\": \"margherita\"}'\n"
    exec(_snippet('"group.id": "billing"').replace("127.0.0.1:9092", kafka.bootstrap), names)
    offsets = kafka.client.get("/v1/groups/billing/offsets").json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in offsets] == [("orders", 0, 1)]
