"""The shape checks of a request that hold whatever it asks for: what a request may name only
once, by every door (a Send's partitions, a Fetch's, a ListOffsets', a commit's offsets, the
topics of Kafka's admin requests)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def duplicated(named: Iterable[K]) -> list[K]:
    """The keys named more than once, each once, in the order of their second naming: what a
    request that names a partition (or a topic) twice is refused for, by every door. The HTTP
    door refuses the whole request for the first (offsets.check_distinct_partitions, a Send's
    log_service.check_send, a Fetch's router); Kafka's ListOffsets answers every entry of each
    INVALID_REQUEST, as Kafka does, and reads none of them; its admin requests answer each
    duplicated topic once (protocol.answered_once)."""
    seen: set[K] = set()
    twice: dict[K, None] = {}  # a dict: ordered, so the first refused is the first repeated
    for key in named:
        if key in seen:
            twice[key] = None
        else:
            seen.add(key)
    return list(twice)
