"""The log's administration from the command line, through the same services as the HTTP API:
transactions, topics, groups."""

from __future__ import annotations

import argparse

from app.cli.common import (
    EXIT_USAGE,
    Command,
    an_id,
    CommandError,
    between,
    config_pairs,
    non_negative,
    offset_reset_request,
    open_services,
    print_json,
    warn_of_a_cut_list,
    warn_of_a_plan_only,
)
from app.settings import Settings


def transactions(settings: Settings, args: argparse.Namespace) -> int:
    """Operator tools against the configured database (like kafka-transactions.sh), in the
    HTTP API's shapes (GET /v1/transactions, GET /v1/transactions/{id})."""
    from app.domain.clock import system_clock
    from app.domain.types import TransactionState

    services = open_services(settings)
    coordinator = services.coordinator
    now = system_clock()

    def summary(m) -> dict:  # type: ignore[no-untyped-def]
        return {"transactional_id": m.transactional_id, "state": m.state.value,
                "producer_id": m.producer_id, "producer_epoch": m.producer_epoch, "txn_id": m.txn_id,
                "transaction_timeout_ms": m.transaction_timeout_ms, "txn_started_ms": m.txn_started_ms,
                "age_ms": m.age_ms(now), "updated_ms": m.updated_ms,
                "transaction_version": m.transaction_version,
                "awaits_application_decision": m.state is TransactionState.PREPARED}

    def description(view) -> dict:  # type: ignore[no-untyped-def]
        return {**summary(view.meta),
                "partitions": [{"topic": p.topic, "partition": p.partition, "first_offset": p.first_offset}
                               for p in view.partitions],
                "pending_offsets": [{"group_id": o.group_id, "topic": o.topic, "partition": o.partition,
                                     "offset": o.committed_offset, "metadata": o.metadata,
                                     "leader_epoch": o.leader_epoch}
                                    for o in view.pending_offsets]}

    try:
        if args.action == "list":
            states = [TransactionState(s) for s in args.state] if args.state else None
            page = coordinator.listing.list(states, args.limit, args.min_age_ms, args.transactional_id_prefix,
                                            after=args.after)
            out: object = {"transactions": [summary(m) for m in page.transactions], "next_after": page.next_after}
        elif args.action == "hanging":
            page = coordinator.listing.hanging(now, args.transactional_id_prefix, limit=args.limit, after=args.after)
            out = {"transactions": [summary(m) for m in page.transactions], "next_after": page.next_after}
        elif args.action == "describe":
            out = description(coordinator.listing.describe(args.transactional_id))
        else:
            out = description(coordinator.admin_abort(args.transactional_id, force_prepared=args.force_prepared))
    finally:
        services.db.dispose()
    print_json(out)
    warn_of_a_cut_list(out)
    return 0


def topics(settings: Settings, args: argparse.Namespace) -> int:
    """Topic administration against the configured database (like kafka-topics.sh and
    kafka-delete-records.sh), through the same service as the HTTP API."""
    from dataclasses import asdict

    from app.domain.topic_config import ConfigTextError, new_topic_config, parse_config_text

    # Parsed before the database is opened: a mistake on the command line touches nothing.
    try:
        config = parse_config_text(config_pairs(args)) if args.action in ("create", "alter") else {}
    except ConfigTextError as e:
        raise CommandError(f"config: {e}", EXIT_USAGE) from None
    services = open_services(settings)
    service = services.topics

    def summary(t) -> dict:  # type: ignore[no-untyped-def]
        # As the HTTP API answers them (cleanup_policy, a str enum, is written as its value).
        return {"name": t.name, "partition_count": t.partition_count, "value_format": t.config.value_format,
                "config": asdict(t.config)}

    def description(t, parts) -> dict:  # type: ignore[no-untyped-def]
        return {**summary(t), "partitions": [asdict(p) for p in parts]}

    try:
        if args.action == "list":
            out: object = {"topics": [summary(t) for t in service.list()]}
        elif args.action == "describe":
            out = description(*service.describe(args.topic))
        elif args.action == "create":
            service.create(args.topic, args.partitions, new_topic_config(config, settings.message_max_bytes))
            out = description(*service.describe(args.topic))
        elif args.action == "alter":
            out = description(*service.alter_config(args.topic, config))
        elif args.action == "add-partitions":
            out = description(*service.create_partitions(args.topic, args.partition_count))
        elif args.action == "delete":
            # Nothing to print, as DELETE /v1/topics/{topic} answers 204: the exit status says it.
            service.delete(args.topic)
            return 0
        else:
            log_start = service.delete_records(args.topic, args.partition, args.offset)
            out = {"topic": args.topic, "partition": args.partition, "log_start_offset": log_start}
    finally:
        services.db.dispose()
    print_json(out)
    return 0


def groups(settings: Settings, args: argparse.Namespace) -> int:
    """Consumer groups against the configured database (like kafka-consumer-groups.sh --list
    and --describe), in the HTTP API's shapes: a lag is null where the group has committed no
    offset."""
    services = open_services(settings)
    try:
        if args.action == "list":
            page = services.groups.list_page(args.limit, args.after)
            out: object = {"groups": [{"group_id": g.group_id, "generation_id": g.generation_id,
                                       "member_count": g.member_count} for g in page.groups],
                           "next_after": page.next_after}
        elif args.action == "describe":
            out = services.groups.describe_group(args.group_id).as_dict()
        elif args.action == "lag":
            out = services.group_offsets.lag(args.group_id).as_dict(args.group_id)
        else:
            out = reset_answer(args.group_id, offset_reset_request(args), services.group_offsets)
            warn_of_a_plan_only(args)
    finally:
        services.db.dispose()
    print_json(out)
    return 0


def reset_answer(group_id: str, body: dict, service) -> dict:  # type: ignore[no-untyped-def]
    """What POST /v1/groups/{group_id}/offsets/reset answers for `body`, from the same service."""
    from app.domain.offsets import OffsetResetSpec, ReadOrder, ResetScope, ResetTo
    from app.services.group_offsets import reset_as_dict

    partitions = body.get("partitions")
    scope = ResetScope(body.get("topic"), None if partitions is None else tuple(partitions),
                       body.get("all_topics", False))
    order = body.get("read_order")
    spec = OffsetResetSpec(ResetTo(body["to"]), body.get("offset"), body.get("timestamp_ms"), body.get("shift_by"),
                           None if order is None else ReadOrder(order))
    plan = service.reset_offsets(group_id, scope, spec, dry_run=body["dry_run"])
    return reset_as_dict(group_id, plan, dry_run=body["dry_run"])


def add_commands(command: Command, verbose: argparse.ArgumentParser) -> None:
    from app.domain.group import GROUP_LIST_DEFAULT, GROUP_LIST_MAX
    from app.domain.offsets import ReadOrder
    from app.domain.topic_config import CONFIG_KEYS
    from app.domain.transaction import OPEN_STATE_NAMES, STORED_STATES
    from app.domain.types import TRANSACTION_LIST_DEFAULT, TRANSACTION_LIST_MAX

    tx = command("transactions", help="operator tools: list, describe, hanging, abort")
    txs = tx.add_subparsers(dest="action", required=True)
    tl = txs.add_parser("list", parents=[verbose], help="transactions, by state and age")
    tl.add_argument("--state", action="append", choices=[state.value for state in STORED_STATES],
                    metavar="STATE", help="e.g. Ongoing (repeatable)")
    tl.add_argument("--min-age-ms", type=non_negative, default=None, metavar="MS",
                    help=f"only transactions open ({OPEN_STATE_NAMES}) at least this long")
    th = txs.add_parser("hanging", parents=[verbose],
                        help="open (or completing) longer than the maximum transaction timeout")
    for listing in (tl, th):
        listing.add_argument("--transactional-id-prefix", default=None, metavar="PREFIX",
                             help="only the transactional ids that start with it, exactly")
        listing.add_argument("--limit", type=between(1, TRANSACTION_LIST_MAX), default=TRANSACTION_LIST_DEFAULT,
                             metavar="N", help=f"at most this many (1 to {TRANSACTION_LIST_MAX:,}; default "
                             f"{TRANSACTION_LIST_DEFAULT:,}); a list it cuts says so, with the --after to go on with")
        listing.add_argument("--after", default=None, metavar="TRANSACTIONAL_ID",
                             help="only the transactional ids after this one (a cut list's next_after)")
    td = txs.add_parser("describe", parents=[verbose],
                        help="one transactional id: its state, producer, partitions and pending offsets")
    td.add_argument("transactional_id", type=an_id)
    ta = txs.add_parser("abort", parents=[verbose], help="abort an open transaction and fence its producer; "
                        "a Prepared one only with --force-prepared")
    ta.add_argument("transactional_id", type=an_id)
    ta.add_argument("--force-prepared", action="store_true",
                    help="abort a Prepared transaction too (refused without it, TRANSACTION_PREPARED): only once "
                    "its application's own database is known not to have committed its side")
    tx.set_defaults(func=transactions)
    tp = command("topics", help="topic administration: list, describe, create, alter, add-partitions, "
                 "delete, delete-records")
    tps = tp.add_subparsers(dest="action", required=True)
    tps.add_parser("list", parents=[verbose], help="every topic with its partition count and config")
    tpd = tps.add_parser("describe", parents=[verbose], help="a topic and its partitions' offsets and sizes")
    tpd.add_argument("topic", type=an_id)
    tpc = tps.add_parser("create", parents=[verbose], help="create a topic (CreateTopics)")
    tpc.add_argument("topic", type=an_id)
    tpc.add_argument("--partitions", type=int, default=1, help="how many partitions (default 1)")
    tpc.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                     help="e.g. retention_ms=86400000 (repeatable)")
    tpa = tps.add_parser("alter", parents=[verbose],
                         help="set config keys, keep the others (IncrementalAlterConfigs)")
    tpa.add_argument("topic", type=an_id)
    # KEY=VALUE as arguments, or as `create`'s --config: a newcomer who created a topic with
    # --config writes the same to alter it.
    tpa.add_argument("config", nargs="*", metavar="KEY=VALUE",
                     help=", ".join(CONFIG_KEYS))
    tpa.add_argument("--config", action="append", default=[], dest="config_options", metavar="KEY=VALUE",
                     help="the same as a KEY=VALUE argument (repeatable), as `topics create` takes it")
    tpp = tps.add_parser("add-partitions", parents=[verbose],
                         help="grow a topic to PARTITION_COUNT partitions (CreatePartitions)")
    tpp.add_argument("topic", type=an_id)
    tpp.add_argument("partition_count", type=int)
    tpx = tps.add_parser("delete", parents=[verbose],
                         help="delete a topic (DeleteTopics); refused while transactions use it")
    tpx.add_argument("topic", type=an_id)
    tpr = tps.add_parser("delete-records", parents=[verbose],
                         help="move a partition's log start to OFFSET (DeleteRecords)")
    tpr.add_argument("topic", type=an_id)
    tpr.add_argument("partition", type=non_negative)
    tpr.add_argument("offset", type=non_negative)
    tp.set_defaults(func=topics)
    gp = command("groups", help="consumer groups: list, describe, lag, reset-offsets")
    gps = gp.add_subparsers(dest="action", required=True)
    gpls = gps.add_parser("list", parents=[verbose], help="the groups with members or offsets, a page at a time")
    gpls.add_argument("--limit", type=between(1, GROUP_LIST_MAX), default=GROUP_LIST_DEFAULT, metavar="N",
                      help=f"at most this many (1 to {GROUP_LIST_MAX:,}; default {GROUP_LIST_DEFAULT:,})")
    gpls.add_argument("--after", type=an_id, default=None, metavar="GROUP_ID",
                      help="only the group ids after this one: a previous answer's next_after")
    gpd = gps.add_parser("describe", parents=[verbose], help="a group's generation and members")
    gpd.add_argument("group_id", type=an_id)
    gpl = gps.add_parser("lag", parents=[verbose], help="a group's position and lag in records per partition of the "
                         "topics it consumes; null (unknown) where it has committed no offset")
    gpl.add_argument("group_id", type=an_id)
    gpr = gps.add_parser("reset-offsets", parents=[verbose],
                         help="set an inactive group's committed offsets in a topic, or in every topic it "
                         "consumes (kafka-consumer-groups --reset-offsets); the plan only, unless --execute")
    gpr.add_argument("group_id", type=an_id)
    which = gpr.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--all-topics", action="store_true",
                       help="every topic the group consumes: its members' subscriptions, the topics it has "
                       "committed offsets in or staged them in a transaction")
    gpr.add_argument("--partition", type=non_negative, action="append", default=[], metavar="N",
                     help="only this partition of --topic (repeatable); every partition of the topic by default")
    to = gpr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="each partition's log start")
    to.add_argument("--to-latest", action="store_true", help="each partition's log end")
    to.add_argument("--to-current", action="store_true",
                    help="the committed offset, unmoved (the log end where there is none): with --dry-run, "
                    "where the group is")
    to.add_argument("--to-offset", type=non_negative, metavar="OFFSET",
                    help="this offset, moved into [log start, log end]")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (negative: back), moved into [log start, log end]; "
                    "refused for a partition without a committed offset")
    to.add_argument("--to-datetime", metavar="TIME",
                    help="the first record at or after TIME, ISO 8601 (UTC when no zone is given), e.g. "
                    "2026-11-28T09:30:00Z; the log end if none")
    gpr.add_argument("--read-order", choices=[o.value for o in ReadOrder],
                     help="whose readers start from the offsets: commit (HTTP readers, Spark: commit positions) or "
                     "offset (Kafka consumers: Kafka's offsets); by default each keeps the order of the offset it "
                     "replaces. Name it to move a group between doors")
    run = gpr.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the offsets")
    run.add_argument("--dry-run", action="store_true", help="print the plan, commit nothing (the default)")
    gp.set_defaults(func=groups)
