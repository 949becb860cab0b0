"""The most prepared transactions one Commit names is the domain's MAX_JOINT_COMMIT (the service
checks it: tests/integration/test_joint_commit.py); the HTTP schema and the Spark sink state it.
And the sink's copy of the undecided states, whose transactions its cleanup takes over."""

from __future__ import annotations

import typing

from app.api.schemas.transactions import CommitTransactionRequest
from app.domain.transaction import MAX_JOINT_COMMIT, UNDECIDED_STATES
from spark_jobs.writer.commit import MAX_JOINT_COMMIT as SINK_MAX_JOINT_COMMIT
from spark_jobs.writer.commit import UNDECIDED_STATES as SINK_UNDECIDED_STATES


def test_the_http_schemas_prepared_list_holds_at_most_max_joint_commit() -> None:
    hint = typing.get_type_hints(CommitTransactionRequest, include_extras=True)["prepared"]
    (meta,) = typing.get_args(hint)[1:]
    assert meta.max_length == MAX_JOINT_COMMIT


def test_the_spark_sinks_copy_of_the_limit_is_the_domains() -> None:
    # spark_jobs may not import the domain (pyproject's spark-through-client contract): a copy.
    assert SINK_MAX_JOINT_COMMIT == MAX_JOINT_COMMIT


def test_the_spark_sinks_copy_of_the_undecided_states_is_the_domains() -> None:
    assert set(SINK_UNDECIDED_STATES) == {s.value for s in UNDECIDED_STATES}
