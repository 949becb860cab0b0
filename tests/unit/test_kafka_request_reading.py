"""How the Kafka door reads a request frame (app.kafka.protocol.parse): a list null where its
version does not allow one is unreadable, as such a string is; a tagged field it does not know
is skipped, as Kafka skips it; OUTBOX_KAFKA_MAX_REQUEST_ENTRIES is counted as each list's
length is read, so a request over it is refused before its entries are made."""

from __future__ import annotations

import datetime
import struct
import tracemalloc
import uuid
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.describe_producers.v0 import request as describe_producers_v0
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.metadata.v0.request import MetadataRequest as MetadataRequestV0
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.offset_fetch.v7 import request as offset_fetch_v7

from app.kafka import protocol
from app.kafka.protocol import TooManyEntries, Unparseable, parse
from tests.kafka.conftest import frame

ENOUGH = 1_000_000


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
        parse(_request(api_key, version, body), ENOUGH)


def test_a_null_list_where_its_version_allows_one_is_read_as_none() -> None:
    assert parse(_request(3, 1, MetadataRequestV1(topics=None)), ENOUGH).body.topics is None
    assert parse(_request(9, 7, offset_fetch_v7.OffsetFetchRequest(group_id="billing", require_stable=False,
                                                                   topics=None)), ENOUGH).body.topics is None


# --- Tagged fields ------------------------------------------------------------------------------

UNKNOWN_TAG = 99


def _with_tag(tagged_fields: bytes, tag: int = UNKNOWN_TAG, value: bytes = b"\x07\x08\x09") -> bytes:
    """An entity's tagged fields (KIP-482: their count, then each one's tag, size and bytes)
    with one more field: count and tag below 128 are one byte each."""
    assert tagged_fields[0] < 127 and tag < 128 and len(value) < 128
    return bytes([tagged_fields[0] + 1]) + tagged_fields[1:] + bytes([tag, len(value)]) + value


API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="librdkafka", client_software_version="2.6.1")


def test_an_api_versions_with_an_unknown_tagged_field_in_its_body_is_read_as_without_it() -> None:
    plain = _request(18, 3, API_VERSIONS_V3)
    assert plain.endswith(b"\0")  # the body's tagged fields: none
    request = parse(plain[:-1] + _with_tag(b"\0"), ENOUGH)
    assert request.body == API_VERSIONS_V3 and request.client_id == "test"


def test_an_unknown_tagged_field_in_the_request_header_is_skipped() -> None:
    plain = _request(18, 3, API_VERSIONS_V3)
    header_end = 8 + 2 + len("test")  # the prefix, the client id (a legacy string) and its bytes
    assert plain[header_end] == 0  # the header's tagged fields: none
    request = parse(plain[:header_end] + _with_tag(b"\0") + plain[header_end + 1:], ENOUGH)
    assert request.body == API_VERSIONS_V3 and request.client_id == "test"


def _fetch_v12(cluster_id: str | None) -> Any:
    partition = fetch_v12.FetchPartition(partition=3, current_leader_epoch=-1, fetch_offset=17, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=1 << 20)
    return fetch_v12.FetchRequest(cluster_id=cluster_id, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
                                  max_bytes=0, isolation_level=0, session_id=0, session_epoch=0,
                                  topics=(fetch_v12.FetchTopic(topic="orders", partitions=(partition,)),),
                                  forgotten_topics_data=(), rack_id="")


def test_a_fetch_with_unknown_tagged_fields_at_every_depth_is_read_as_without_them_and_its_known_one_kept() -> None:
    body = _fetch_v12(cluster_id="c")
    plain = _request(1, 12, body)
    # The partition's tagged fields end its list, then the topic's, then the list of forgotten
    # topics (empty: 1) and the rack id (empty: 1); the request's own come last, its known
    # cluster id among them (tag 0, 2 bytes: the compact string "c").
    known = b"\x01\x00\x02\x02c"
    tail = b"\0" + b"\0" + b"\x01\x01" + known
    assert plain.endswith(tail)
    tagged = (_with_tag(b"\0", tag=5) + _with_tag(b"\0", tag=100) + b"\x01\x01"
              + _with_tag(known, tag=UNKNOWN_TAG))
    assert parse(plain[:-len(tail)] + tagged, ENOUGH).body == body


def test_a_metadata_of_a_flexible_version_with_an_unknown_tagged_field_in_a_topic_is_read_as_without_it() -> None:
    m = protocol.request_class(3, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["MetadataRequestTopic"])
    topic_id = uuid.UUID(int=7)
    body = m(topics=(mod.MetadataRequestTopic(topic_id=topic_id, name="orders"),), allow_auto_topic_creation=False,
             include_topic_authorized_operations=False)
    plain = _request(3, 12, body)
    end = plain.index(b"orders") + len(b"orders")  # the topic's tagged fields follow its name
    assert parse(plain[:end] + _with_tag(plain[end:end + 1]) + plain[end + 1:], ENOUGH).body == body


def test_a_tagged_field_whose_size_runs_past_the_frame_is_unreadable() -> None:
    plain = _request(18, 3, API_VERSIONS_V3)
    with pytest.raises(Unparseable, match="BufferUnderflow"):
        parse(plain[:-1] + bytes([1, UNKNOWN_TAG, 100]) + b"short", ENOUGH)


# --- OUTBOX_KAFKA_MAX_REQUEST_ENTRIES -------------------------------------------------------------

def _metadata_v0_of_empty_names(names: int) -> bytes:
    """A Metadata v0 naming `names` topics, each an empty name of 2 bytes: the densest list."""
    return struct.pack(">hhih", 3, 0, 7, 0) + struct.pack(">i", names) + b"\0\0" * names


def _offset_fetch_v7_of_topics(topics: int) -> bytes:
    """An OffsetFetch v7 naming `topics` topics of one partition each: lists within a list."""
    body = offset_fetch_v7.OffsetFetchRequest(group_id="g", require_stable=False, topics=(
        offset_fetch_v7.OffsetFetchRequestTopic(name="t", partition_indexes=(0,)),) * topics)
    return _request(9, 7, body)


def _peak_of_parsing(request: bytes, max_entries: int) -> int:
    """The most memory the reading of `request` held at once (tracemalloc: Python's
    allocations, kio's entities among them), the request's own bytes not counted."""
    tracemalloc.start()
    try:
        with pytest.raises(TooManyEntries, match=f"more than {max_entries} entries"):
            parse(request, max_entries)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("request_", [_metadata_v0_of_empty_names(ENOUGH), _offset_fetch_v7_of_topics(ENOUGH // 2)],
                         ids=["a list of a million entries", "half a million lists of one entry"])
def test_a_request_over_max_request_entries_is_refused_before_its_entries_are_made(request_: bytes) -> None:
    # Made, a million entries hold tens of MiB (a slotted entity and its place in a tuple
    # each); refused as its lengths are read, at most the bound's are made.
    assert _peak_of_parsing(request_, max_entries=100) < 256 * 1024


def test_the_entries_of_every_list_count_nested_ones_and_null_ones_none() -> None:
    body = offset_fetch_v7.OffsetFetchRequest(group_id="billing", require_stable=True, topics=(
        offset_fetch_v7.OffsetFetchRequestTopic(name="orders", partition_indexes=(0, 1, 2)),
        offset_fetch_v7.OffsetFetchRequestTopic(name="clicks", partition_indexes=(0,))))
    assert parse(_request(9, 7, body), 2 + 3 + 1).body == body
    with pytest.raises(TooManyEntries):
        parse(_request(9, 7, body), 2 + 3)
    null = offset_fetch_v7.OffsetFetchRequest(group_id="billing", require_stable=True, topics=None)
    assert parse(_request(9, 7, null), 0).body == null


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def test_unknown_tagged_fields_count_as_entries_and_many_are_refused_before_they_are_skipped() -> None:
    # Skipped one by one, a frame of millions of empty tagged fields held a thread for seconds a
    # megabyte, before authentication too; the entries' bound now counts them as they are read.
    plain = _request(18, 3, API_VERSIONS_V3)
    many = 1_000_000
    request = plain[:-1] + _uvarint(many) + bytes([UNKNOWN_TAG, 0]) * many
    assert parse(request, many).body == API_VERSIONS_V3
    with pytest.raises(TooManyEntries, match="more than 100 entries"):
        parse(request, 100)


def test_more_tagged_fields_than_the_bytes_left_can_hold_is_unreadable() -> None:
    plain = _request(18, 3, API_VERSIONS_V3)
    with pytest.raises(Unparseable, match="2147483648 tagged fields in 20 bytes"):
        parse(plain[:-1] + _uvarint(2**31) + bytes([UNKNOWN_TAG, 0]) * 10, ENOUGH)


def test_a_list_longer_than_the_bytes_left_is_unreadable_not_over_the_bound() -> None:
    # Each entry takes a byte at least: a length no frame of its size can hold is a corrupt
    # frame, as Kafka's reader says, whatever the bound.
    request = struct.pack(">hhih", 3, 0, 7, 0) + struct.pack(">i", 2**31 - 1)
    with pytest.raises(Unparseable, match="BufferUnderflow"):
        parse(request, ENOUGH)
