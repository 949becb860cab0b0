"""The group-expiry pass's looks (member expiry, offset expiry, empty groups) each on their
own: one that fails leaves the others to run, what those did is logged as a successful pass's
counts are, the pass is counted as failed with the look's error raised (the worker's loop logs
it), and a failed look at offsets or empty groups waits its check interval as a successful one
does. On both databases; time is the test's clock."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from app.domain.offsets import NO_LEADER_EPOCH, OffsetToStage, ReadOrder
from app.services.group_expiry import EMPTY_GROUP_CHECK_INTERVAL_MS, EMPTY_GROUP_RETENTION_MS
from app.worker.chore import ChoreConfig
from app.worker.group_expiry import GroupExpiryPass, GroupExpiryWorker
from tests.helpers import create_topic
from tests.integration.test_metrics import delta, scrape

OFFSETS_RETENTION_MS = 10_080 * 60_000  # OUTBOX_OFFSETS_RETENTION_MINUTES=10080 (settings)


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    """OUTBOX_OFFSETS_RETENTION_MINUTES set (unset, the default, offset expiry does nothing)."""
    return settings.model_copy(update={"offsets_retention_minutes": 10_080})


@pytest.fixture
def worker(services, clock) -> GroupExpiryWorker:  # type: ignore[no-untyped-def]
    return GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=50))


def failing(calls: list[int], error: Exception) -> Callable[[int], object]:
    """A look that records the time it was called at, then raises `error`."""
    def look(now_ms: int) -> object:
        calls.append(now_ms)
        raise error
    return look


def _groups(client) -> list[str]:  # type: ignore[no-untyped-def]
    return [g["group_id"] for g in client.get("/v1/groups").json()["groups"]]


@pytest.fixture
def passes_logged(caplog) -> Callable[[], list[str]]:  # type: ignore[no-untyped-def]
    """The lines the chores have logged about their passes since the test began."""
    caplog.set_level(logging.INFO, logger="app.worker.chore")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "app.worker.chore"]


def _emptied_group(client, services) -> None:  # type: ignore[no-untyped-def]
    """Group "g" joined and left, with no offsets: deleted once EMPTY_GROUP_RETENTION_MS passed."""
    create_topic(client, "t", 1)
    m = services.groups.join("g", member_id=None, topic_names=["t"], session_timeout_ms=10_000)
    services.groups.leave("g", m.member_id)


def test_a_failing_offset_expiry_leaves_the_empty_groups_deleted_and_fails_the_pass(  # type: ignore[no-untyped-def]
        client, services, clock, worker, monkeypatch) -> None:
    _emptied_group(client, services)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    error = RuntimeError("offset expiry broke")
    monkeypatch.setattr(services.group_expiry, "expire_offsets", failing([], error))
    before = scrape(client)

    with pytest.raises(RuntimeError) as raised:
        worker.run_once(clock())

    assert raised.value is error
    assert _groups(client) == []
    after = scrape(client)
    assert delta(before, after, "outbox_groups_deleted_empty_total") == 1
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="failed") == 1
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="ok") == 0


def test_a_failing_member_expiry_leaves_the_offsets_expired(  # type: ignore[no-untyped-def]
        client, services, clock, worker, monkeypatch) -> None:
    create_topic(client, "t", 1)
    services.group_offsets.commit("simple", [OffsetToStage("t", 0, 3, None, NO_LEADER_EPOCH, ReadOrder.COMMIT)])
    clock.advance(OFFSETS_RETENTION_MS)
    error = RuntimeError("member expiry broke")
    monkeypatch.setattr(services.group_expiry, "expire_members", failing([], error))

    with pytest.raises(RuntimeError) as raised:
        worker.run_once(clock())

    assert raised.value is error
    assert _groups(client) == []


def test_a_failed_offset_expiry_looks_again_a_check_interval_later(  # type: ignore[no-untyped-def]
        services, clock, worker, monkeypatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(services.group_expiry, "expire_offsets", failing(calls, RuntimeError("offset expiry broke")))
    start = clock()

    with pytest.raises(RuntimeError):
        worker.run_once(start)
    assert worker.run_once(start + EMPTY_GROUP_CHECK_INTERVAL_MS - 1) == GroupExpiryPass(0, 0, 0)
    with pytest.raises(RuntimeError):
        worker.run_once(start + EMPTY_GROUP_CHECK_INTERVAL_MS)

    assert calls == [start, start + EMPTY_GROUP_CHECK_INTERVAL_MS]


def test_looks_failing_together_fail_the_pass_with_both_errors(  # type: ignore[no-untyped-def]
        services, clock, worker, monkeypatch) -> None:
    offsets_error, groups_error = RuntimeError("offset expiry broke"), RuntimeError("empty groups broke")
    monkeypatch.setattr(services.group_expiry, "expire_offsets", failing([], offsets_error))
    monkeypatch.setattr(services.group_expiry, "delete_empty_groups", failing([], groups_error))

    with pytest.raises(ExceptionGroup) as raised:
        worker.run_once(clock())

    assert raised.value.exceptions == (offsets_error, groups_error)


def test_a_pass_with_a_failing_look_logs_what_the_other_looks_did(  # type: ignore[no-untyped-def]
        client, services, clock, worker, monkeypatch, passes_logged) -> None:
    _emptied_group(client, services)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    monkeypatch.setattr(services.group_expiry, "expire_offsets", failing([], RuntimeError("offset expiry broke")))

    with pytest.raises(RuntimeError):
        worker.run_once(clock())

    assert passes_logged() == [
        "group-expiry pass: GroupExpiryPass(expired_members=0, deleted_groups=1, expired_offsets=0)"]


def test_a_pass_with_looks_failing_together_logs_what_the_member_expiry_did(  # type: ignore[no-untyped-def]
        client, services, clock, worker, monkeypatch, passes_logged) -> None:
    create_topic(client, "t", 1)
    services.groups.join("g", member_id=None, topic_names=["t"], session_timeout_ms=10_000)
    clock.advance(10_001)
    monkeypatch.setattr(services.group_expiry, "expire_offsets", failing([], RuntimeError("offset expiry broke")))
    monkeypatch.setattr(services.group_expiry, "delete_empty_groups", failing([], RuntimeError("empty groups broke")))

    with pytest.raises(ExceptionGroup):
        worker.run_once(clock())

    assert passes_logged() == [
        "group-expiry pass: GroupExpiryPass(expired_members=1, deleted_groups=0, expired_offsets=0)"]


def test_a_successful_pass_logs_its_counts_once(  # type: ignore[no-untyped-def]
        client, services, clock, worker, passes_logged) -> None:
    _emptied_group(client, services)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    before = scrape(client)

    assert worker.run_once(clock()) == GroupExpiryPass(expired_members=0, deleted_groups=1, expired_offsets=0)

    assert passes_logged() == [
        "group-expiry pass: GroupExpiryPass(expired_members=0, deleted_groups=1, expired_offsets=0)"]
    after = scrape(client)
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="ok") == 1
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="failed") == 0


def stop_after_one_pass(stop: threading.Event, seconds: float) -> bool:
    """A sleeper that ends run_forever's loop after its first pass."""
    stop.set()
    return True


def test_the_loop_logs_a_failing_pass_s_counts_once_then_its_failure(  # type: ignore[no-untyped-def]
        client, services, clock, monkeypatch, caplog, passes_logged) -> None:
    worker = GroupExpiryWorker(services.group_expiry, clock, ChoreConfig(interval_ms=50), sleep=stop_after_one_pass)
    _emptied_group(client, services)
    clock.advance(EMPTY_GROUP_RETENTION_MS + 1)
    monkeypatch.setattr(services.group_expiry, "expire_offsets", failing([], RuntimeError("offset expiry broke")))
    before = scrape(client)

    worker.run_forever()

    assert passes_logged() == [
        "group-expiry pass: GroupExpiryPass(expired_members=0, deleted_groups=1, expired_offsets=0)",
        "group-expiry pass failed"]
    assert [r.levelname for r in caplog.records if r.name == "app.worker.chore"] == ["INFO", "ERROR"]
    after = scrape(client)
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="failed") == 1
    assert delta(before, after, "outbox_group_expiry_passes_total", outcome="ok") == 0
