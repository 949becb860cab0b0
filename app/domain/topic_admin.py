"""The rules of topic administration (Kafka's CreatePartitions, DeleteRecords, DeleteTopics):
the service reads the state under the locks it needs and asks these what may be written.
IncrementalAlterConfigs' rule is TopicConfig.altered (app.domain.topic_config)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.domain import acl
from app.domain.acl import Operation, Resource
from app.domain.errors import InvalidPartitions, OffsetOutOfRange, TopicHasOpenTransactions
from app.domain.log_start import AcrossAt, clean_cut_at_or_above, clean_cut_at_or_below


def partitions_to_add(topic: str, current: int, requested: int, max_partitions: int) -> range:
    """CreatePartitions: the partitions to create so that `topic` has `requested` in all.
    A topic's partitions are never removed (a record's partition is part of its address), so
    the count only grows, as in Kafka."""
    if requested == current:
        raise InvalidPartitions(f"topic {topic!r} already has {current} partitions")
    if requested < current:
        raise InvalidPartitions(
            f"topic {topic!r} has {current} partitions, more than the {requested} asked for: "
            "partitions can be added, never removed"
        )
    if requested > max_partitions:
        raise InvalidPartitions(
            f"partition_count must be at most {max_partitions} (OUTBOX_MAX_PARTITIONS_PER_TOPIC)"
        )
    return range(current, requested)


def new_log_start(requested: int | None, *, log_start: int, last_stable: int, log_end: int,
                  across: AcrossAt) -> int:
    """DeleteRecords: the partition's log start once the records below `requested` are
    deleted; None: as far as it may go, the highest clean cut at or below the last stable
    offset (what the Kafka door asks for Kafka's -1, the high watermark: the records of a
    transaction still open stay, and so do those of one committed across the last stable
    offset). Never backwards (a request below the log start leaves it, as Kafka's low
    watermark), never past the last stable offset (below it every transaction has its marker,
    so the log start never cuts into an unfinished transaction, and the log cleaner may delete
    everything under it), and only to a clean cut (app.domain.log_start): an offset that would
    cut a committed transaction from a commit-order reader that has not read it is refused,
    naming the nearest clean cuts below and above. `across` says what lies across an offset.
    Refusals are OFFSET_OUT_OF_RANGE, as Kafka answers an offset it cannot delete to, with the
    partition's bounds, and change nothing."""
    bounds = {"log_start_offset": log_start, "last_stable_offset": last_stable, "log_end_offset": log_end}
    if requested is None:
        return max(log_start, clean_cut_at_or_below(last_stable, across))
    if requested < 0:
        raise OffsetOutOfRange(
            f"offset {requested} is no log start: records can be deleted up to an offset from 0 to the "
            f"partition's last stable offset {last_stable} (log [{log_start}, {log_end}])",
            **bounds,
        )
    if requested > last_stable:
        raise OffsetOutOfRange(
            f"offset {requested} is past the partition's last stable offset {last_stable}: "
            f"records can be deleted up to it (log [{log_start}, {log_end}])",
            **bounds,
        )
    if requested <= log_start:
        return log_start
    cut = across(requested)
    if cut is not None:
        # Both searches go on from `cut`, as each would begin by reading it again: every read of
        # what lies across an offset walks the committed transactions past it, under the
        # partition's append lock.
        below = clean_cut_at_or_below(cut.first_record, across)
        above = None if cut.last_marker + 1 > last_stable else clean_cut_at_or_above(
            cut.last_marker + 1, across, at_most=last_stable)
        choices = f"delete up to {below}, or up to {above}" if above is not None else (
            f"delete up to {below} (no clean cut lies above it up to the last stable offset {last_stable})")
        raise OffsetOutOfRange(
            f"offset {requested} would cut {cut.describe()} (a reader in commit order that has not "
            f"read it would lose it): {choices} (log [{log_start}, {log_end}])",
            **bounds,
        )
    return requested


def check_deletable(topic: str, transactional_ids: Iterable[str]) -> None:
    """DeleteTopics: refused while unfinished transactions write to the topic or stage group
    offsets for it. Deleting under them would leave a transaction with a partition that can
    never get its marker, and offsets that would commit for a topic that is gone; aborting
    them instead would end other producers' work as a side effect of an admin call."""
    ids = sorted(set(transactional_ids))
    if ids:
        raise TopicHasOpenTransactions(
            f"topic {topic!r} is in unfinished transactions of transactional_id(s) "
            f"{', '.join(ids)}: wait for them to commit or abort, or abort them "
            "(`outbox transactions abort ID`), then delete the topic",
            transactional_ids=ids,
        )


def only_describable(e: TopicHasOpenTransactions,
                     allows: Callable[[Operation, Resource], bool]) -> TopicHasOpenTransactions:
    """check_deletable's refusal as a principal may see it, `allows` being its door's decision
    for it: naming only the transactional ids it may describe (the others counted), so that a
    principal allowed to delete a topic learns nothing more of who writes to it. Both doors
    answer a DeleteTopics refused this way through it."""
    ids = e.details.get("transactional_ids", [])
    shown = [i for i in ids if allows(Operation.DESCRIBE, acl.transactional_id(i))]
    if len(shown) == len(ids):
        return e
    others = len(ids) - len(shown)
    return TopicHasOpenTransactions(
        f"the topic is in unfinished transactions ({', '.join(shown + [f'{others} other(s)'])}): wait for them to "
        "commit or abort, or have an operator abort them, then delete the topic", transactional_ids=shown)
