"""The payload of a log change's notification, `<topic_id>:<partition>`, as the listener reads it
(app.storage.changes.parse_payload): what `announce` and the appender write, and nothing else."""

from __future__ import annotations

import pytest

from app.storage.changes import parse_payload


@pytest.mark.parametrize(("payload", "key"), [
    (b"7:3", (7, 3)),
    (b"0:0", (0, 0)),
    (b"123456789012345678:2147483647", (123456789012345678, 2147483647)),
])
def test_a_payload_naming_a_partition_is_that_partition(payload: bytes, key: tuple[int, int]) -> None:
    assert parse_payload(payload) == key


@pytest.mark.parametrize("payload", [
    b"", b"7", b"7:", b":3", b"7:3:1", b"-1:2", b"7:-2", b" 7:3", b"7:3\n", b"07:3", b"7:x", b"\xff:1",
    b"1" * 19 + b":1", b"1:" + b"1" * 11, b"1:2147483648",
])
def test_anything_else_names_no_partition(payload: bytes) -> None:
    assert parse_payload(payload) is None
