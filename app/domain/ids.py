"""The rule for the names a client gives: transactional ids and group ids (and the member ids
an HTTP client sends back). One rule for every door: the HTTP schemas take their limits from
here, and the services check the ids that enter them, so that the Kafka door and the
in-database callers are held to the same rule and the verdict never depends on the database
(PostgreSQL's varchar(255) refuses a longer id, SQLite would store it)."""

from __future__ import annotations

import re

from app.domain.errors import InvalidGroupId, InvalidRequest

# Ids appear in URL paths (/v1/transactions/{id}, /v1/groups/{id}): no '/', and no control
# characters (NUL included: PostgreSQL cannot store it in text). The anchored form is the HTTP
# schemas' and the OpenAPI document's.
NAME_CHARACTER = r"[^/\x00-\x1f\x7f]"  # also a topic's, as it is addressed (app.domain.topic_names)
ID_PATTERN = rf"^{NAME_CHARACTER}*$"
# The same characters, matched whole: re's `$` also matches before a final newline, which the
# anchored pattern would let through.
_ID_CHARACTERS = re.compile(rf"{NAME_CHARACTER}*")
# Storage's String(255) (app.storage.tables), in characters.
ID_MAX_LENGTH = 255


def _check(kind: str, value: str, error: type[InvalidRequest]) -> None:
    if not 0 < len(value) <= ID_MAX_LENGTH:
        raise error(f"a {kind} is 1 to {ID_MAX_LENGTH} characters, not {len(value)}")
    if _ID_CHARACTERS.fullmatch(value) is None:
        raise error(f"a {kind} holds no '/' and no control character: {value!r}")


def check_transactional_id(transactional_id: str) -> None:
    """INVALID_REQUEST unless `transactional_id` is 1 to ID_MAX_LENGTH characters, none of them
    '/' or a control character (Kafka's InitProducerId answers INVALID_REQUEST to an empty one)."""
    _check("transactional_id", transactional_id, InvalidRequest)


def check_group_id(group_id: str) -> None:
    """INVALID_GROUP_ID, as Kafka's group coordinator answers a group id it refuses, unless
    `group_id` is 1 to ID_MAX_LENGTH characters, none of them '/' or a control character."""
    _check("group_id", group_id, InvalidGroupId)
