"""What a remote client can make the Kafka door hold is bounded (docs/ARCHITECTURE.md,
"What a client can make the service hold"), each bound proved with the bytes that would get
past it: a client that never reads its answers, an unauthenticated connection's frame, a
record batch whose header understates its records. The bounds tested elsewhere are named in
that section."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import socket
import ssl
import struct
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c
from kio.schema.errors import ErrorCode

from app.domain.offsets import OFFSET_METADATA_MAX_CHARS
from app.kafka import auth, protocol
from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import IO_TIMEOUT_S, Listener, ask, closed, frame, listener_with, read_frame
from tests.kafka.secured import Secured
from tests.kafka.test_door_metrics import _added
from tests.kafka.test_transactions import _add_offsets, _committed, _end, _init
from tests.kafka.test_wire import (_fetch, _partition_answer, _produce, _records, _refused_then_a_good_batch_taken,
                                   _stored)

pytestmark = pytest.mark.kafka

_LAST_OFFSET_DELTA_AT = 23  # in a v2 batch, after its attributes
_CRC_AT, _CRC_FROM = 17, 21


def _until(condition: Callable[[], bool]) -> None:
    """Waits for `condition`, at most IO_TIMEOUT_S (a bound on the wait, not a timed assertion)."""
    deadline = time.monotonic() + IO_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come to hold"
        time.sleep(0.02)


def test_a_connection_whose_answers_go_unread_for_idle_ms_is_closed(kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 0, _records([b'"' + b"x" * 900_000 + b'"'])))
    fetches = 30  # 27 MB of answers: far more than the sockets' buffers hold (4 MiB each at most here)
    idle = _added("outbox_kafka_connections_closed_total", reason="idle")
    with listener_with(kafka, kafka_connections_max_idle_ms=300) as quick, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: a small window
        s.settimeout(IO_TIMEOUT_S)
        s.connect((quick.host, quick.port))
        s.sendall(b"".join(frame(1, 12, _fetch("orders", 0, 0), correlation_id=i) for i in range(fetches)))
        _until(lambda: idle() == 1)  # closed while nothing of it is read
        answered = 0
        try:
            while read_frame(s) is not None:
                answered += 1
        except (ConnectionResetError, AssertionError):
            pass  # aborted, perhaps inside a frame
    assert idle() == 1
    assert answered < fetches


def test_a_slow_reader_that_keeps_reading_is_answered_in_full(kafka: Listener) -> None:
    # Megabytes of answers read 4 KiB every 10 ms: slower than the socket's send buffer empties
    # in one idle period, so the transport's own buffer does not move for longer than that
    # while the client reads all along (a consumer on a slow link). It must not be closed.
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 0, _records([b'"' + b"x" * 900_000 + b'"'])))
    fetches = 4
    with listener_with(kafka, kafka_connections_max_idle_ms=1000) as quick, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(IO_TIMEOUT_S)
        s.connect((quick.host, quick.port))
        s.sendall(b"".join(frame(1, 12, _fetch("orders", 0, 0), correlation_id=i) for i in range(fetches)))
        received = bytearray()
        while len(received) < fetches * 900_000:
            chunk = s.recv(4096)
            assert chunk, "the listener closed the connection of a client that reads"
            received += chunk
            time.sleep(0.01)
        while True:  # the rest of the last answer
            try:
                sizes = _frame_sizes(bytes(received))
                break
            except ValueError:
                chunk = s.recv(65536)
                assert chunk, "the listener closed the connection of a client that reads"
                received += chunk
    assert [struct.unpack_from(">i", received, at + 4)[0] for at, _ in sizes] == list(range(fetches))


def _frame_sizes(data: bytes) -> list[tuple[int, int]]:
    """(where, size) of each whole frame in `data`; ValueError if it ends inside one."""
    out, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            raise ValueError("inside a size")
        (size,) = struct.unpack_from(">i", data, at)
        if at + 4 + size > len(data):
            raise ValueError("inside a frame")
        out.append((at, size))
        at += 4 + size
    return out


def test_before_authentication_a_frame_over_kafkas_sasl_receive_size_closes_the_connection(
        secured: Secured) -> None:
    m = request_class(18, 3)
    assert m is not None
    request = frame(18, 3, m(client_software_name="t", client_software_version="1"))[4:]
    # An ApiVersions request, which is answered before authentication, with bytes after it
    # that its reader leaves: only the frame's size is over the bound.
    padded = request + b"\0" * (auth.UNAUTHENTICATED_MAX_FRAME_BYTES + 1 - len(request))
    too_large = _added("outbox_kafka_connections_closed_total", reason="too_large")
    with secured.connect() as s:
        try:
            s.sendall(struct.pack(">i", len(padded)) + padded)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed before the frame was all sent
        assert closed(s)
    _until(lambda: too_large() == 1)


def _api_versions_with_empty_tagged_fields(count: int) -> bytes:
    m = request_class(18, 3)
    assert m is not None
    request = frame(18, 3, m(client_software_name="t", client_software_version="1"))[4:]
    assert request.endswith(b"\0")  # the body's tagged fields: none
    varint, n = bytearray(), count
    while n >= 0x80:
        varint.append(n & 0x7F | 0x80)
        n >>= 7
    body = request[:-1] + bytes(varint) + bytes([n]) + b"\x63\x00" * count  # tag 99, no bytes, each
    return struct.pack(">i", len(body)) + body


def test_before_authentication_a_request_of_more_entries_than_a_handshake_needs_closes_the_connection(
        secured: Secured) -> None:
    # Each of 2,000 empty tagged fields skipped in turn: under the frame bound before
    # authentication, 260,000 of them held a thread for a tenth of a second a request.
    request = _api_versions_with_empty_tagged_fields(auth.UNAUTHENTICATED_MAX_ENTRIES + 1)
    too_large = _added("outbox_kafka_connections_closed_total", reason="too_large")
    with secured.connect() as s:
        s.sendall(request)
        assert closed(s)
    _until(lambda: too_large() == 1)


def test_an_authenticated_connections_request_of_as_many_tagged_fields_is_answered(kafka: Listener) -> None:
    with kafka.connect() as s:
        s.sendall(_api_versions_with_empty_tagged_fields(auth.UNAUTHENTICATED_MAX_ENTRIES + 1))
        answer = read_frame(s)
        assert answer is not None and struct.unpack_from(">hh", answer, 4)[0] == 0  # ApiVersions' error code: none


def _padded_api_versions(size: int) -> bytes:
    """An ApiVersions frame of `size` bytes after its size: the request, then bytes its reader leaves."""
    m = request_class(18, 3)
    assert m is not None
    request = frame(18, 3, m(client_software_name="t", client_software_version="1"))[4:]
    return struct.pack(">i", size) + request + b"\0" * (size - len(request))


def _answered_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        return read_frame(s) is not None
    except TimeoutError:
        return False
    finally:
        s.settimeout(IO_TIMEOUT_S)


def test_large_frames_held_past_queued_max_request_bytes_wait_and_small_ones_are_answered(kafka: Listener) -> None:
    # Each connection held its frame while it arrived, whatever the others held: sixteen frames
    # of 100 MiB that never completed took the process from 134 to 1,760 MiB.
    size = 3 * 1024 * 1024
    with listener_with(kafka, kafka_socket_request_max_bytes=size, kafka_queued_max_request_bytes=size) as small, \
            small.connect() as holder, small.connect() as waiter, small.connect() as other:
        whole = _padded_api_versions(size)
        holder.sendall(whole[:-1])  # its frame never completes: it holds the whole budget
        time.sleep(0.2)
        waiter.sendall(whole)
        assert not _answered_within(waiter, 1.0)  # read no further until the budget has room
        other.sendall(_padded_api_versions(1024))
        assert _answered_within(other, IO_TIMEOUT_S)  # a small frame never waits
        holder.close()  # its frame given back
        assert _answered_within(waiter, IO_TIMEOUT_S)


def test_a_tls_client_on_the_plaintext_listener_is_closed_with_a_line_that_says_so(
        kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    # A client set to security.protocol=SSL sees only timeouts; its ClientHello's first bytes,
    # read as a frame's size, are some 369 MB, and the line said no more than that.
    caplog.set_level(logging.INFO, logger="app.kafka")
    outgoing = ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), outgoing, server_hostname="outbox")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()  # its ClientHello written, waiting for the server's answer
    client_hello = outgoing.read()
    with kafka.connect() as s:
        s.sendall(client_hello)
        assert closed(s)
    _until(lambda: any("its first bytes are a TLS handshake" in r.getMessage() for r in caplog.records))


def test_a_batch_whose_record_count_is_not_its_offset_deltas_is_an_invalid_record_and_not_written(
        kafka: Listener) -> None:
    create_topic(kafka.client, "orders")
    records = bytearray(_records([b'"a"', b'"b"', b'"c"']))
    struct.pack_into(">i", records, _LAST_OFFSET_DELTA_AT, 0)  # its offsets say 1 record, its count 3
    struct.pack_into(">I", records, _CRC_AT, calc_crc32c(bytes(records[_CRC_FROM:])))
    with listener_with(kafka, max_records_per_request=2) as small, small.connect() as s:
        answer = ask(s, 0, 9, _produce("orders", 0, bytes(records)))
    assert (_partition_answer(answer).error_code, _partition_answer(answer).base_offset) == (
        ErrorCode.invalid_record, -1)
    assert _stored(kafka) == []


_RECORD_COUNT_AT = 57


@pytest.mark.parametrize(("count", "last_offset_delta"), [(2, 1), (0, -1)], ids=["more_than_it_holds", "none"])
def test_a_batch_whose_header_names_records_its_bytes_do_not_hold_is_an_invalid_record_and_the_connection_kept(
        kafka: Listener, count: int, last_offset_delta: int) -> None:
    # Its count and offset deltas agree, so only reading the records finds it out: that was a
    # traceback in the service's log and the connection closed.
    create_topic(kafka.client, "orders")
    records = bytearray(_records([b'"a"']))
    struct.pack_into(">i", records, _LAST_OFFSET_DELTA_AT, last_offset_delta)
    struct.pack_into(">i", records, _RECORD_COUNT_AT, count)
    struct.pack_into(">I", records, _CRC_AT, calc_crc32c(bytes(records[_CRC_FROM:])))
    _refused_then_a_good_batch_taken(kafka, bytes(records))


def _spied_on_loop(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Whether each of protocol's parse, encode and error_codes last ran on an event loop."""
    on_loop: dict[str, bool] = {}

    def where(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def spied(*args: Any) -> Any:
            try:
                asyncio.get_running_loop()
                on_loop[name] = True
            except RuntimeError:
                on_loop[name] = False
            return call(*args)
        return spied

    for name in ("parse", "encode", "error_codes"):
        monkeypatch.setattr(protocol, name, where(name, getattr(protocol, name)))
    return on_loop


def test_a_large_request_is_read_and_answered_off_the_event_loop(kafka: Listener,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    on_loop = _spied_on_loop(monkeypatch)
    names = 40_000  # a Metadata v0 naming them, 120 kB: seconds' work a MB on the loop
    body = struct.pack(">hhi", 3, 0, 7) + struct.pack(">h", 1) + b"t" + struct.pack(">i", names) + b"\0\1a" * names
    with kafka.connect() as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        data = read_frame(s)
    assert data is not None and struct.unpack_from(">i", data)[0] == 7
    assert on_loop == {"parse": False, "encode": False, "error_codes": False}


def test_a_small_fetch_is_answered_off_the_event_loop(kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    # A Fetch of a few bytes can be answered megabytes of records.
    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        ask(s, 0, 9, _produce("orders", 0, _records([b'"a"'])))
        on_loop = _spied_on_loop(monkeypatch)
        answer = ask(s, 1, 12, _fetch("orders", 0, 0))
    assert answer.responses[0].partitions[0].error_code == ErrorCode.none
    assert on_loop == {"parse": True, "encode": False, "error_codes": False}


def _produce_to_partitions(topic: str, partitions: int) -> Any:
    """A Produce of one record to each of the topic's first `partitions`: 1 + partitions entries."""
    m = request_class(0, 9)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    return m(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        mod.TopicProduceData(name=topic, partition_data=tuple(
            mod.PartitionProduceData(index=p, records=_records([b'"a"'])) for p in range(partitions))),))


def test_a_request_over_max_request_entries_closes_the_connection_and_writes_nothing(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=3)
    too_large = _added("outbox_kafka_connections_closed_total", reason="too_large")
    with listener_with(kafka, kafka_max_request_entries=3) as small, small.connect() as s:
        s.sendall(frame(0, 9, _produce_to_partitions("orders", 3)))  # the topic and its 3 partitions: 4
        assert closed(s)
    assert too_large() == 1
    assert [_stored(kafka, partition=p) for p in range(3)] == [[], [], []]


def test_a_request_of_max_request_entries_is_answered(kafka: Listener) -> None:
    create_topic(kafka.client, "orders", partitions=3)
    with listener_with(kafka, kafka_max_request_entries=3) as small, small.connect() as s:
        answer = ask(s, 0, 9, _produce_to_partitions("orders", 2))
    assert [(p.index, p.error_code, p.base_offset) for p in answer.responses[0].partition_responses] == [
        (0, ErrorCode.none, 0), (1, ErrorCode.none, 0)]



def test_a_request_far_over_max_request_entries_is_closed_without_its_entries_made(kafka: Listener) -> None:
    # A Metadata v0 of a million empty topic names, 2 MB: made, they held tens of MiB (a
    # reviewer's 100 MiB frame of them, 3.5 GiB); counted as its list's length is read, the
    # connection closes with none made. Traced: the frame as read, and what its reading held.
    names = 1_000_000
    body = struct.pack(">hhih", 3, 0, 7, 0) + struct.pack(">i", names) + b"\0\0" * names
    too_large = _added("outbox_kafka_connections_closed_total", reason="too_large")
    with listener_with(kafka, kafka_max_request_entries=100) as small, small.connect() as s:
        tracemalloc.start()
        try:
            s.sendall(struct.pack(">i", len(body)) + body)
            assert closed(s)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert too_large() == 1
    assert peak < 4 * len(body)


def test_names_count_as_entries_a_describe_groups_naming_more_groups_than_the_bound_closes_the_connection(
        kafka: Listener) -> None:
    m = request_class(15, 0)
    assert m is not None
    with listener_with(kafka, kafka_max_request_entries=2) as small, small.connect() as s:
        s.sendall(frame(15, 0, m(groups=("a", "b", "c"))))
        assert closed(s)


# --- A partition named more than once ----------------------------------------------------------


def _counted(kafka: Listener, monkeypatch: pytest.MonkeyPatch, method: str,
             service: str = "log") -> list[tuple[str, int]]:
    """The (topic, partition) of each call of `service`'s `method` from now on: a read or a
    write of the database per call."""
    log = getattr(kafka.services, service)
    calls: list[tuple[str, int]] = []
    original = getattr(log, method)

    def counted(topic: str, partition: int, *args: Any, **kwargs: Any) -> Any:
        calls.append((topic, partition))
        return original(topic, partition, *args, **kwargs)

    monkeypatch.setattr(log, method, counted)
    return calls


def test_a_fetch_naming_a_partition_twice_reads_it_once_where_first_named_from_the_last_entry_s_offset(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.kafka.conftest import batch_offsets
    from tests.kafka.test_wire import _produce_bytes

    create_topic(kafka.client, "orders", value_format="bytes")
    create_topic(kafka.client, "audit", value_format="bytes")
    _produce_bytes(kafka, "orders", 0, [b"a", b"b", b"c"])
    _produce_bytes(kafka, "audit", 0, [b"x"])
    m = request_class(1, 12)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])

    def named(topic: str, offset: int) -> Any:
        return mod.FetchTopic(topic=topic, partitions=(mod.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20),))

    reads = _counted(kafka, monkeypatch, "read_in_offset_order")
    with kafka.connect() as s:
        answer = ask(s, 1, 12, m(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                                 isolation_level=1, session_id=0, session_epoch=-1, topics=(
                                     named("orders", 0), named("audit", 0), named("orders", 2)),
                                 forgotten_topics_data=(), rack_id=""))
    assert [(t.topic, [(p.partition_index, p.error_code, batch_offsets(p.records)) for p in t.partitions])
            for t in answer.responses] == [
        ("orders", [(0, ErrorCode.none, [2])]), ("audit", [(0, ErrorCode.none, [0])])]
    assert reads == [("orders", 0), ("audit", 0)]


def test_a_list_offsets_naming_a_partition_twice_answers_each_of_its_entries_invalid_request_unread(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.kafka.test_wire import _produce_bytes

    create_topic(kafka.client, "orders", partitions=2, value_format="bytes")
    _produce_bytes(kafka, "orders", 0, [b"a", b"b"])
    _produce_bytes(kafka, "orders", 1, [b"c"])
    m = request_class(2, 7)
    assert m is not None
    mod = __import__(m.__module__, fromlist=["x"])
    latest, earliest = -1, -2
    reads = _counted(kafka, monkeypatch, "partition_offsets")
    with kafka.connect() as s:
        answer = ask(s, 2, 7, m(replica_id=-1, isolation_level=0, topics=(mod.ListOffsetsTopic(
            name="orders", partitions=tuple(
                mod.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=timestamp)
                for p, timestamp in ((0, latest), (1, latest), (0, earliest)))),)))
    assert [(p.partition_index, p.error_code, p.offset) for p in answer.topics[0].partitions] == [
        (0, ErrorCode.invalid_request, -1), (1, ErrorCode.none, 1), (0, ErrorCode.invalid_request, -1)]
    assert reads == [("orders", 1)]


def test_a_delete_records_naming_a_partition_twice_writes_it_once_up_to_the_last_entry_s_offset(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsTopic

    from tests.kafka.test_wire import _produce_bytes

    create_topic(kafka.client, "orders", partitions=2, value_format="bytes")
    _produce_bytes(kafka, "orders", 0, [b"a", b"b", b"c"])
    _produce_bytes(kafka, "orders", 1, [b"x", b"y"])
    writes = _counted(kafka, monkeypatch, "delete_records", service="topics")
    with kafka.connect() as s:
        answer = ask(s, 21, 2, request_class(21, 2)(timeout=datetime.timedelta(seconds=5), topics=(
            DeleteRecordsTopic(name="orders", partitions=tuple(
                DeleteRecordsPartition(partition_index=p, offset=offset) for p, offset in ((0, 1), (1, 1), (0, 2)))),)))
    assert [(t.name, [(p.partition_index, p.error_code, p.low_watermark) for p in t.partitions])
            for t in answer.topics] == [("orders", [(0, ErrorCode.none, 2), (1, ErrorCode.none, 1)])]
    assert writes == [("orders", 0), ("orders", 1)]
    assert [kafka.client.get(f"/v1/topics/orders/partitions/{p}/offsets").json()["log_start_offset"]
            for p in (0, 1)] == [2, 1]


def test_a_produce_naming_a_partition_twice_answers_it_once_and_writes_the_last_entry_s_records(
        kafka: Listener) -> None:
    from tests.kafka.test_wire import _answered, _produce_partitions

    create_topic(kafka.client, "orders", partitions=2)
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce_partitions("orders", [
            (0, _records([b'"a"'])), (1, _records([b'"x"'])), (0, _records([b'"b"', b'"c"']))]))
    assert _answered(answer) == [("orders", 0, ErrorCode.none, 0), ("orders", 1, ErrorCode.none, 0)]
    assert [value for _, _, value in _stored(kafka, "orders", 0)] == ["b", "c"]
    assert [value for _, _, value in _stored(kafka, "orders", 1)] == ["x"]


def test_a_produce_naming_a_topic_twice_answers_the_topic_once_with_its_partitions_where_first_named(
        kafka: Listener) -> None:
    from tests.kafka.test_wire import _answered, _produce_topics

    create_topic(kafka.client, "orders", partitions=3)
    create_topic(kafka.client, "audit")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce_topics([
            ("orders", [(0, _records([b'"a"']))]), ("audit", [(0, _records([b'"x"']))]),
            ("orders", [(2, _records([b'"b"'])), (0, _records([b'"c"']))])]))
    # As Kafka's ProduceResponse groups its partitions by topic; in runs it was orders twice.
    assert _answered(answer) == [
        ("orders", 0, ErrorCode.none, 0), ("orders", 2, ErrorCode.none, 0), ("audit", 0, ErrorCode.none, 0)]
    assert [t.name for t in answer.responses] == ["orders", "audit"]
    assert [value for _, _, value in _stored(kafka, "orders", 0)] == ["c"]


def test_a_delete_records_naming_a_topic_twice_answers_the_topic_once_with_its_partitions_where_first_named(
        kafka: Listener) -> None:
    from kio.schema.delete_records.v2.request import DeleteRecordsPartition, DeleteRecordsTopic

    from tests.kafka.test_wire import _produce_bytes

    create_topic(kafka.client, "orders", partitions=2, value_format="bytes")
    create_topic(kafka.client, "audit", value_format="bytes")
    for topic, p in (("orders", 0), ("orders", 1), ("audit", 0)):
        _produce_bytes(kafka, topic, p, [b"a", b"b"])
    with kafka.connect() as s:
        answer = ask(s, 21, 2, request_class(21, 2)(timeout=datetime.timedelta(seconds=5), topics=tuple(
            DeleteRecordsTopic(name=topic, partitions=(DeleteRecordsPartition(partition_index=p, offset=1),))
            for topic, p in (("orders", 0), ("audit", 0), ("orders", 1)))))
    # As Kafka's handleDeleteRecordsRequest groups its partitions by topic.
    assert [(t.name, [(p.partition_index, p.error_code, p.low_watermark) for p in t.partitions])
            for t in answer.topics] == [
        ("orders", [(0, ErrorCode.none, 1), (1, ErrorCode.none, 1)]), ("audit", [(0, ErrorCode.none, 1)])]


def _corrupt(records: bytes) -> bytes:
    """`records` with a byte of its last record flipped, under the CRC: CORRUPT_MESSAGE."""
    return records[:-1] + bytes([records[-1] ^ 0xFF])


@pytest.mark.parametrize("earlier", ["corrupt", "undecompressable"])
def test_a_produce_naming_a_partition_twice_leaves_an_earlier_entry_that_cannot_be_read_unread(
        kafka: Listener, earlier: str) -> None:
    from tests.kafka.test_wire import _answered, _produce_partitions
    from tests.kafka_batches import undecompressable

    create_topic(kafka.client, "orders")
    unreadable = _corrupt(_records([b'"a"'])) if earlier == "corrupt" else undecompressable("gzip-bad-deflate")
    with kafka.connect() as s:
        answer = ask(s, 0, 9, _produce_partitions("orders", [(0, unreadable), (0, _records([b'"b"']))]))
    assert _answered(answer) == [("orders", 0, ErrorCode.none, 0)]
    assert [value for _, _, value in _stored(kafka)] == ["b"]


def test_a_version_2_transactional_produce_whose_last_entry_of_a_partition_is_corrupt_begins_no_transaction(
        kafka: Listener) -> None:
    # Its earlier entry, a good batch, would have begun the transaction (Produce 12 begins one
    # on an idle transactional id); the last one alone is taken.
    from tests.kafka.test_wire import _answered, _produce_topics

    create_topic(kafka.client, "orders")
    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        good = _records([b'"a"'], producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        answer = ask(s, 0, 12, _produce_topics([("orders", [(0, good), (0, _corrupt(good))])], version=12,
                                               transactional_id="t"))
    assert _answered(answer) == [("orders", 0, ErrorCode.corrupt_message, -1)]
    transaction = kafka.client.get("/v1/transactions/t").json()
    assert (transaction["state"], transaction["partitions"]) == ("Empty", [])
    assert _stored(kafka) == []


def _offset_commit(kafka: Listener, entries: list[tuple[int, int, str]]) -> list[tuple[int, ErrorCode]]:
    """An OffsetCommit of group billing without a member, of orders' (partition, offset,
    metadata) entries in that order: its answer's (partition, error code) per entry."""
    from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic

    with kafka.connect() as s:
        answer = ask(s, 8, 8, request_class(8, 8)(
            group_id="billing", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=(
                OffsetCommitRequestTopic(name="orders", partitions=tuple(
                    OffsetCommitRequestPartition(partition_index=p, committed_offset=offset, committed_leader_epoch=-1,
                                                 committed_metadata=metadata)
                    for p, offset, metadata in entries)),)))
    return [(p.partition_index, p.error_code) for p in answer.topics[0].partitions]


def _txn_offset_commit(kafka: Listener, entries: list[tuple[int, int, str]]) -> list[tuple[int, ErrorCode]]:
    """A TxnOffsetCommit of group billing in a transaction then committed, of orders'
    (partition, offset, metadata) entries in that order: its answer's (partition, error code)
    per entry."""
    from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic

    with kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "billing").error_code == ErrorCode.none
        answer = ask(s, 28, 3, request_class(28, 3)(
            transactional_id="t", group_id="billing", producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(name="orders", partitions=tuple(
                TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=offset, committed_leader_epoch=-1,
                                                committed_metadata=metadata)
                for p, offset, metadata in entries)),)))
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
    return [(p.partition_index, p.error_code) for p in answer.topics[0].partitions]


@pytest.mark.parametrize("commit", [_offset_commit, _txn_offset_commit], ids=["OffsetCommit", "TxnOffsetCommit"])
def test_an_offset_commit_naming_a_partition_twice_answers_each_entry_and_commits_the_last_one(
        kafka: Listener, commit: Callable[..., list[tuple[int, ErrorCode]]]) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    assert commit(kafka, [(0, 3, ""), (1, 5, ""), (0, 7, "")]) == [
        (0, ErrorCode.none), (1, ErrorCode.none), (0, ErrorCode.none)]
    assert _committed(kafka, "billing") == [("orders", 0, 7), ("orders", 1, 5)]


_FITS, _TOO_LONG = "m" * OFFSET_METADATA_MAX_CHARS, "m" * (OFFSET_METADATA_MAX_CHARS + 1)


@pytest.mark.parametrize(("entries", "answered", "committed"), [
    ([(0, 3, ""), (0, 7, _TOO_LONG)], [(0, ErrorCode.none), (0, ErrorCode.offset_metadata_too_large)], 3),
    ([(0, 9, _TOO_LONG), (0, 11, "")], [(0, ErrorCode.offset_metadata_too_large), (0, ErrorCode.none)], 11),
], ids=["too_long_last", "too_long_first"])
@pytest.mark.parametrize("commit", [_offset_commit, _txn_offset_commit], ids=["OffsetCommit", "TxnOffsetCommit"])
def test_an_offset_commit_naming_a_partition_twice_answers_each_entry_for_its_metadata_and_commits_the_last_that_fits(
        kafka: Listener, commit: Callable[..., list[tuple[int, ErrorCode]]], entries: list[tuple[int, int, str]],
        answered: list[tuple[int, ErrorCode]], committed: int) -> None:
    create_topic(kafka.client, "orders")
    assert commit(kafka, entries) == answered
    assert _committed(kafka, "billing") == [("orders", 0, committed)]


@pytest.mark.parametrize("commit", [_offset_commit, _txn_offset_commit], ids=["OffsetCommit", "TxnOffsetCommit"])
def test_an_offset_commit_with_metadata_past_kafkas_bound_is_refused_for_that_partition_alone(
        kafka: Listener, commit: Callable[..., list[tuple[int, ErrorCode]]]) -> None:
    create_topic(kafka.client, "orders", partitions=2)
    assert commit(kafka, [(0, 5, _TOO_LONG), (1, 5, _FITS)]) == [
        (0, ErrorCode.offset_metadata_too_large), (1, ErrorCode.none)]
    assert _committed(kafka, "billing") == [("orders", 1, 5)]


def test_an_offset_commit_of_a_stale_generation_is_illegal_generation_for_every_partition_before_its_metadata(
        kafka: Listener) -> None:
    from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic

    from tests.kafka.test_groups import _lone_member

    create_topic(kafka.client, "orders", partitions=2)
    a, a_id = _lone_member(kafka)  # generation 1
    with a:
        answer = ask(a, 8, 8, request_class(8, 8)(
            group_id="g", generation_id_or_member_epoch=0, member_id=a_id, group_instance_id=None, topics=(
                OffsetCommitRequestTopic(name="orders", partitions=tuple(
                    OffsetCommitRequestPartition(partition_index=p, committed_offset=5, committed_leader_epoch=-1,
                                                 committed_metadata=_TOO_LONG) for p in (0, 1))),)))
    assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [
        (0, ErrorCode.illegal_generation), (1, ErrorCode.illegal_generation)]
    assert _committed(kafka, "g") == []


def test_a_txn_offset_commit_of_a_stale_generation_is_illegal_generation_for_every_partition_before_its_metadata(
        kafka: Listener) -> None:
    from kio.schema.txn_offset_commit.v3.request import TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic

    from tests.kafka.test_groups import _lone_member

    create_topic(kafka.client, "orders", partitions=2)
    a, a_id = _lone_member(kafka)  # generation 1
    with a, kafka.connect() as s:
        pid, epoch = _init(s, "t")
        assert _add_offsets(s, "t", pid, epoch, "g").error_code == ErrorCode.none
        answer = ask(s, 28, 3, request_class(28, 3)(
            transactional_id="t", group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=0,
            member_id=a_id, group_instance_id=None, topics=(TxnOffsetCommitRequestTopic(name="orders", partitions=tuple(
                TxnOffsetCommitRequestPartition(partition_index=p, committed_offset=5, committed_leader_epoch=-1,
                                                committed_metadata=_TOO_LONG) for p in (0, 1))),)))
        assert _end(s, "t", pid, epoch, commit=True).error_code == ErrorCode.none
    assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [
        (0, ErrorCode.illegal_generation), (1, ErrorCode.illegal_generation)]
    assert _committed(kafka, "g") == []


# --- A JoinGroup waiting at the barrier whose client has gone ---------------------------------

_LONG_REBALANCE_S = 300  # the group's rebalance deadline: far beyond any wait of these tests


def _joined_asks(kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The member ids a waiting JoinGroup asks the service about (ClassicGroupProtocol.joined),
    one entry per ask, from now on."""
    service = kafka.services.classic_group_protocol
    asks: list[str] = []
    joined = service.joined

    def counted(group_id: str, member_id: str, *args: Any, **kwargs: Any) -> Any:
        asks.append(member_id)
        return joined(group_id, member_id, *args, **kwargs)

    monkeypatch.setattr(service, "joined", counted)
    return asks


def _waiting_join(kafka: Listener, s: socket.socket) -> str:
    """A new member of group "g" that joins (MEMBER_ID_REQUIRED first) with a rebalance timeout
    of _LONG_REBALANCE_S, once it waits at the barrier: its member id. Its answer is not read."""
    from tests.kafka.test_groups import JOIN_V, join, join_request

    member_id = join(s, "g", rebalance_s=_LONG_REBALANCE_S, ask_member_id=False).member_id
    s.sendall(frame(11, JOIN_V, join_request("g", member_id, rebalance_s=_LONG_REBALANCE_S)))
    _until(lambda: ("g", member_id) in kafka.door.apis.groups._joining)
    return member_id


def _held(kafka: Listener) -> tuple[Any, ...]:
    """What the door holds for waiting group requests, and its connections."""
    groups = kafka.door.apis.groups
    return groups._joining, groups._formed, groups._turns, len(kafka.door._connections)


@pytest.mark.parametrize("goes", ["closes", "resets"])
def test_a_join_waiting_at_the_barrier_gives_back_what_it_held_once_its_client_has_gone(
        kafka: Listener, goes: str) -> None:
    from tests.kafka.test_groups import _lone_member

    create_topic(kafka.client, "orders")
    a, _ = _lone_member(kafka)
    with a:
        b = kafka.connect()
        _waiting_join(kafka, b)
        if goes == "resets":
            b.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close() sends RST
        b.close()
        # Its wait ended (no entry of it left), its connection's slot given back: A's alone.
        _until(lambda: _held(kafka) == ({}, {}, {}, 1))


def test_a_rebalance_whose_only_waiter_has_gone_is_completed_by_the_expiry_pass_with_that_member(
        kafka: Listener, clock: Any) -> None:
    from tests.kafka.test_groups import _lone_member, heartbeat
    from tests.kafka.test_static_membership import _describe

    create_topic(kafka.client, "orders")
    a, a_id = _lone_member(kafka)
    with a:
        with kafka.connect() as b:
            b_id = _waiting_join(kafka, b)
        _until(lambda: _held(kafka) == ({}, {}, {}, 1))
        clock.advance(_LONG_REBALANCE_S * 1000 + 1)
        kafka.services.group_expiry.expire_members(clock())
        # As had B's JoinGroup waited on: A, which did not join again, is removed at the
        # deadline, and B, which did, forms generation 2 alone, as its leader.
        described = _describe(a)
        assert (described.group_state, [m.member_id for m in described.members]) == ("CompletingRebalance", [b_id])
        assert heartbeat(a, "g", 1, a_id) == ErrorCode.unknown_member_id


def test_a_member_still_waiting_is_answered_at_the_deadline_with_the_member_whose_client_has_gone(
        kafka: Listener, clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.kafka.test_groups import _lone_member, in_thread, join

    create_topic(kafka.client, "orders")
    asks = _joined_asks(kafka, monkeypatch)
    a, _ = _lone_member(kafka)
    with a, kafka.connect() as c:
        with kafka.connect() as b:
            b_id = _waiting_join(kafka, b)
        _until(lambda: _held(kafka) == ({}, {}, {}, 2))
        gone_at = len(asks)
        clock.advance(1)  # B joined first: it leads the generation
        waiting, c_joined = in_thread(join, c, "g", rebalance_s=_LONG_REBALANCE_S)
        _until(lambda: len(kafka.door.apis.groups._joining) == 1)
        clock.advance(_LONG_REBALANCE_S * 1000)
        waiting.join(IO_TIMEOUT_S)
        (joined,) = c_joined
        # A did not join again and is removed; B's member stays in the generation, as in Kafka.
        assert (joined.error_code, joined.generation_id, joined.leader, joined.members) == (
            ErrorCode.none, 2, b_id, ())
        assert set(asks[gone_at:]) == {joined.member_id}  # nothing asked for B since its client went


def test_a_join_whose_client_sent_its_next_request_and_closed_its_side_is_answered_and_so_is_the_next(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.kafka.conftest import response
    from tests.kafka.test_groups import JOIN_V, _lone_member, join

    create_topic(kafka.client, "orders")
    asks = _joined_asks(kafka, monkeypatch)
    a, a_id = _lone_member(kafka)
    with a, kafka.connect() as b:
        b_id = _waiting_join(kafka, b)
        b.sendall(frame(18, 3, _API_VERSIONS, correlation_id=8))
        b.shutdown(socket.SHUT_WR)
        asked = asks.count(b_id)
        _until(lambda: asks.count(b_id) >= asked + 2)  # it went on asking after the door saw the end
        rejoined = join(a, "g", a_id)
        assert sorted(m.member_id for m in rejoined.members) == sorted([a_id, b_id])
        correlation_id, b_joined = response(11, JOIN_V, read_frame(b))  # type: ignore[arg-type]
        assert (correlation_id, b_joined.error_code, b_joined.generation_id, b_joined.leader) == (
            7, ErrorCode.none, 2, a_id)
        assert response(18, 3, read_frame(b))[0] == 8  # type: ignore[arg-type]


_API_VERSIONS = request_class(18, 3)(client_software_name="test", client_software_version="1")  # type: ignore[misc]


def test_a_produce_frame_is_not_held_beside_its_records_while_they_are_written(
        kafka: Listener, monkeypatch: pytest.MonkeyPatch) -> None:
    # The frame, once read as a request, is a second copy of its records: held until the answer
    # was written, four 86 MB Produces at once took the process from 129 to 1,164 MiB.
    create_topic(kafka.client, "blobs", value_format="bytes")
    value = b"x" * 8_000_000
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    builder.append(0, 1_700_000_000_000, None, value, [])
    whole = frame(0, 9, _produce("blobs", 0, bytes(builder.build())))
    del builder
    held_at_send: list[int] = []
    send = kafka.services.log.send

    def measured(*args: Any, **kwargs: Any) -> Any:
        held_at_send.append(tracemalloc.get_traced_memory()[0])
        return send(*args, **kwargs)

    monkeypatch.setattr(kafka.services.log, "send", measured)
    with kafka.connect() as s:
        tracemalloc.start()
        try:
            s.sendall(whole)
            answer = read_frame(s)
        finally:
            tracemalloc.stop()
    assert answer is not None
    # What the process holds then: the records the request carries, and the value read out of
    # them; the frame besides made it three copies.
    (held,) = held_at_send
    assert 2 * len(value) <= held < 2.5 * len(value), held / len(value)


# --- A principal's share of the frame budget (OUTBOX_KAFKA_QUEUED_MAX_REQUEST_BYTES_PER_PRINCIPAL) ---


def _logged_in(world: Secured, who: str) -> socket.socket:
    from tests.kafka.test_security import _sasl

    s = world.connect()
    assert _sasl(s, who, world.keys[who]).error_code == ErrorCode.none
    return s


def test_one_principals_frames_that_never_complete_hold_its_share_alone_and_anothers_frame_is_read(
        db_url: str, clock: Any) -> None:
    # A principal with a key and no ACL declared a 100 MiB frame on each of six connections and
    # sent a byte of each: the whole budget was taken, and another principal's large Produce
    # waited until they closed (OUTBOX_KAFKA_CONNECTIONS_MAX_IDLE_MS). Here three frames of the
    # largest size fill the budget, one fills a share.
    from tests.kafka.secured import start_secured

    size = 3 * 1024 * 1024
    whole = _padded_api_versions(size)
    with contextlib.contextmanager(start_secured)(
            db_url, clock, kafka_socket_request_max_bytes=size, kafka_queued_max_request_bytes=3 * size,
            kafka_queued_max_request_bytes_per_principal=size) as world:
        hogs = [_logged_in(world, "alice") for _ in range(3)]
        bob = _logged_in(world, "bob")
        try:
            hogs[0].sendall(whole[:-1])  # never completes: all of alice's share
            time.sleep(0.2)
            for s in hogs[1:]:
                s.sendall(whole[:5])  # declared, a byte sent: each waits for alice's share
            time.sleep(0.2)
            bob.sendall(whole)
            assert _answered_within(bob, IO_TIMEOUT_S)  # waited for ever before
            hogs[1].sendall(whole[5:])
            assert not _answered_within(hogs[1], 1.0)  # alice's own frame still waits for her share
            hogs[0].close()  # her share given back
            assert _answered_within(hogs[1], IO_TIMEOUT_S)
        finally:
            for s in (*hogs, bob):
                s.close()


def test_without_authentication_every_client_shares_the_whole_frame_budget(kafka: Listener) -> None:
    # Every client is User:ANONYMOUS: a share of its own would leave a lone producer's large
    # frames a part of what they had, so its share is the budget, as the HTTP door's.
    size = 3 * 1024 * 1024
    whole = _padded_api_versions(size)
    with listener_with(kafka, kafka_socket_request_max_bytes=size, kafka_queued_max_request_bytes=2 * size,
                       kafka_queued_max_request_bytes_per_principal=size) as small, \
            small.connect() as holder, small.connect() as other:
        holder.sendall(whole[:-1])
        time.sleep(0.2)
        other.sendall(whole)
        assert _answered_within(other, IO_TIMEOUT_S)
