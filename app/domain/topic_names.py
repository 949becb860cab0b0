"""The rule for topics' names, for every door. Two verdicts, on purpose: a new topic's name
must be legal in Kafka (what CreateTopics accepts, over HTTP and the Kafka door alike), while a
name that only addresses a topic (a Send's, a Fetch's, outbox.append's) is checked only for what
a URL path or a log line would misread, so that a legal-looking name of a topic that does not
exist is answered UNKNOWN_TOPIC_OR_PARTITION rather than a syntax error. PostgreSQL's
outbox.append holds a copy of the address rule in SQL (app/storage/sql/appender.postgresql.sql),
held to this one by the appenders' table of cases (tests/appender_cases.py)."""

from __future__ import annotations

import re

from app.domain.errors import InvalidRequest, InvalidTopic
from app.domain.ids import NAME_CHARACTER

# Kafka's longest topic name; storage's column is as wide (app.storage.tables).
TOPIC_NAME_MAX_LENGTH = 249
# Kafka's legal characters for a new topic's name.
_LEGAL = re.compile(rf"[a-zA-Z0-9._-]{{1,{TOPIC_NAME_MAX_LENGTH}}}")
# What an existing topic may be addressed by: no '/', no control characters, as an id.
_ADDRESS = re.compile(rf"{NAME_CHARACTER}{{1,{TOPIC_NAME_MAX_LENGTH}}}")


def check_new_topic_name(name: str) -> None:
    """A name a new topic may have, or InvalidTopic (Kafka's INVALID_TOPIC_EXCEPTION)."""
    if not _LEGAL.fullmatch(name) or name in (".", ".."):
        raise InvalidTopic(f"topic name {name!r} is not legal: use 1-{TOPIC_NAME_MAX_LENGTH} of a-z A-Z 0-9 . _ -")


def check_topic_address(topic: object) -> None:
    """A name an existing topic may be addressed by, or InvalidRequest."""
    if not isinstance(topic, str) or not _ADDRESS.fullmatch(topic):
        raise InvalidRequest(f"topic: a topic's name is 1 to {TOPIC_NAME_MAX_LENGTH} characters without '/' or "
                             f"control characters, not {topic!r}")
