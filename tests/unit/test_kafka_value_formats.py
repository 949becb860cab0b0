"""The value formats the Kafka door's Produce remembers (app.kafka.produce.ProduceApi._value_format):
at most VALUE_FORMATS_REMEMBERED topics, the most recently produced to, whatever the number of
topics or the names callers send."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app.domain.errors import UnknownTopicOrPartition
from app.domain.types import ValueFormat
from app.kafka.produce import VALUE_FORMATS_REMEMBERED, ProduceApi
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
def produce(topics: Topics) -> ProduceApi:
    return ProduceApi(SimpleNamespace(settings=Settings(), topics=topics))


def test_no_more_topics_are_remembered_than_the_cap(produce: ProduceApi, topics: Topics) -> None:
    for i in range(VALUE_FORMATS_REMEMBERED + 100):
        assert produce._value_format(f"t{i}") is ValueFormat.BYTES

    assert len(produce._formats) == VALUE_FORMATS_REMEMBERED
    assert list(produce._formats) == [f"t{i}" for i in range(100, VALUE_FORMATS_REMEMBERED + 100)]


def test_a_remembered_topic_is_not_read_again_and_the_least_recent_is_forgotten(produce: ProduceApi, topics: Topics) -> None:
    for i in range(VALUE_FORMATS_REMEMBERED):
        produce._value_format(f"t{i}")
    produce._value_format("t0")  # now the most recent: t1 is the least
    produce._value_format("another")
    topics.reads.clear()

    produce._value_format("t0")
    produce._value_format("t1")

    assert topics.reads == ["t1"]


def test_a_topic_that_does_not_exist_is_refused_and_not_remembered(produce: ProduceApi, topics: Topics) -> None:
    for i in range(VALUE_FORMATS_REMEMBERED + 1):
        with pytest.raises(UnknownTopicOrPartition):
            produce._value_format(f"missing-{i}")

    assert len(produce._formats) == 0


def test_again_reads_the_format_anew(produce: ProduceApi, topics: Topics) -> None:
    produce._value_format("t")

    produce._value_format("t", again=True)

    assert topics.reads == ["t", "t"]
