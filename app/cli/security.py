"""Who may do what, from the command line: principals and their API keys, ACLs, and the
PostgreSQL roles that read the committed log or append in the application's transaction
(grant-reader, revoke-reader, grant-appender, revoke-appender)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from app.cli.common import EXIT_USAGE, Command, CommandError, open_existing, open_services, operator, print_json
from app.settings import Settings


def principals(settings: Settings, args: argparse.Namespace) -> int:
    """API keys, against the configured database. `create` prints the key once."""
    services = open_services(settings)
    service = services.security
    try:
        if args.action == "create":
            issued = service.create_api_key(args.principal, by=operator())
            out: object = {"principal": issued.principal, "key_id": issued.key_id, "api_key": issued.api_key,
                           "created_ms": issued.created_ms}
            print("outbox: store this API key now: it is not shown again, only a hash of it is kept",
                  file=sys.stderr)
        elif args.action == "list":
            # GET /v1/principals' shape: each principal once, with its keys.
            by_principal: dict[str, list[dict]] = {}  # type: ignore[type-arg]
            for k in service.list_api_keys(args.principal):
                by_principal.setdefault(k.principal, []).append(
                    {"key_id": k.key_id, "created_ms": k.created_ms, "revoked_ms": k.revoked_ms,
                     "scram_credentials": bool(k.scram)})
            out = {"principals": [{"principal": p, "api_keys": keys} for p, keys in by_principal.items()]}
        else:
            revoked = service.revoke_api_keys(by=operator(), principal=args.principal, key_id=args.key_id)
            if not revoked:
                # The refusal DELETE /v1/principals/{principal}/api-keys/{key_id} answers, code and all.
                from app.domain.acl import principal_name
                from app.domain.errors import ResourceNotFound

                which = f"API key {args.key_id!r}" if args.key_id else "API keys"
                raise ResourceNotFound(f"{principal_name(args.principal)} has no live {which}")
            out = {"revoked": revoked}
    finally:
        services.db.dispose()
    print_json(out)
    return 0


def key_id(text: str) -> str:
    """--key-id, checked before anything is asked, against the rule the service applies
    (app.services.security.is_key_id): a malformed id is the command line's mistake, with or
    without --url, and not a refusal of the service or a key the database does not have."""
    from app.services.security import KEY_ID_MAX_LENGTH, is_key_id

    if not is_key_id(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an API key id: 1 to {KEY_ID_MAX_LENGTH} lowercase hex "
                                         "digits, as `outbox principals list` shows them")
    return text


def acl_bindings(args: argparse.Namespace) -> list:  # type: ignore[type-arg]
    """kafka-acls.sh's way: every principal × operation × resource named."""
    from app.domain.acl import CLUSTER_NAME, AclBinding, Operation, PatternType, Permission, ResourceType, principal_name

    pattern = PatternType(args.resource_pattern_type)
    resources = [(ResourceType.TOPIC, t) for t in args.topic] + [(ResourceType.GROUP, g) for g in args.group] \
        + [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id] \
        + ([(ResourceType.CLUSTER, CLUSTER_NAME)] if args.cluster else [])
    # As in kafka-acls.sh, the pattern type applies to every resource named. With a prefix for
    # one kind and a name for another (a transactional id prefix beside a topic) that would
    # also grant every topic whose name starts with the topic's: refused, so that a binding is
    # prefixed only where the operator meant it.
    prefixable = [flag for flag, named in (("--topic", args.topic), ("--group", args.group),
                                           ("--transactional-id", args.transactional_id)) if named]
    if pattern is PatternType.PREFIXED and len(prefixable) > 1:
        raise CommandError(f"--resource-pattern-type prefixed would make {' and '.join(prefixable)} all prefixes: "
                           "name one kind of resource per command, and give --resource-pattern-type prefixed "
                           "only to the one whose names are prefixes", EXIT_USAGE)
    if pattern is PatternType.PREFIXED and args.cluster and not prefixable:
        # The cluster resource is literal: the flag would do nothing.
        raise CommandError("--resource-pattern-type prefixed applies to --topic, --group or --transactional-id; "
                           "the cluster resource (--cluster) is literal", EXIT_USAGE)
    principals = [(principal_name(p), Permission.ALLOW) for p in args.allow_principal] \
        + [(principal_name(p), Permission.DENY) for p in args.deny_principal]
    if not resources or not principals or not args.operation:
        raise CommandError("name at least one --allow-principal or --deny-principal, one --operation, and one of "
                           "--topic, --group, --transactional-id, --cluster", EXIT_USAGE)
    return [AclBinding(principal, rtype, name, PatternType.LITERAL if rtype is ResourceType.CLUSTER else pattern,
                       Operation(op), permission)
            for principal, permission in principals for rtype, name in resources for op in args.operation]


def binding_json(b) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """An ACL binding as the HTTP API writes one."""
    return {"principal": b.principal, "resource_type": b.resource_type.value, "resource_name": b.resource_name,
            "pattern_type": b.pattern_type.value, "operation": b.operation.value, "permission": b.permission.value}


def acl_list_filter(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """`acls list`'s flags as the DescribeAcls filter: a principal, and one resource (the
    cluster by its type alone)."""
    from app.domain.acl import AclFilter, ResourceType, principal_name

    named = [(ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
             (ResourceType.TRANSACTIONAL_ID, args.transactional_id)]
    rtype, name = next(((t, n) for t, n in named if n is not None), (None, None))
    if args.cluster:
        rtype = ResourceType.CLUSTER
    return AclFilter(principal=None if args.principal is None else principal_name(args.principal),
                     resource_type=rtype, resource_name=name)


def acls(settings: Settings, args: argparse.Namespace) -> int:
    """ACL bindings, against the configured database (like kafka-acls.sh), in the HTTP API's
    shapes (POST, GET and DELETE /v1/acls)."""
    from app.domain.acl import AclFilter

    bindings = acl_bindings(args) if args.action in ("add", "remove") else []  # checked before the database
    services = open_services(settings)
    service = services.security
    try:
        if args.action == "add":
            added = service.add_acls(bindings, by=operator())
            out: object = {"acls": [{**binding_json(b), "created": new} for b, new in zip(bindings, added, strict=True)]}
        elif args.action == "list":
            out = {"acls": [binding_json(b) for b in service.list_acls(acl_list_filter(args))]}
        else:
            removed = []
            for b in bindings:
                removed += service.remove_acls(
                    AclFilter(b.principal, b.resource_type, b.resource_name, b.pattern_type, b.operation,
                              b.permission), by=operator())
            out = {"deleted": [binding_json(b) for b in removed]}
    finally:
        services.db.dispose()
    print_json(out)
    return 0


@contextmanager
def _role_refusals() -> Iterator[None]:
    """PostgreSQL's refusal of what a role command asked (SQLSTATE class 42: a role that does
    not exist, a reserved role name, no right to create roles or grant) as one line in the
    server's words: the command's mistake, answered with the database's, and not the
    "database unavailable" main gives the errors it cannot place."""
    import psycopg

    from app.domain.errors import first_line

    try:
        yield
    except psycopg.Error as e:
        if not (e.sqlstate or "").startswith("42"):
            raise
        raise CommandError(first_line(e)) from e


def grant_reader(settings: Settings, args: argparse.Namespace) -> int:
    """PostgreSQL: a role that may read the committed_records view and nothing else (Spark's)."""
    from app.storage import roles

    if settings.is_sqlite:
        raise CommandError("grant-reader is for PostgreSQL: an SQLite file has no roles; give a Spark job a "
                           "read-only copy or open it read-only (docs/SPARK.md)", EXIT_USAGE)
    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    db = open_existing(settings, pool_size=1)
    try:
        with _role_refusals():
            created = roles.grant_reader(db.engine, args.role, password=password)
    finally:
        db.dispose()
    print(f"{'created role' if created else 'role'} {args.role}: SELECT on committed_records and its partitions' "
          "views only")
    return 0


def revoke_reader(settings: Settings, args: argparse.Namespace) -> int:
    """PostgreSQL: take back what grant-reader gave, every log partition's view included."""
    from app.storage import roles

    if settings.is_sqlite:
        raise CommandError("revoke-reader is for PostgreSQL: an SQLite file has no roles", EXIT_USAGE)
    db = open_existing(settings, pool_size=1)
    try:
        with _role_refusals():
            roles.revoke_reader(db.engine, args.role)
    finally:
        db.dispose()
    print(f"role {args.role}: no SELECT on committed_records or its partitions' views")
    return 0


def appender(settings: Settings, args: argparse.Namespace) -> int:
    """PostgreSQL: which roles may call outbox.append in their own transactions, topic by topic."""
    import json

    from app.storage import roles

    if settings.is_sqlite:
        raise CommandError(f"{args.command} is for PostgreSQL: an SQLite file has no roles (whoever can write the "
                           "file can append to it)", EXIT_USAGE)
    from app.domain.acl import WILDCARD_RESOURCE

    topics = [*args.topic, *([WILDCARD_RESOURCE] if args.all_topics else [])]
    granting = args.command == "grant-appender"
    if granting and not (topics or args.topic_prefix):
        raise CommandError("name what the role may append to: --topic NAME, --topic-prefix PREFIX or --all-topics",
                           EXIT_USAGE)
    if granting:
        _check_appended_names(args.topic, args.topic_prefix)
    else:
        _check_revoked_stars(args.topic, args.topic_prefix)
    password = sys.stdin.readline().rstrip("\n") if granting and args.password_stdin else None
    db = open_existing(settings, pool_size=1)
    try:
        with _role_refusals():
            if granting:
                created = roles.grant_appender(db.engine, args.role, topics=topics, prefixes=args.topic_prefix,
                                               password=password)
            else:
                roles.revoke_appender(db.engine, args.role, topics=topics, prefixes=args.topic_prefix)
        grants = roles.appender_grants(db.engine, args.role)
    finally:
        db.dispose()
    # One line of JSON, whether the role was made or not: a script reads it whole (a line of
    # text before it, "created role …", broke `| jq`).
    print(json.dumps({"role": args.role, **({"created": created} if granting else {}), "may_append_to": [
        {"topic": topic, "pattern_type": pattern} for _, topic, pattern in grants]}))
    return 0


def _check_revoked_stars(topics: list[str], prefixes: list[str]) -> None:
    """revoke-appender's '*', which grant-appender refuses as a name. --topic '*' is exactly what
    --all-topics revokes (the one literal '*' row of outbox.append_grants, every topic): done, and
    said, for a caller who may have meant a topic of that name and would otherwise not learn that
    the grant of every topic went. --topic-prefix '*' names no grant (the table's CHECK admits a
    '*' of kind literal only) and would take back nothing without a word: a usage error."""
    from app.domain.acl import WILDCARD_RESOURCE

    if WILDCARD_RESOURCE in prefixes:
        raise CommandError("--topic-prefix '*' names no grant: for the grant of every topic say --all-topics",
                           EXIT_USAGE)
    if WILDCARD_RESOURCE in topics:
        print("outbox: --topic '*' is --all-topics: it takes back the grant of every topic (no grant names a topic "
              "called '*' alone)", file=sys.stderr)


def _check_appended_names(topics: list[str], prefixes: list[str]) -> None:
    """A usage error, before the database is asked, for a --topic no topic can be addressed by,
    or a --topic-prefix no topic's name can start with (the empty one: outbox.append_grants'
    CHECK refused it, which read as an unavailable database). The address rule, not a new
    topic's (app.domain.topic_names): it is the one every existing topic's name keeps, and a
    non-empty beginning of such a name keeps it too. And '*', which outbox.append reads as every
    topic in a grant of either kind: said so, it granted every topic as --all-topics does,
    where the caller may have meant a topic of that name."""
    from app.domain.acl import WILDCARD_RESOURCE
    from app.domain.errors import InvalidRequest
    from app.domain.topic_names import TOPIC_NAME_MAX_LENGTH, check_topic_address

    for flag, names in (("--topic", topics), ("--topic-prefix", prefixes)):
        for name in names:
            if name == WILDCARD_RESOURCE:
                raise CommandError(f"{flag} {name!r} would mean every topic; say --all-topics for that", EXIT_USAGE)
            try:
                check_topic_address(name)
            except InvalidRequest:
                raise CommandError(f"{flag} {name!r}: no topic's name {'is' if flag == '--topic' else 'starts with'} "
                                   f"that; a topic's name is 1 to {TOPIC_NAME_MAX_LENGTH} characters without '/' "
                                   "or control characters", EXIT_USAGE) from None


def add_commands(command: Command, verbose: argparse.ArgumentParser) -> None:
    from app.domain.acl import Operation, PatternType

    pr = command("principals", help="API keys: create (prints the key once), list, revoke")
    prs = pr.add_subparsers(dest="action", required=True)
    prc = prs.add_parser("create", parents=[verbose], help="a new API key for PRINCIPAL (User:<name>, or <name>)")
    prc.add_argument("principal")
    prl = prs.add_parser("list", parents=[verbose], help="API key ids by principal (never the keys)")
    prl.add_argument("principal", nargs="?", default=None)
    prr = prs.add_parser("revoke", parents=[verbose], help="revoke PRINCIPAL's API keys, or one with --key-id")
    prr.add_argument("principal")
    prr.add_argument("--key-id", type=key_id, default=None)
    pr.set_defaults(func=principals)
    ac = command("acls", help="ACL bindings: add, list, remove (like kafka-acls.sh)")
    acs = ac.add_subparsers(dest="action", required=True)
    for action, text in (("add", "allow or deny principals operations on resources"),
                         ("remove", "remove the bindings named (the same flags as add)")):
        a = acs.add_parser(action, parents=[verbose], help=text)
        a.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                       choices=[op.value for op in Operation])
        a.add_argument("--topic", action="append", default=[])
        a.add_argument("--group", action="append", default=[])
        a.add_argument("--transactional-id", action="append", default=[])
        a.add_argument("--cluster", action="store_true")
        a.add_argument("--resource-pattern-type", choices=[p.value for p in PatternType],
                       default=PatternType.LITERAL.value,
                       help="applies to every --topic, --group and --transactional-id named (as in kafka-acls.sh); "
                       "prefixed takes one kind of resource per command")
    acl_list = acs.add_parser("list", parents=[verbose], help="the bindings, all or of one principal or resource")
    acl_list.add_argument("--principal", default=None)
    which = acl_list.add_mutually_exclusive_group()
    which.add_argument("--topic", default=None)
    which.add_argument("--group", default=None)
    which.add_argument("--transactional-id", default=None)
    which.add_argument("--cluster", action="store_true")
    ac.set_defaults(func=acls)
    gr = command("grant-reader", help="PostgreSQL: create or grant ROLE read access to committed_records and its partition views only")
    gr.add_argument("role", help="the PostgreSQL role to grant, created if it does not exist")
    gr.add_argument("--password-stdin", action="store_true",
                    help="create the role with LOGIN and the password read from standard input")
    gr.set_defaults(func=grant_reader)
    rr = command("revoke-reader", help="PostgreSQL: take back from ROLE what grant-reader gave, every partition's "
                 "view included (a REVOKE of committed_records alone leaves those)")
    rr.add_argument("role", help="the PostgreSQL role grant-reader was given")
    rr.set_defaults(func=revoke_reader)
    for name, verb in (("grant-appender", "create or grant ROLE"), ("revoke-appender", "take back from ROLE")):
        ap = command(name, help=f"PostgreSQL: {verb} the right to call outbox.append for these topics "
                     "(revoke-appender with no topic: every topic, and EXECUTE on outbox.append)")
        ap.add_argument("role", help="the PostgreSQL role to grant, created if it does not exist"
                        if name == "grant-appender" else "the PostgreSQL role grant-appender was given")
        ap.add_argument("--topic", action="append", default=[], help="a topic's name (repeatable)")
        ap.add_argument("--topic-prefix", action="append", default=[],
                        help="every topic whose name starts with it (repeatable)")
        ap.add_argument("--all-topics", action="store_true", help="every topic, present and future")
        if name == "grant-appender":
            ap.add_argument("--password-stdin", action="store_true",
                            help="create the role with LOGIN and the password read from standard input")
        ap.set_defaults(func=appender)
