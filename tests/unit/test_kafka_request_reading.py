"""How the Kafka door reads a request frame (app.kafka.protocol.parse): a list null where its
version does not allow one is unreadable, as such a string is."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7

from app.kafka.protocol import Unparseable, parse
from tests.kafka.conftest import frame


def _request(api_key: int, version: int, body: Any, client_id: str = "test") -> bytes:
    """The frame's request, without its size."""
    return frame(api_key, version, body, client_id=client_id)[4:]


def _topic(name: str, configs: Any) -> create_topics_v4.CreatableTopic:
    return create_topics_v4.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                                           configs=configs)


# kio's writer writes None as a null list whatever the field's versions allow, as a client may.
NULL_LISTS = {
    "a CreateTopics' second topic's configs": (19, 4, create_topics_v4.CreateTopicsRequest(topics=(
        _topic("orders", (create_topics_v4.CreatableTopicConfig(name="retention.ms", value="1000"),)),
        _topic("clicks", None)))),
    "a DescribeProducers' partitions (a compact list)": (61, 0, describe_producers_v0.DescribeProducersRequest(
        topics=(describe_producers_v0.TopicRequest(name="orders", partition_indexes=None),))),
    "a Metadata v0's topics (nullable from version 1)": (3, 0, MetadataRequestV0(topics=None)),  # type: ignore[arg-type]
    "an OffsetFetch's partitions under its nullable topics": (9, 7, offset_fetch_v7.OffsetFetchRequest(
        group_id="billing", require_stable=False,
        topics=(offset_fetch_v7.OffsetFetchRequestTopic(name="orders", partition_indexes=None),))),  # type: ignore[arg-type]
    "a Fetch's partitions, under a flexible version's topic": (1, 12, fetch_v12.FetchRequest(
        replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=0, isolation_level=0, session_id=0,
        session_epoch=0, topics=(fetch_v12.FetchTopic(topic="orders", partitions=None),),  # type: ignore[arg-type]
        forgotten_topics_data=(), rack_id="")),
}


@pytest.mark.parametrize("request_", NULL_LISTS.values(), ids=NULL_LISTS.keys())
def test_a_null_list_where_its_version_allows_none_is_unreadable(request_: tuple[int, int, Any]) -> None:
    api_key, version, body = request_
    with pytest.raises(Unparseable, match="UnexpectedNull"):
        parse(_request(api_key, version, body))


def test_a_null_list_where_its_version_allows_one_is_read_as_none() -> None:
    assert parse(_request(3, 1, MetadataRequestV1(topics=None))).body.topics is None
    assert parse(_request(9, 7, offset_fetch_v7.OffsetFetchRequest(group_id="billing", require_stable=False,
                                                                   topics=None))).body.topics is None
