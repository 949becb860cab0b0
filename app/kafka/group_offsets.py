"""A group's committed offsets over the Kafka door: OffsetCommit, OffsetFetch and OffsetDelete,
on the offsets both doors commit (app.services.group_offsets.GroupOffsetService), checked
against the group's generation and member whichever door manages it; and the offsets an
OffsetCommit's or TxnOffsetCommit's topics write (`offsets_once`, which app.kafka.apis uses for
the second). The classic group protocol, the administration and the listing of groups are
app.kafka.groups'."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from app.domain import acl
from app.domain.acl import Operation
from app.domain.errors import OutboxError
from app.domain.offsets import NO_LEADER_EPOCH, GroupMetadata, OffsetToStage, ReadOrder, metadata_fits
from app.kafka.api_keys import ApiKey
from app.kafka.auth import access, refusal_code
from app.kafka.errors import coordinator_error_code, metadata_code
from app.kafka.protocol import NO_WAIT, build, partitions_once, response_module


# OffsetFetch's first version whose clients know UNSTABLE_OFFSET_COMMIT (KIP-447's require_stable).
FIRST_UNSTABLE_OFFSET_COMMIT_VERSION = 7


class GroupOffsetApis:
    """OffsetCommit, OffsetFetch and OffsetDelete on GroupOffsetService; what each requires of
    the principal is app.kafka.auth.RULES'."""

    def __init__(self, services: Any) -> None:
        self.group_offsets = services.group_offsets
        self.handlers = {ApiKey.OFFSET_COMMIT: self.offset_commit, ApiKey.OFFSET_FETCH: self.offset_fetch,
                         ApiKey.OFFSET_DELETE: self.offset_delete}

    def offset_commit(self, body: Any, version: int) -> Any:
        m = response_module(ApiKey.OFFSET_COMMIT, version)
        assert m is not None
        generation_id = body.generation_id_or_member_epoch
        instance_id = getattr(body, "group_instance_id", None)  # from version 7 (KIP-345)
        # None for Kafka's simple consumer, taken only while the group has no members
        # (GroupOffsetService.commit).
        metadata = GroupMetadata.given(generation_id, body.member_id, instance_id)
        # The group first, then each topic, as Kafka's authorizer asks: a refused topic's
        # partitions are answered TOPIC_AUTHORIZATION_FAILED and not committed.
        code = refusal_code(Operation.READ, acl.group(body.group_id)) or ErrorCode.none
        topic_codes = {} if code != ErrorCode.none else {
            t.name: refusal_code(Operation.READ, acl.topic(t.name)) for t in body.topics}
        allowed = [t for t in body.topics if topic_codes.get(t.name, code) is None]
        try:
            if allowed:
                # The group is checked before any metadata is (the service's order, Kafka's),
                # even when no offset fits; one too long is left out, answered below.
                self.group_offsets.commit(body.group_id, offsets_once(allowed), metadata, each_partition=True)
        except OutboxError as e:
            code = coordinator_error_code(e)
        return build(m.OffsetCommitResponse, throttle_time=NO_WAIT, topics=tuple(
            build(m.OffsetCommitResponseTopic, name=t.name, partitions=tuple(
                build(m.OffsetCommitResponsePartition, partition_index=p.partition_index,
                      error_code=topic_codes.get(t.name) or metadata_code(p.committed_metadata, code))
                for p in t.partitions))
            for t in body.topics))

    def offset_fetch(self, body: Any, version: int) -> Any:
        """The committed offsets asked for, with the leader epoch each was committed with (from
        version 5; -1 where none is, as the offset); with require_stable (version 7),
        a partition whose offsets a transaction holds pending is answered UNSTABLE_OFFSET_COMMIT,
        as Kafka does (KIP-447)."""
        m = response_module(ApiKey.OFFSET_FETCH, version)
        assert m is not None
        require_stable = getattr(body, "require_stable", False)

        def failed(code: ErrorCode) -> Any:
            # The group's error, as Kafka's answer to it: from version 2 the answer's own, no
            # partition; before, which have no field for it, every partition asked for.
            every = () if version >= 2 else tuple(
                build(m.OffsetFetchResponseTopic, name=t.name, partitions=tuple(
                    build(m.OffsetFetchResponsePartition, partition_index=index, committed_offset=-1,
                          committed_leader_epoch=NO_LEADER_EPOCH, metadata=None, error_code=code)
                    for index in t.partition_indexes))
                for t in body.topics or ())
            return build(m.OffsetFetchResponse, throttle_time=NO_WAIT, error_code=code, topics=every)

        if (refused := refusal_code(Operation.DESCRIBE, acl.group(body.group_id))) is not None:
            return failed(refused)
        # The topics named are checked before the group's offsets are read, as Kafka's
        # authorizer is asked before its group coordinator: a group the coordinator refuses (an
        # id outside the rule for ids, INVALID_GROUP_ID) leaves none unchecked.
        denied: dict[str, ErrorCode] = {} if body.topics is None else {
            t.name: code for t in body.topics
            if (code := refusal_code(Operation.DESCRIBE, acl.topic(t.name))) is not None}
        try:
            fetched = self.group_offsets.fetch_with_pending(body.group_id, ReadOrder.OFFSET)
        except OutboxError as e:
            return failed(coordinator_error_code(e))
        at = {(o.topic, o.partition): o for o in fetched.committed}
        if body.topics is None:  # version 2 and later: every partition the group has an offset for,
            wanted: dict[str, list[int]] = {}  # of the topics the principal may describe
            for topic, partition in sorted(set(at) | set(fetched.refused)):
                if access().allows(Operation.DESCRIBE, acl.topic(topic)):
                    wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.name: list(t.partition_indexes) for t in body.topics}

        def partition(topic: str, index: int) -> Any:
            if topic in denied:
                return build(m.OffsetFetchResponsePartition, partition_index=index, committed_offset=-1,
                             committed_leader_epoch=NO_LEADER_EPOCH, metadata=None, error_code=denied[topic])
            if require_stable and (topic, index) in fetched.pending:
                return build(m.OffsetFetchResponsePartition, partition_index=index, committed_offset=-1,
                             committed_leader_epoch=NO_LEADER_EPOCH, metadata=None,
                             error_code=ErrorCode.unstable_offset_commit)
            if (refusal := fetched.refused.get((topic, index))) is not None:
                # An HTTP reader's commit position that a Kafka consumer would skip or repeat a
                # transaction from (app.domain.offsets.offset_in_order): refused whether or not
                # stable offsets are required, since no offset answered here would be right.
                code = coordinator_error_code(refusal)
                if code == ErrorCode.unstable_offset_commit and version < FIRST_UNSTABLE_OFFSET_COMMIT_VERSION:
                    # A client of an older version does not know the code (aiokafka raises it as
                    # an unknown error and gives up); the coordinator's "still loading" is the
                    # retriable refusal every client retries a partition's offset after.
                    code = ErrorCode.coordinator_load_in_progress
                return build(m.OffsetFetchResponsePartition, partition_index=index, committed_offset=-1,
                             committed_leader_epoch=NO_LEADER_EPOCH, metadata=None, error_code=code)
            o = at.get((topic, index))
            return build(m.OffsetFetchResponsePartition, partition_index=index,
                         committed_offset=-1 if o is None else o.committed_offset,
                         committed_leader_epoch=NO_LEADER_EPOCH if o is None else o.leader_epoch,
                         metadata="" if o is None or o.metadata is None else o.metadata, error_code=ErrorCode.none)

        answered = tuple(
            build(m.OffsetFetchResponseTopic, name=topic, partitions=tuple(partition(topic, i) for i in indexes))
            for topic, indexes in wanted.items())
        # From version 2 the answer has an error of its own, and a client of those versions
        # retries the coordinator's "still loading" only there (a partition's it takes as an
        # unexpected error and gives up): said there as well as on the partition, which a
        # client that reads only the partitions' retries.
        loading = version >= 2 and any(p.error_code == ErrorCode.coordinator_load_in_progress
                                       for t in answered for p in t.partitions)
        return build(m.OffsetFetchResponse, throttle_time=NO_WAIT,
                     error_code=ErrorCode.coordinator_load_in_progress if loading else ErrorCode.none,
                     topics=answered)

    def offset_delete(self, body: Any, version: int) -> Any:
        """The group's committed offsets of the partitions named (GroupOffsetService.delete_offsets):
        DELETE on the group, then READ on each topic, as Kafka's authorizer asks; a refused
        topic's partitions are answered TOPIC_AUTHORIZATION_FAILED and keep their offsets."""
        m = response_module(ApiKey.OFFSET_DELETE, version)
        assert m is not None

        def answer(code: ErrorCode, codes: dict[tuple[str, int], ErrorCode]) -> Any:
            return build(m.OffsetDeleteResponse, error_code=code, throttle_time=NO_WAIT, topics=tuple(
                build(m.OffsetDeleteResponseTopic, name=t.name, partitions=tuple(
                    build(m.OffsetDeleteResponsePartition, partition_index=p.partition_index,
                          error_code=codes.get((t.name, p.partition_index), ErrorCode.none))
                    for p in t.partitions))
                for t in body.topics))

        if (denied := refusal_code(Operation.DELETE, acl.group(body.group_id))) is not None:
            return build(m.OffsetDeleteResponse, error_code=denied, throttle_time=NO_WAIT, topics=())
        codes: dict[tuple[str, int], ErrorCode] = {}
        wanted = []
        for t in body.topics:
            refused = refusal_code(Operation.READ, acl.topic(t.name))
            for p in t.partitions:
                if refused is not None:
                    codes[(t.name, p.partition_index)] = refused
                else:
                    wanted.append((t.name, p.partition_index))
        try:
            for key, e in self.group_offsets.delete_offsets(body.group_id, wanted).items():
                codes[key] = coordinator_error_code(e)
        except OutboxError as e:
            return build(m.OffsetDeleteResponse, error_code=coordinator_error_code(e), throttle_time=NO_WAIT, topics=())
        return answer(ErrorCode.none, codes)


def offsets_once(topics: Any) -> list[OffsetToStage]:
    """The offsets an OffsetCommit's or TxnOffsetCommit's topics write, as Kafka's group
    coordinator writes them: one record per entry whose metadata fits, replayed in order, so a
    partition named more than once takes the offset it was last named with (every entry is
    answered, each for its own metadata); here one row per partition (protocol.partitions_once)."""
    # committed_leader_epoch: OffsetCommit from version 6, TxnOffsetCommit from 2; none before.
    return [OffsetToStage(topic, p.partition_index, p.committed_offset, p.committed_metadata,
                          getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH), ReadOrder.OFFSET)
            for topic, named in partitions_once((t.name, p.partition_index, p) for t in topics for p in t.partitions
                                                if metadata_fits(p.committed_metadata))
            for p in named]
