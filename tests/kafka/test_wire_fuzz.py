"""Random and mutated frames at the listener: each is answered or its connection closed within
the timeout, nothing is logged at ERROR (no traceback: bad input is the client's mistake), and
the listener still answers afterwards."""

from __future__ import annotations

import logging
import random
import socket
import struct

import pytest

from app.kafka.protocol import request_class
from tests.helpers import create_topic
from tests.kafka.conftest import Listener, ask, frame, listener_with, read_frame
from tests.kafka.test_wire import _fetch, _produce, _records

FRAMES = 400


def _send_and_finish(kafka: Listener, data: bytes) -> None:
    """Send `data`; read until the listener answers or closes. A frame that announces more bytes
    than it carries is finished with zeros, so that no connection waits on the client."""
    with kafka.connect() as s:
        s.sendall(data)
        if len(data) >= 4:
            (size,) = struct.unpack(">i", data[:4])
            missing = size - (len(data) - 4)
            if 0 < missing <= 1 << 16:
                s.sendall(b"\0" * missing)
            elif missing > 1 << 16:
                return  # over any frame the test sends: closing our side ends it
        try:
            read_frame(s)
        except (ConnectionResetError, AssertionError):
            pass  # closed by the listener, maybe inside its answer: both are answers here
        except socket.timeout:
            pytest.fail(f"no answer and no close within the timeout for {data[:64]!r}")


def test_mutated_and_random_frames_are_answered_or_closed_without_an_error_logged(
        kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(kafka.client, "orders")
    # A mutated Fetch may ask to wait minutes, as a client may: the service's bound ends it.
    with listener_with(kafka, fetch_max_wait_ms=1000) as bounded:
        _fuzz(bounded, caplog)


def _fuzz(kafka: Listener, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20261129)
    valid = [
        frame(0, 9, _produce("orders", 0, _records([b'{"a": 1}'], key=b"k", headers=[("h", b"v")]))),
        frame(1, 12, _fetch("orders", 0, 0)),
        frame(3, 12, request_class(3, 12)(topics=None, allow_auto_topic_creation=False,  # type: ignore[misc]
                                          include_topic_authorized_operations=False)),
        frame(18, 3, request_class(18, 3)(client_software_name="t", client_software_version="1")),  # type: ignore[misc]
    ]
    caplog.set_level(logging.INFO, logger="app.kafka")
    for i in range(FRAMES):
        if i % 5 == 0:
            body = rng.randbytes(rng.randrange(0, 64))
            data = struct.pack(">i", len(body)) + body
        else:
            data = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(4, len(data))] = rng.randrange(256)
            data = bytes(data)
        _send_and_finish(kafka, data)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    # The frames did reach the parser: many were closed as unreadable, and said so at INFO.
    unreadable = [r for r in caplog.records if "cannot be read" in r.getMessage()]
    assert unreadable and all(r.levelno == logging.INFO for r in unreadable)
    with kafka.connect() as s:
        answer = ask(s, 18, 3, request_class(18, 3)(client_software_name="t", client_software_version="1"))  # type: ignore[misc]
    assert answer.error_code == 0
