"""benchmarks/before_after.py's `services`, which every before/after benchmark starts its two
services with (kafka_consume.py with a Kafka listener each): each side's `outbox serve` gets the
settings asked for that side, and both are stopped when the body fails."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks' own modules, not a package

from before_after import services  # noqa: E402
from run import _free_port  # noqa: E402


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_each_side_gets_its_own_settings_and_both_stop_when_the_body_fails(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/outbox.db"
    ports: dict[str, int] = {}

    def listener(side: str) -> dict[str, str]:
        ports[side] = _free_port()
        return {"OUTBOX_KAFKA_LISTENER": f"127.0.0.1:{ports[side]}"}

    with pytest.raises(RuntimeError, match="the body failed"):
        with services(url, ROOT, ROOT, listener) as started:
            assert list(started) == ["before", "after"]
            assert ports["before"] != ports["after"]
            assert all(_listening(port) for port in ports.values()), ports
            processes = [service.proc for service in started.values()]
            raise RuntimeError("the body failed")
    assert [proc.poll() is not None for proc in processes] == [True, True]
    assert not any(_listening(port) for port in ports.values()), ports
