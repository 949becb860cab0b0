"""The admin commands over HTTP (`outbox --url URL topics list`), with an API key, as
`kafka-topics --bootstrap-server` administers a cluster it cannot open the disks of.

Each command is one call (or, for `acls remove`, one per binding) of the HTTP API's own
routes, and prints the answer: with --json, or when stdout is not a terminal, the answer's
JSON as the service sent it, on one line; on a terminal, a table. This module reaches the
service only through app.client's HTTP session: never the database, the services or storage
(the import contract `remote-cli-over-http` in pyproject.toml).

The API key is --api-key's, else --api-key-file's, else OUTBOX_API_KEY's (a flag given wins
over the environment); the README recommends the file or the variable, since argv is visible
to every user in `ps`. It is never printed nor logged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from app.cli.common import (
    EXIT_AUTH,
    EXIT_FAILURE,
    EXIT_USAGE,
    CommandError,
    config_pairs,
    offset_reset_request,
    print_json,
    warn_of_a_cut_list,
    warn_of_a_plan_only,
)
from app.settings.addresses import host_name

# The HTTP client (httpx and app.client) is imported by the functions that call a service: every
# `outbox` command imports this module, and only the admin commands given --url need it (a tenth
# of a second of each other command's start-up, a `serve`'s included).

# The command groups that go over HTTP when a URL is given; every other command (serve,
# coordinator, migrate, backup, grant-reader, …) needs the database itself.
COMMANDS = frozenset({"topics", "groups", "transactions", "acls", "principals"})
URL_VARIABLE = "OUTBOX_URL"
API_KEY_VARIABLE = "OUTBOX_API_KEY"
# The HTTP statuses whose refusal is about who is calling, not about the command (EXIT_AUTH).
AUTH_STATUSES = (401, 403)
# Only the transport's own error has this code and no status (app.client.http.Session.call).
_TRANSPORT_ERROR = "NETWORK_EXCEPTION"
# The service's answer for a path no route matches (app.api.errors): every path this module
# calls is a route, so the URL names something else (a path after the address, say).
_NO_ROUTE = "NOT_FOUND"
TIMEOUT_S = 30.0  # the client's own request timeout (app.client.http.Session)

Answer = Any  # a decoded JSON answer, or None for 204
Table = Callable[[Any], list[str]]


def api_key(args: argparse.Namespace) -> str | None:
    if args.api_key is not None:
        return args.api_key
    if args.api_key_file is not None:
        try:
            key = Path(args.api_key_file).read_text().strip()
        except OSError as e:
            raise CommandError(f"--api-key-file: {e.strerror}: {args.api_key_file}", EXIT_USAGE) from None
        if not key:
            raise CommandError(f"--api-key-file: {args.api_key_file} is empty", EXIT_USAGE)
        if "\n" in key:
            # Sent as it is, the HTTP library would refuse the header and print it, key and all.
            raise CommandError(f"--api-key-file: {args.api_key_file} holds more than one line: "
                               "give a file with the key alone", EXIT_USAGE)
        return key
    return os.environ.get(API_KEY_VARIABLE) or None


def _key_is_a_path(args: argparse.Namespace, key: str | None) -> bool:
    """The key came from OUTBOX_API_KEY, is no API key, and names a file: a path put where the
    key belongs. A key (outbox_…) is never looked at as a path."""
    if key is None or args.api_key is not None or args.api_key_file is not None or key.startswith("outbox_"):
        return False
    try:
        return Path(key).expanduser().is_file()
    except (OSError, ValueError):  # a name too long, a NUL: not a path
        return False


def check_url(url: str, source: str) -> None:
    """Refuse (EXIT_USAGE) a service address, given by `source` (--url or OUTBOX_URL), that no
    request could be sent to: the HTTP library would raise an InvalidURL or a UnicodeError at
    the first request, or try a port no service can have and report a refused connection."""
    import httpx

    from app.client.http import shown_address

    def refused(problem: str) -> CommandError:
        return CommandError(f"{source} {shown_address(url)!r}: {problem}", EXIT_USAGE)

    if not url.startswith(("http://", "https://")):
        raise refused("give the service's http:// or https:// address, e.g. http://127.0.0.1:8000")
    after_host = re.search(r"[/?#].*", url.partition("://")[2])
    if after_host and "@" in after_host.group():
        # A password holding "/", "?" or "#" as it is ends the host there: the request would go
        # to a host named by the user, with the rest of the password in its path.
        raise refused("an '@' after the host: write the user's or password's '/', '?', '#' and '@' "
                      "as %2F, %3F, %23 and %40")
    try:
        parts = urlsplit(url)
    except ValueError:  # a bracket left open, or an IPv6 address in brackets that is not one
        raise refused("not an address, e.g. http://127.0.0.1:8000 (an IPv6 host goes in brackets: "
                      "http://[::1]:8000)") from None
    if not parts.hostname:
        raise refused("no host, e.g. http://127.0.0.1:8000")
    try:
        host_name(parts.hostname)
    except ValueError as e:
        raise refused(str(e)) from None
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        port = 0
    if port == 0:
        raise refused("the port must be a number from 1 to 65535")
    try:
        # .host decodes an "xn--" label as the request would: the idna package refuses some
        # (`xn--.com`) that Python's own codec, which host_name asks, takes.
        httpx.URL(url).host
    except httpx.InvalidURL as e:  # anything else the HTTP library will not send to
        raise refused(str(e)) from None
    except UnicodeError as e:
        raise refused(f"{parts.hostname!r} is not a valid host name ({e})") from None


class Remote:
    """One service, called as the signed-in principal; a refusal or an unreachable service
    becomes the CommandError `main` prints as one line."""

    def __init__(self, url: str, key: str | None, timeout_s: float, *, key_is_a_path: bool = False) -> None:
        from app.client.http import Session, credentials, shown_address

        self.url = url.rstrip("/")
        self.where = shown_address(self.url)
        self.timeout_s = timeout_s
        self.keyless = key is None
        # OUTBOX_API_KEY naming the key's file rather than holding the key: sent as a key, and
        # refused with a message about bearer tokens that does not say what to change.
        self.key_is_a_path = key_is_a_path
        self.session = Session(self.url, request_timeout_s=timeout_s, auth=credentials(key, None))

    def call(self, method: str, path: str, *, body: Any = None, params: dict | None = None) -> Answer:
        import httpx

        from app.client.errors import ClientError
        from app.client.http import FOREIGN_ERROR_PREFIX

        try:
            # One attempt: an operator's command reports what happened rather than retrying
            # behind their back (a 503 SCHEMA_NOT_MIGRATED would otherwise wait out a deadline).
            return self.session.call(method, path, json=body, params=params, deadline_s=0)
        except json.JSONDecodeError:
            raise CommandError(f"{self.where} answered {method} {path} with something that is not JSON: {_NOT_OUTBOX}") \
                from None
        except ClientError as e:
            if e.error_code.startswith(FOREIGN_ERROR_PREFIX):
                # Whatever answered is not the service (a web server, a proxy's error page):
                # its body would be a page of HTML on the operator's one line.
                raise CommandError(f"{self.where} answered {method} {path} with HTTP {e.status} and no outbox "
                                   f"error: {_foreign(e.status)}",
                                   EXIT_AUTH if e.status in AUTH_STATUSES else EXIT_FAILURE) from None
            if e.error_code == _NO_ROUTE:
                raise CommandError(f"{e.error_code}: the service at {self.where} has no route {path}: {_NOT_OUTBOX}",
                                   EXIT_FAILURE) from None
            if e.status is None and e.error_code == _TRANSPORT_ERROR:
                if isinstance(e.__cause__, httpx.TimeoutException):
                    # Connected (or still connecting) but no answer: not the same fault as a
                    # refused connection, and --timeout is what the operator can change.
                    raise CommandError(f"the service at {self.where} did not answer within {self.timeout_s:g}s "
                                       "(--timeout)") from None
                raise CommandError(f"cannot reach the service at {self.where} (--url, OUTBOX_URL): {e.message}"
                                   f"{_plain_http_hint(e, self.url)}") from None
            status = EXIT_AUTH if e.status in AUTH_STATUSES else EXIT_FAILURE
            line = f"{e.error_code}: {e.message}"
            if e.status == 401 and self.keyless:
                # The service's message names the HTTP header it wants; the operator of this
                # command sets neither headers nor knows which of the key's sources was empty.
                line += f"; no API key was given: set {API_KEY_VARIABLE} or give --api-key-file FILE"
            elif e.status == 401 and self.key_is_a_path:
                # Not the path itself: the CLI masks whatever the variable holds in its output.
                line += (f"; {API_KEY_VARIABLE} names a file: it holds the key itself "
                         f"(export {API_KEY_VARIABLE}=\"$(cat FILE)\"), or give the file with --api-key-file FILE")
            raise CommandError(line, status) from None

    def close(self) -> None:
        self.session.close()


_NOT_OUTBOX = "is --url the outbox service's address, e.g. http://127.0.0.1:8000 (no path)?"


def _plain_http_hint(e: BaseException, url: str) -> str:
    """A TLS handshake answered with something that is not TLS (OpenSSL's WRONG_VERSION_NUMBER)
    is most often an https:// URL for a service that serves plain HTTP (no OUTBOX_TLS_CERT_FILE):
    OpenSSL's words alone do not say so."""
    if not url.lower().startswith("https://"):
        return ""
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, ssl.SSLError) and cause.reason == "WRONG_VERSION_NUMBER":
            return f"; the service may serve plain HTTP: try http://{url[len('https://'):]}"
        cause = cause.__cause__ or cause.__context__
    return ""


def _foreign(status: int | None) -> str:
    """What an answer that is not the service's tells the operator, by its status."""
    if status in AUTH_STATUSES:
        # An authenticating proxy in front of the service: still a matter of who is calling
        # (EXIT_AUTH), and the address may well be right.
        return ("something in front of the service (an authenticating proxy?) "
                + ("asked for credentials" if status == 401 else "refused the request"))
    if status is not None and status >= 500:
        # A proxy or load balancer whose service behind it is down or failing: the address is
        # the proxy's, and likely right.
        return "something in front of the service (a proxy, a load balancer?) answered it: is the service up behind it?"
    # A page (2xx), a redirect, no such path (404): another server at that address.
    return _NOT_OUTBOX


def segment(text: str) -> str:
    """A name as one path segment: a topic named `a/b` or `a?b` stays one."""
    return quote(text, safe="")


# --- the commands: (remote, args) → (answer, its table) ----------------------------------------


def _topics(remote: Remote, args: argparse.Namespace) -> tuple[Answer, Table]:
    from app.domain.topic_config import ConfigTextError, parse_config_text

    try:
        # Typed here as the direct command types it, so the service gets numbers and booleans.
        config = parse_config_text(config_pairs(args)) if args.action in ("create", "alter") else {}
    except ConfigTextError as e:
        raise CommandError(f"config: {e}", EXIT_USAGE) from None
    config = {k: getattr(v, "value", v) for k, v in config.items()}  # enums as their JSON value
    path = f"/v1/topics/{segment(args.topic)}" if args.action != "list" else "/v1/topics"
    if args.action == "list":
        return remote.call("GET", path), _topic_list_table
    if args.action == "describe":
        return remote.call("GET", path), _topic_table
    if args.action == "create":
        return remote.call("POST", "/v1/topics", body={"name": args.topic, "partitions": args.partitions,
                                                       "config": config}), _topic_table
    if args.action == "alter":
        return remote.call("PATCH", path, body={"config": config}), _topic_table
    if args.action == "add-partitions":
        return remote.call("POST", f"{path}/partitions", body={"partition_count": args.partition_count}), _topic_table
    if args.action == "delete":
        return remote.call("DELETE", path), _nothing
    return remote.call("POST", f"{path}/partitions/{args.partition}/delete-records",
                       body={"offset": args.offset}), _delete_records_table


def _groups(remote: Remote, args: argparse.Namespace) -> tuple[Answer, Table]:
    if args.action == "list":
        params = {"limit": args.limit, "after": args.after}
        return remote.call("GET", "/v1/groups", params={k: v for k, v in params.items() if v is not None}), \
            _group_list_table
    path = f"/v1/groups/{segment(args.group_id)}"
    if args.action == "describe":
        return remote.call("GET", path), _group_table
    if args.action == "lag":
        return remote.call("GET", f"{path}/lag"), _lag_table
    answer = remote.call("POST", f"{path}/offsets/reset", body=offset_reset_request(args))
    warn_of_a_plan_only(args)
    return answer, _reset_table


def _transactions(remote: Remote, args: argparse.Namespace) -> tuple[Answer, Table]:
    if args.action in ("list", "hanging"):
        params: dict[str, Any] = {"transactional_id_prefix": args.transactional_id_prefix, "limit": args.limit,
                                  "after": args.after}
        if args.action == "hanging":
            params["hanging"] = "true"
        else:
            params.update(state=args.state or None, min_age_ms=args.min_age_ms)
        answer = remote.call("GET", "/v1/transactions", params={k: v for k, v in params.items() if v is not None})
        warn_of_a_cut_list(answer)
        return answer, _transaction_list_table
    if args.action == "describe":
        return remote.call("GET", f"/v1/transactions/{segment(args.transactional_id)}"), _transaction_table
    return remote.call("POST", f"/v1/admin/transactions/{segment(args.transactional_id)}/abort",
                       params={"force_prepared": "true"} if args.force_prepared else None), _transaction_table


def _acls(remote: Remote, args: argparse.Namespace) -> tuple[Answer, Table]:
    from app.cli.security import acl_bindings, acl_list_filter, binding_json

    if args.action == "list":
        match = acl_list_filter(args)
        params = {"principal": match.principal, "resource_name": match.resource_name,
                  "resource_type": None if match.resource_type is None else match.resource_type.value}
        return remote.call("GET", "/v1/acls", params={k: v for k, v in params.items() if v is not None}), \
            _acl_table("acls")
    bindings = [binding_json(b) for b in acl_bindings(args)]
    if args.action == "add":
        return remote.call("POST", "/v1/acls", body={"acls": bindings}), _acl_table("acls")
    deleted: list[Any] = []
    for b in bindings:  # DeleteAcls takes one filter; each binding named is its own exact one
        deleted += remote.call("DELETE", "/v1/acls", params=b)["deleted"]
    return {"deleted": deleted}, _acl_table("deleted")


def _principals(remote: Remote, args: argparse.Namespace) -> tuple[Answer, Table]:
    from app.domain.acl import principal_name

    if args.action == "list":
        answer = remote.call("GET", "/v1/principals")
        if args.principal is not None:  # the route lists them all; the answer keeps its shape
            answer["principals"] = [p for p in answer["principals"] if p["principal"] == principal_name(args.principal)]
        return answer, _principal_table
    path = f"/v1/principals/{segment(principal_name(args.principal))}/api-keys"
    if args.action == "create":
        created = remote.call("POST", path)
        print("outbox: store this API key now: it is not shown again, only a hash of it is kept", file=sys.stderr)
        return created, _created_key_table
    if args.key_id is None:
        raise CommandError("over HTTP, revoke names the key: --key-id ID (`outbox principals list` shows them)",
                           EXIT_USAGE)
    return remote.call("DELETE", f"{path}/{segment(args.key_id)}"), lambda a: [f"revoked {k}" for k in a["revoked"]]


_RUN = {"topics": _topics, "groups": _groups, "transactions": _transactions, "acls": _acls,
        "principals": _principals}


def run(args: argparse.Namespace) -> int:
    # httpx logs every request at INFO: on an operator's terminal that is a second line per
    # command in stderr, and a script reading stderr for the one error line would get it too.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    key = api_key(args)
    remote = Remote(args.url, key, TIMEOUT_S if args.timeout_s is None else args.timeout_s,
                    key_is_a_path=_key_is_a_path(args, key))
    try:
        answer, table = _RUN[args.command](remote, args)
    finally:
        remote.close()
    emit(answer, table, args.output)
    return 0


def emit(answer: Answer, table: Table, output: str) -> None:
    """The answer as JSON on one line (the service's shape, for scripts and `jq`) or as a table
    (for a person at a terminal); a 204's empty answer prints nothing either way."""
    if answer is None:
        return
    as_table = output == "table" or (output == "auto" and sys.stdout.isatty())
    if as_table:
        print("\n".join(table(answer)))
    else:
        print_json(answer)


# --- tables -----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    # As kafka-consumer-groups prints an unknown offset or lag.
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(_cell(v) for v in value) or "-"
    return str(value)


def columns(header: list[str], rows: list[list[Any]]) -> list[str]:
    """Left-aligned columns two spaces apart, a header line first (kafka-consumer-groups' look)."""
    cells = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def _nothing(answer: Answer) -> list[str]:
    return []


_CONFIG_COLUMNS = ("cleanup_policy", "retention_ms", "retention_bytes")


def _topic_list_table(a: Answer) -> list[str]:
    # A topic's config is null to a principal that may not describe its configs: "-" in each of
    # its columns. Its value format is answered apart from the config, to whoever sees the topic.
    return columns(["TOPIC", "PARTITIONS", "CLEANUP-POLICY", "RETENTION-MS", "RETENTION-BYTES", "VALUE-FORMAT"],
                   [[t["name"], t["partition_count"],
                     *(("-",) * len(_CONFIG_COLUMNS) if t["config"] is None
                       else (t["config"][k] for k in _CONFIG_COLUMNS)), t["value_format"]] for t in a["topics"]])


def _topic_table(a: Answer) -> list[str]:
    # kafka-topics --describe: the topic on one line, its config in the answer's order (the schema's
    # fields), then one line per partition in the answer's order, by partition number
    # (storage.topics.describe_partitions orders them; README, Topic administration, says so).
    configs = "-" if a["config"] is None else ",".join(f"{k}={_cell(v)}" for k, v in a["config"].items())
    return [f"Topic: {a['name']}\tPartitionCount: {a['partition_count']}\tConfigs: {configs}"] + [
        f"\tTopic: {a['name']}\tPartition: {p['partition']}\tLogStartOffset: {p['log_start_offset']}\t"
        f"LastStableOffset: {p['last_stable_offset']}\tLogEndOffset: {p['log_end_offset']}\t"
        f"Records: {p['record_count']}\tBytes: {p['size_bytes']}"
        for p in a["partitions"]]


def _delete_records_table(a: Answer) -> list[str]:
    return columns(["TOPIC", "PARTITION", "LOG-START-OFFSET"], [[a["topic"], a["partition"], a["log_start_offset"]]])


def _group_list_table(a: Answer) -> list[str]:
    lines = columns(["GROUP", "GENERATION", "MEMBERS"],
                    [[g["group_id"], g["generation_id"], g["member_count"]] for g in a["groups"]])
    # A cut page would otherwise read as the whole list.
    if a.get("next_after") is not None:
        lines += ["", f"more may follow: add --after {a['next_after']} for the next ones"]
    return lines


def _group_table(a: Answer) -> list[str]:
    if not a["members"]:  # kafka-consumer-groups --describe --members' words for an Empty group
        return [f"Consumer group '{a['group_id']}' has no active members."]
    return columns(["GROUP", "GENERATION", "MEMBER-ID", "TOPICS", "ASSIGNMENT", "SESSION-TIMEOUT-MS",
                    "LAST-HEARTBEAT-UTC"],
                   [[a["group_id"], a["generation_id"], m["member_id"], m["topics"],
                     [f"{tp['topic']}-{tp['partition']}" for tp in m["assignment"]], m["session_timeout_ms"],
                     _utc(m["last_heartbeat_ms"])] for m in a["members"]])


def _utc(ms: int | None) -> str | None:
    """A time in ms since the epoch as people read it (the JSON answer keeps the number)."""
    if ms is None:
        return None
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _lag_table(a: Answer) -> list[str]:
    # kafka-consumer-groups --describe, with the log start and last stable offset beside the end.
    # Its LOG-END-OFFSET is the high watermark, as in Kafka's tool (a read_uncommitted end
    # offset): the column keeps the name its users know, and shows the answer's high_watermark.
    return columns(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "READ-ORDER", "LOG-START-OFFSET",
                    "LAST-STABLE-OFFSET", "LOG-END-OFFSET", "LAG"],
                   [[a["group_id"], p["topic"], p["partition"], p["committed_offset"], p["read_order"],
                     p["log_start_offset"],
                     p["last_stable_offset"], p["high_watermark"],
                     p["lag"] if p["lag"] is None or p["lag_exact"] else f">={p['lag']}"] for p in a["partitions"]])


def _reset_table(a: Answer) -> list[str]:
    # kafka-consumer-groups --reset-offsets' columns, with the offset it replaces beside, and
    # each offset's read order: a reset may keep the number and change what it means.
    return columns(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "CURRENT-ORDER", "NEW-OFFSET", "NEW-ORDER"],
                   [[a["group_id"], o["topic"], o["partition"], o["committed_offset"], o["committed_read_order"],
                     o["new_offset"], o["read_order"]] for o in a["offsets"]])


_TXN_HEADER = ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "PRODUCER-EPOCH", "TIMEOUT-MS", "AGE-MS"]


def _txn_row(t: dict[str, Any]) -> list[Any]:
    # Marked, as a list of open transactions is where an operator picks the ones to abort: a
    # Prepared one is its application's to decide (`abort` refuses it without --force-prepared).
    state = f'{t["state"]} (awaits application)' if t.get("awaits_application_decision") else t["state"]
    return [t["transactional_id"], state, t["producer_id"], t["producer_epoch"], t["transaction_timeout_ms"],
            t["age_ms"]]


def _transaction_list_table(a: Answer) -> list[str]:
    return columns(_TXN_HEADER, [_txn_row(t) for t in a["transactions"]])


def _transaction_table(a: Answer) -> list[str]:
    lines = columns(_TXN_HEADER, [_txn_row(a)])
    if a["partitions"]:
        lines += [""] + columns(["TOPIC", "PARTITION", "FIRST-OFFSET"],
                                [[p["topic"], p["partition"], p["first_offset"]] for p in a["partitions"]])
    if a["pending_offsets"]:
        lines += [""] + columns(["GROUP", "TOPIC", "PARTITION", "PENDING-OFFSET"],
                                [[o["group_id"], o["topic"], o["partition"], o["offset"]] for o in a["pending_offsets"]])
    return lines


def _acl_table(key: str) -> Table:
    def table(a: Answer) -> list[str]:
        rows = a[key]
        created = bool(rows) and "created" in rows[0]
        return columns(["PRINCIPAL", "PERMISSION", "OPERATION", "RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN-TYPE"]
                       + (["CREATED"] if created else []),
                       [[b["principal"], b["permission"], b["operation"], b["resource_type"], b["resource_name"],
                         b["pattern_type"]] + ([b["created"]] if created else []) for b in rows])
    return table


def _principal_table(a: Answer) -> list[str]:
    return columns(["PRINCIPAL", "KEY-ID", "CREATED-MS", "REVOKED-MS", "SCRAM"],
                   [[p["principal"], k["key_id"], k["created_ms"], k["revoked_ms"], k["scram_credentials"]]
                    for p in a["principals"] for k in p["api_keys"]])


def _created_key_table(a: Answer) -> list[str]:
    return columns(["PRINCIPAL", "KEY-ID", "CREATED-MS", "API-KEY"],
                   [[a["principal"], a["key_id"], a["created_ms"], a["api_key"]]])
