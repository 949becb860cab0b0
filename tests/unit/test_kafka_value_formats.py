"""The value formats the Kafka door's Produce remembers (app.kafka.apis.Apis._value_format):
at most VALUE_FORMATS_REMEMBERED topics, the most recently produced to, whatever the number of
topics or the names callers send."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.domain.errors import UnknownTopicOrPartition
from app.domain.types import ValueFormat
from app.kafka.apis import VALUE_FORMATS_REMEMBERED, Apis, Broker
from app.settings import Settings


class Topics:
    """A TopicService whose every topic but `missing-*` exists, in the bytes format; it counts
    its reads."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    def get(self, name: str) -> SimpleNamespace:
        self.reads.append(name)
        if name.startswith("missing-"):
            raise UnknownTopicOrPartition(f"unknown topic {name!r}")
        return SimpleNamespace(config=SimpleNamespace(value_format=ValueFormat.BYTES))


@pytest.fixture
def topics() -> Topics:
    return Topics()


@pytest.fixture
def apis(topics: Topics) -> Apis:
    services = SimpleNamespace(settings=Settings(), topics=topics, groups=None, classic_group_protocol=None)
    return Apis(services, Broker(0, "127.0.0.1", 9092))


def test_no_more_topics_are_remembered_than_the_cap(apis: Apis, topics: Topics) -> None:
    for i in range(VALUE_FORMATS_REMEMBERED + 100):
        assert apis._value_format(f"t{i}") is ValueFormat.BYTES

    assert len(apis._formats) == VALUE_FORMATS_REMEMBERED
    assert list(apis._formats) == [f"t{i}" for i in range(100, VALUE_FORMATS_REMEMBERED + 100)]


def test_a_remembered_topic_is_not_read_again_and_the_least_recent_is_forgotten(apis: Apis, topics: Topics) -> None:
    for i in range(VALUE_FORMATS_REMEMBERED):
        apis._value_format(f"t{i}")
    apis._value_format("t0")  # now the most recent: t1 is the least
    apis._value_format("another")
    topics.reads.clear()

    apis._value_format("t0")
    apis._value_format("t1")

    assert topics.reads == ["t1"]


def test_a_topic_that_does_not_exist_is_refused_and_not_remembered(apis: Apis, topics: Topics) -> None:
    for i in range(VALUE_FORMATS_REMEMBERED + 1):
        with pytest.raises(UnknownTopicOrPartition):
            apis._value_format(f"missing-{i}")

    assert len(apis._formats) == 0


def test_again_reads_the_format_anew(apis: Apis, topics: Topics) -> None:
    apis._value_format("t")

    apis._value_format("t", again=True)

    assert topics.reads == ["t", "t"]
