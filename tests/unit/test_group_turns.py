"""A group's turn in the Kafka door (app.kafka.groups.GroupApis._in_turn) is kept only while a
request of the group holds or waits for it: a client naming a million group ids one after
another, or at once, leaves nothing in the process once its requests end, however they end."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from app.kafka.groups import GroupApis
from app.settings import Settings


def _apis() -> GroupApis:
    return GroupApis(SimpleNamespace(groups=None, group_offsets=None, classic_group_protocol=None, settings=Settings()))


def test_the_turns_of_many_groups_taken_at_once_are_all_given_back() -> None:
    async def run() -> dict[str, object]:
        apis = _apis()
        await asyncio.gather(*(apis._in_turn(f"g{i}", int) for i in range(1_000)))
        return apis._turns

    assert asyncio.run(run()) == {}


def test_a_turn_whose_call_fails_is_given_back() -> None:
    def fails() -> None:
        raise ValueError("refused")

    async def run() -> dict[str, object]:
        apis = _apis()
        for i in range(100):
            with pytest.raises(ValueError):
                await apis._in_turn(f"g{i}", fails)
        return apis._turns

    assert asyncio.run(run()) == {}
