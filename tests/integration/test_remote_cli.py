"""`outbox --url URL …`: the admin commands against a served instance over HTTP, on SQLite and
PostgreSQL. Each command's JSON is the HTTP API's own answer; a refusal is one line on stderr
with the service's error code and an exit status saying which kind it was.

One database per backend and module, served by two in-process uvicorn servers on it: one with
authentication off, one with API keys (User:admin a super user, User:reader with no ACL). The
commands run in this process too (app.cli.main), so no test pays a Python start-up."""

from __future__ import annotations

import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import cli
from app.api.app import create_app
from app.cli.common import EXIT_AUTH, EXIT_FAILURE, EXIT_USAGE
from app.composition import Services
from app.domain.clock import system_clock
from app.settings import Settings
from app.storage import migrate
from app.storage.engine import Database, build_engine
from tests.conftest import ADMIN_URL, BACKENDS
from tests.e2e.conftest import START_TIMEOUT_S, free_port
from tests.helpers import batch, begin, create_topic, ident, init_producer, send, stand_in_http_server
from tests.outbox_command import logging_kept

STOP_TIMEOUT_S = 30  # how long a stopped server's (or listener's) thread is waited for


class _Server:
    """uvicorn in a thread of this process, on a port of its own."""

    def __init__(self, settings: Settings) -> None:
        self.port = free_port()
        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(STOP_TIMEOUT_S)


@dataclass
class Served:
    db_url: str
    open_url: str  # authentication off
    secured_url: str  # OUTBOX_AUTHENTICATION=api_key
    admin_key: str  # User:admin, a super user
    reader_key: str  # User:reader, no ACL

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.open_url)

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.secured_url, headers={"authorization": f"Bearer {self.admin_key}"})


@pytest.fixture(scope="module", params=BACKENDS)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("remote") / "outbox.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        db_url, drop = f"sqlite:///{path}", None
    else:
        name = f"outbox_remote_{uuid.uuid4().hex[:8]}"
        drop = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with drop.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        db_url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        migrate.upgrade(db_url)
    base = Settings(database_url=db_url, run_coordinator=False, auto_migrate=False, access_log=False)
    secured_settings = base.model_copy(update={"authentication": "api_key", "super_users": "User:admin"})
    services = Services.build(base, Database(build_engine(db_url, pool_size=1)), system_clock)
    keys = {p: services.security.create_api_key(p, by="test").api_key for p in ("User:admin", "User:reader")}
    services.db.dispose()
    servers = [_Server(base), _Server(secured_settings)]
    try:
        yield Served(db_url, servers[0].url, servers[1].url, keys["User:admin"], keys["User:reader"])
    finally:
        for s in servers:
            s.stop()
        if drop is not None:
            with drop.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            drop.dispose()


@dataclass
class Done:
    status: int
    out: str
    err: str

    @property
    def json(self):  # type: ignore[no-untyped-def]
        import json

        assert (self.status, self.err) == (0, ""), self.err
        assert self.out.count("\n") == 1, "one line of JSON"
        return json.loads(self.out)


@pytest.fixture
def outbox(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """`outbox ARGS…` in this process; stdout is not a terminal, so answers are JSON."""
    for name in ("OUTBOX_URL", "OUTBOX_API_KEY", "OUTBOX_DATABASE_URL", "OUTBOX_AUTHENTICATION"):
        monkeypatch.delenv(name, raising=False)
    # The servers log in this process too, to the stderr main() configures: only warnings.
    monkeypatch.setenv("OUTBOX_LOG_LEVEL", "warning")

    def run(*args: str) -> Done:
        capsys.readouterr()
        with logging_kept(monkeypatch):  # main() logs to the stderr captured for this test
            status = cli.main(list(args))
        captured = capsys.readouterr()
        return Done(status, captured.out, captured.err)

    return run


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# --- topics -----------------------------------------------------------------------------------


def test_topics_create_alter_add_partitions_and_describe_print_the_https_answers(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, url = _topic("t"), served.open_url
    http = served.http()

    created = outbox("--url", url, "topics", "create", name, "--partitions", "2", "--config", "retention_ms=1000").json
    assert (created["name"], created["partition_count"], created["config"]["retention_ms"]) == (name, 2, 1000)
    assert outbox("--url", url, "topics", "describe", name).json == http.get(f"/v1/topics/{name}").json() == created

    altered = outbox("--url", url, "topics", "alter", name, "check_expected_offsets=true",
                     "cleanup_policy=compact").json
    assert (altered["config"]["check_expected_offsets"], altered["config"]["cleanup_policy"]) == (True, "compact")
    grown = outbox("--url", url, "topics", "add-partitions", name, "3").json
    assert [p["partition"] for p in grown["partitions"]] == [0, 1, 2]
    assert http.get(f"/v1/topics/{name}").json() == grown
    listed = outbox("--url", url, "topics", "list").json
    assert listed == http.get("/v1/topics").json()
    assert name in [t["name"] for t in listed["topics"]]


def test_topics_delete_records_and_delete_answer_as_http_does(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, url = _topic("d"), served.open_url
    http = served.http()
    create_topic(http, name, 1)
    assert send(http, [batch(name, 0, ["a", "b", "c"])]).status_code == 200

    assert outbox("--url", url, "topics", "delete-records", name, "0", "2").json == {
        "topic": name, "partition": 0, "log_start_offset": 2}
    deleted = outbox("--url", url, "topics", "delete", name)

    assert (deleted.status, deleted.out, deleted.err) == (0, "", "")  # HTTP answers 204, no body
    assert http.get(f"/v1/topics/{name}").status_code == 404


def test_topics_describe_prints_kafka_topics_describe_lines_with_table(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name = _topic("v")
    http = served.http()
    create_topic(http, name, 2)
    assert send(http, [batch(name, 1, ["a", "b"])]).status_code == 200

    done = outbox("--url", served.open_url, "topics", "describe", name, "--table")

    assert (done.status, done.err) == (0, "")
    assert done.out.splitlines() == [
        f"Topic: {name}\tPartitionCount: 2\tConfigs: cleanup_policy=delete,retention_ms=604800000,"
        "retention_bytes=-1,delete_retention_ms=86400000,check_expected_offsets=false,max_message_bytes=1048588,"
        "value_format=json",
        f"\tTopic: {name}\tPartition: 0\tLogStartOffset: 0\tLastStableOffset: 0\tLogEndOffset: 0\tRecords: 0\tBytes: 0",
        f"\tTopic: {name}\tPartition: 1\tLogStartOffset: 0\tLastStableOffset: 2\tLogEndOffset: 2\tRecords: 2\tBytes: 6",
    ]


def test_an_unknown_topic_is_one_line_with_its_error_code_and_exit_status_1(served, outbox) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", served.open_url, "topics", "describe", "no-such-topic")

    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err == "outbox: error: UNKNOWN_TOPIC_OR_PARTITION: unknown topic 'no-such-topic'\n"


# --- groups -----------------------------------------------------------------------------------


def test_groups_list_describe_and_lag_print_the_https_answers_as_the_database_commands_do(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("g"), _topic("group")
    http = served.http()
    create_topic(http, name, 1)
    assert send(http, [batch(name, 0, ["o1", "o2", "o3"])]).status_code == 200
    member = http.post(f"/v1/groups/{group}/members", json={"topics": [name]}).json()["member_id"]
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": name, "partition": 0, "offset": 1}]}).status_code == 200

    remote = {action: outbox("--url", served.open_url, "groups", *action.split()).json
              for action in ("list", f"describe {group}", f"lag {group}")}
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = {action: outbox("groups", *action.split()).json for action in remote}

    assert remote["list"] == http.get("/v1/groups").json()
    assert remote[f"describe {group}"] == http.get(f"/v1/groups/{group}").json()
    assert [m["member_id"] for m in remote[f"describe {group}"]["members"]] == [member]
    assert remote[f"lag {group}"] == http.get(f"/v1/groups/{group}/lag").json()
    assert (remote[f"lag {group}"]["total_lag"], remote[f"lag {group}"]["partitions"][0]["lag"]) == (2, 2)
    assert direct == remote


def test_groups_lag_prints_kafka_consumer_groups_columns_with_table(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("l"), _topic("lagging")
    http = served.http()
    create_topic(http, name, 2)
    assert send(http, [batch(name, 0, ["o1", "o2"])]).status_code == 200
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": name, "partition": 0, "offset": 1}]}).status_code == 200
    assert http.post(f"/v1/groups/{group}/members", json={"topics": [name]}).status_code == 200

    done = outbox("--url", served.open_url, "groups", "lag", group, "--table")

    assert (done.status, done.err) == (0, "")
    g, t = group.ljust(len("GROUP")), name.ljust(len("TOPIC"))
    assert done.out.splitlines() == [
        f"{'GROUP'.ljust(len(g))}  {'TOPIC'.ljust(len(t))}  PARTITION  CURRENT-OFFSET  READ-ORDER  LOG-START-OFFSET  "
        "LAST-STABLE-OFFSET  LOG-END-OFFSET  LAG",
        f"{g}  {t}  0          1               commit      0                 2                   2               1",
        f"{g}  {t}  1          -               -           0                 0                   0               -",
    ]


def test_groups_describe_of_a_group_with_offsets_only_answers_as_http_and_says_it_has_no_members_with_table(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("o"), _topic("offsets-only")
    http = served.http()
    create_topic(http, name, 1)
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": name, "partition": 0, "offset": 0}]}).status_code == 200

    as_json = outbox("--url", served.open_url, "groups", "describe", group).json
    as_table = outbox("--url", served.open_url, "groups", "describe", group, "--table")

    assert as_json == http.get(f"/v1/groups/{group}").json() == {"group_id": group, "generation_id": None, "members": []}
    assert (as_table.status, as_table.err, as_table.out) == (0, "", f"Consumer group '{group}' has no active members.\n")


def test_groups_reset_offsets_plans_without_execute_and_commits_with_it_as_the_database_command_does(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("r"), _topic("resetting")
    http = served.http()
    create_topic(http, name, 2)
    assert send(http, [batch(name, 0, ["o1", "o2", "o3"])]).status_code == 200
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": name, "partition": 0, "offset": 3}]}).status_code == 200
    flags = ["groups", "reset-offsets", group, "--topic", name, "--to-offset", "1"]

    planned = outbox("--url", served.open_url, *flags)
    after_plan = http.get(f"/v1/groups/{group}/offsets").json()["offsets"]
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct_plan = outbox(*flags, "--dry-run").json
    monkeypatch.delenv("OUTBOX_DATABASE_URL")
    executed = outbox("--url", served.open_url, *flags, "--execute").json

    assert planned.err == ("outbox: the plan only, nothing is committed: add --execute to commit it (--dry-run to "
                           "say so without this warning)\n")
    planned.err = ""  # the answer is the rest
    expected = [{"topic": name, "partition": 0, "committed_offset": 3, "committed_read_order": "commit",
                 "new_offset": 1, "read_order": "commit"},
                {"topic": name, "partition": 1, "committed_offset": None, "committed_read_order": None,
                 "new_offset": 0, "read_order": "commit"}]
    assert planned.json == direct_plan == {"group_id": group, "dry_run": True, "offsets": expected}
    assert [o["offset"] for o in after_plan] == [3]
    assert executed == {"group_id": group, "dry_run": False, "offsets": expected}
    assert [(o["partition"], o["offset"]) for o in http.get(f"/v1/groups/{group}/offsets").json()["offsets"]] == [
        (0, 1), (1, 0)]


def test_a_refused_reset_plan_is_its_error_line_alone_over_http_and_directly(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The plan-only warning came first, as if there were a plan, then the refusal.
    flags = ["groups", "reset-offsets", _topic("nogroup"), "--topic", _topic("nosuch"), "--to-earliest"]

    over_http = outbox("--url", served.open_url, *flags)
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = outbox(*flags)

    for done in (over_http, direct):
        assert done.status == 1 and done.out == ""
        assert done.err.count("\n") == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in done.err, done.err
        assert "the plan only" not in done.err


def test_groups_reset_offsets_with_a_read_order_commits_the_offsets_in_it_over_http_and_directly(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("ro"), _topic("moving")
    http = served.http()
    create_topic(http, name, 3)
    assert send(http, [batch(name, 0, ["o1", "o2"])]).status_code == 200

    remote = outbox("--url", served.open_url, "groups", "reset-offsets", group, "--topic", name, "--partition", "0",
                    "--to-offset", "1", "--read-order", "offset", "--execute")
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = outbox("groups", "reset-offsets", group, "--topic", name, "--partition", "1", "--to-earliest",
                    "--read-order", "offset", "--execute")
    monkeypatch.delenv("OUTBOX_DATABASE_URL")

    assert (remote.status, direct.status) == (0, 0)
    # The answer to a commit shows each offset in the order it was committed in.
    answer = http.post(f"/v1/groups/{group}/offsets", json={"offsets": [{"topic": name, "partition": 2, "offset": 0}]})
    assert answer.status_code == 200, answer.text
    assert [(o["partition"], o["offset"], o["read_order"]) for o in answer.json()["offsets"]] == [
        (0, 1, "offset"), (1, 0, "offset"), (2, 0, "commit")]


def test_groups_reset_offsets_prints_kafka_consumer_groups_columns_with_table(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("rt"), _topic("grp")
    http = served.http()
    create_topic(http, name, 1)
    assert send(http, [batch(name, 0, ["o1", "o2"])]).status_code == 200

    done = outbox("--url", served.open_url, "groups", "reset-offsets", group, "--topic", name, "--to-latest",
                  "--execute", "--table")

    assert (done.status, done.err) == (0, "")
    g, t = group.ljust(len("GROUP")), name.ljust(len("TOPIC"))
    assert done.out.splitlines() == [
        f"{'GROUP'.ljust(len(g))}  {'TOPIC'.ljust(len(t))}  PARTITION  CURRENT-OFFSET  CURRENT-ORDER  NEW-OFFSET  "
        "NEW-ORDER",
        f"{g}  {t}  0          -               -              2           commit",
    ]


def test_groups_reset_offsets_of_a_group_with_members_is_one_line_and_exit_status_1(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("ra"), _topic("active")
    http = served.http()
    create_topic(http, name, 1)
    assert http.post(f"/v1/groups/{group}/members", json={"topics": [name]}).status_code == 200

    done = outbox("--url", served.open_url, "groups", "reset-offsets", group, "--topic", name, "--to-earliest",
                  "--execute")

    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err == (f"outbox: error: NON_EMPTY_GROUP: group {group!r} has 1 active member(s): its offsets are "
                        "reset only while it has none (stop its consumers first)\n")


def test_groups_reset_offsets_to_a_datetime_sends_its_milliseconds_and_a_bad_one_is_a_usage_error(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, group = _topic("rd"), _topic("dated")
    http = served.http()
    create_topic(http, name, 1)
    records = [{"value": i, "timestamp_ms": ms} for i, ms in enumerate((1_000, 60_000, 120_000))]
    assert send(http, [{"topic": name, "partition": 0, "records": records}]).status_code == 200
    flags = ["--url", served.open_url, "groups", "reset-offsets", group, "--topic", name, "--execute"]

    dated = outbox(*flags, "--to-datetime", "1970-01-01T00:00:30").json  # UTC: 30,000 ms
    zoned = outbox(*flags, "--to-datetime", "1970-01-01T01:01:00.001+01:00").json  # 60,001 ms
    bad = outbox(*flags, "--to-datetime", "yesterday")

    assert [o["new_offset"] for o in dated["offsets"]] == [1]
    assert [o["new_offset"] for o in zoned["offsets"]] == [2]
    assert (bad.status, bad.out) == (EXIT_USAGE, "")
    assert bad.err == ("outbox: error: --to-datetime 'yesterday': give an ISO 8601 time, e.g. 2026-11-28T09:30:00Z "
                       "(UTC when no zone is given)\n")


def test_groups_reset_offsets_of_all_topics_shifted_back_plans_and_commits_as_the_database_command_does(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    first, second, group = _topic("sa"), _topic("sb"), _topic("shifting")
    http = served.http()
    for name in (first, second):
        create_topic(http, name, 1)
        assert send(http, [batch(name, 0, ["o1", "o2", "o3", "o4"])]).status_code == 200
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": [
        {"topic": first, "partition": 0, "offset": 3}, {"topic": second, "partition": 0, "offset": 1}]}
    ).status_code == 200
    flags = ["groups", "reset-offsets", group, "--all-topics", "--shift-by", "-2"]

    current = outbox("--url", served.open_url, "groups", "reset-offsets", group, "--all-topics", "--to-current",
                     "--dry-run").json
    planned = outbox("--url", served.open_url, *flags, "--dry-run").json
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct_plan = outbox(*flags, "--dry-run").json
    monkeypatch.delenv("OUTBOX_DATABASE_URL")
    executed = outbox("--url", served.open_url, *flags, "--execute").json

    assert current == {"group_id": group, "dry_run": True, "offsets": [
        {"topic": first, "partition": 0, "committed_offset": 3, "committed_read_order": "commit", "new_offset": 3, "read_order": "commit"},
        {"topic": second, "partition": 0, "committed_offset": 1, "committed_read_order": "commit", "new_offset": 1, "read_order": "commit"}]}
    expected = [{"topic": first, "partition": 0, "committed_offset": 3, "committed_read_order": "commit", "new_offset": 1, "read_order": "commit"},
                {"topic": second, "partition": 0, "committed_offset": 1, "committed_read_order": "commit", "new_offset": 0, "read_order": "commit"}]
    assert planned == direct_plan == {"group_id": group, "dry_run": True, "offsets": expected}
    assert executed == {"group_id": group, "dry_run": False, "offsets": expected}
    assert [(o["topic"], o["offset"]) for o in http.get(f"/v1/groups/{group}/offsets").json()["offsets"]] == sorted(
        [(first, 1), (second, 0)])


@pytest.mark.parametrize("direct", [False, True], ids=["over --url", "on the database"])
@pytest.mark.parametrize(("flags", "message"), [
    (["--all-topics", "--partition", "0", "--to-earliest"], "--partition goes with --topic, not with --all-topics"),
    (["--all-topics", "--topic", "t", "--to-earliest"], "argument --topic: not allowed with argument --all-topics"),
    (["--topic", "t", "--shift-by", "1", "--to-offset", "2"], "argument --to-offset: not allowed with argument "
     "--shift-by"),
    (["--to-earliest"], "one of the arguments --topic --all-topics is required"),
], ids=["partition with all topics", "topic with all topics", "shift-by with to-offset", "neither"])
def test_groups_reset_offsets_with_a_bad_combination_is_a_usage_error_before_anything_is_asked(served, outbox, monkeypatch, direct, flags, message) -> None:  # type: ignore[no-untyped-def]
    where = [] if direct else ["--url", served.open_url]
    if direct:
        monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)

    done = outbox(*where, "groups", "reset-offsets", "g", *flags, "--execute")

    assert (done.status, done.out) == (EXIT_USAGE, "")
    assert message in done.err


# --- transactions -----------------------------------------------------------------------------


@pytest.mark.parametrize("direct", [False, True], ids=["over --url", "on the database"])
@pytest.mark.parametrize(("flags", "message"), [
    (["--min-age-ms", "-1"], "argument --min-age-ms: invalid non_negative value: '-1'"),
    (["--limit", "0"], "argument --limit: invalid integer from 1 to 10000 value: '0'"),
    (["--limit", "10001"], "argument --limit: invalid integer from 1 to 10000 value: '10001'"),
], ids=["negative age", "no limit", "limit past the list's cap"])
def test_transactions_list_out_of_the_apis_bounds_is_a_usage_error_before_anything_is_asked(served, outbox, monkeypatch, direct, flags, message) -> None:  # type: ignore[no-untyped-def]
    where = [] if direct else ["--url", served.open_url]
    if direct:
        monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)

    done = outbox(*where, "transactions", "list", *flags)

    assert (done.status, done.out) == (EXIT_USAGE, "")
    assert done.err == f"outbox: error: {message} (see `outbox transactions list --help`)\n"


@pytest.mark.parametrize("command", [("transactions", "describe"), ("transactions", "abort"), ("groups", "describe"),
                                     ("groups", "lag"), ("topics", "describe")])
def test_an_empty_id_is_a_usage_error_before_anything_is_asked(served, outbox, command) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", served.open_url, *command, "")

    argument = {"transactions": "transactional_id", "groups": "group_id", "topics": "topic"}[command[0]]
    assert (done.status, done.out) == (EXIT_USAGE, "")
    assert done.err == (f"outbox: error: argument {argument}: must not be empty "
                        f"(see `outbox {' '.join(command)} --help`)\n")


def test_transactions_list_describe_hanging_and_abort_print_the_https_answers(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, tid = _topic("x"), _topic("stuck")
    url, http = served.open_url, served.http()
    create_topic(http, name, 1)
    p = init_producer(http, tid)
    begin(http, tid, p)
    assert send(http, [batch(name, 0, ["a"], 0)], p, tid).status_code == 200

    listed = outbox("--url", url, "transactions", "list", "--state", "Ongoing", "--transactional-id-prefix", tid).json
    described = outbox("--url", url, "transactions", "describe", tid).json
    hanging = outbox("--url", url, "transactions", "hanging", "--transactional-id-prefix", tid).json
    aborted = outbox("--url", url, "transactions", "abort", tid).json

    assert [t["transactional_id"] for t in listed["transactions"]] == [tid]
    assert described["partitions"] == [{"topic": name, "partition": 0, "first_offset": 0}]
    # Ages move with the clock: the rest of the answer is the service's, field for field.
    after = http.get(f"/v1/transactions/{tid}").json()
    assert hanging == {"transactions": [], "next_after": None}
    assert (aborted["state"], aborted["producer_epoch"]) == ("CompleteAbort", p["producer_epoch"] + 1)
    assert aborted == after
    assert set(described) == set(after)


def test_transactions_abort_over_http_refuses_a_prepared_one_unless_forced_and_the_table_marks_it(served, outbox) -> None:  # type: ignore[no-untyped-def]
    name, tid = _topic("x"), _topic("prepared")
    url, http = served.open_url, served.http()
    create_topic(http, name, 1)
    p = init_producer(http, tid)
    txn_id = begin(http, tid, p)["txn_id"]
    assert send(http, [batch(name, 0, ["a"], 0)], p, tid).status_code == 200
    assert http.post(f"/v1/transactions/{tid}/prepare", json={**ident(p), "txn_id": txn_id}).status_code == 200

    table = outbox("--url", url, "transactions", "list", "--transactional-id-prefix", tid, "--table")
    refused = outbox("--url", url, "transactions", "abort", tid)
    kept = http.get(f"/v1/transactions/{tid}").json()["state"]
    forced = outbox("--url", url, "transactions", "abort", tid, "--force-prepared").json

    assert table.out.splitlines()[1].split()[:3] == [tid, "Prepared", "(awaits"]
    assert (refused.status, refused.out) == (1, "")
    assert refused.err.startswith("outbox: error: TRANSACTION_PREPARED: ")
    assert kept == "Prepared"
    assert forced["state"] == "CompleteAbort"


def test_transactions_print_the_same_json_over_http_and_from_the_database(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tid = _topic("ended")
    http = served.http()
    p = init_producer(http, tid)
    begin(http, tid, p)
    assert http.post(f"/v1/transactions/{tid}/abort", json={"producer_id": p["producer_id"],
                                                             "producer_epoch": p["producer_epoch"]}).status_code == 200
    commands = [("describe", tid), ("list", "--transactional-id-prefix", tid),
                ("list", "--state", "CompleteAbort", "--transactional-id-prefix", tid)]

    remote = [outbox("--url", served.open_url, "transactions", *c).json for c in commands]
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = [outbox("transactions", *c).json for c in commands]

    assert remote[0] == http.get(f"/v1/transactions/{tid}").json()
    assert remote[0]["state"] == "CompleteAbort"
    assert remote[1] == remote[2] == {"next_after": None, "transactions": [{k: v for k, v in remote[0].items()
                                                        if k not in ("partitions", "pending_offsets")}]}
    assert direct == remote


def test_on_a_terminal_the_answer_is_a_table_by_default(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    tid = _topic("idle")
    p = init_producer(served.http(), tid)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)

    done = outbox("--url", served.open_url, "transactions", "describe", tid)

    assert (done.status, done.err) == (0, "")
    header = ["TRANSACTIONAL-ID", "STATE", "PRODUCER-ID", "PRODUCER-EPOCH", "TIMEOUT-MS", "AGE-MS"]
    row = [tid, "Empty", str(p["producer_id"]), str(p["producer_epoch"]), "60000", "-"]
    widths = [max(len(h), len(v)) for h, v in zip(header, row, strict=True)]
    assert done.out.splitlines() == ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                                     for line in (header, row)]


# --- ACLs and principals, with authentication on ----------------------------------------------


def test_acls_add_list_and_remove_print_the_https_answers(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_API_KEY", served.admin_key)
    url, topic = served.secured_url, _topic("acl")
    binding = {"principal": "User:reader", "resource_type": "topic", "resource_name": topic,
               "pattern_type": "literal", "operation": "read", "permission": "allow"}
    flags = ["--allow-principal", "User:reader", "--operation", "read", "--topic", topic]

    added = outbox("--url", url, "acls", "add", *flags).json
    listed = outbox("--url", url, "acls", "list", "--topic", topic).json
    expected_list = served.admin().get("/v1/acls", params={"resource_type": "topic", "resource_name": topic}).json()
    table = outbox("--url", url, "acls", "list", "--topic", topic, "--table")
    with monkeypatch.context() as on_the_database:  # an API key in the environment is for a service
        on_the_database.delenv("OUTBOX_API_KEY")
        on_the_database.setenv("OUTBOX_DATABASE_URL", served.db_url)
        direct = outbox("acls", "list", "--topic", topic).json
    removed = outbox("--url", url, "acls", "remove", *flags).json

    assert added == {"acls": [{**binding, "created": True}]}
    assert listed == expected_list == direct == {"acls": [binding]}
    assert removed == {"deleted": [binding]}
    assert len(topic) < len("RESOURCE-NAME")  # so the header sets that column's width
    assert table.out.splitlines() == [
        "PRINCIPAL    PERMISSION  OPERATION  RESOURCE-TYPE  RESOURCE-NAME  PATTERN-TYPE",
        f"User:reader  allow       read       topic          {topic.ljust(len('RESOURCE-NAME'))}  literal",
    ]
    assert served.admin().get("/v1/acls", params={"resource_name": topic}).json() == {"acls": []}


def test_principals_create_list_and_revoke_over_http_and_list_as_the_database_command(served, outbox, monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key_file = tmp_path / "admin.key"
    key_file.write_text(served.admin_key + "\n")
    remote = ["--url", served.secured_url, "--api-key-file", str(key_file), "principals"]
    name = _topic("ops")

    created = outbox(*remote, "create", name)
    assert created.err == "outbox: store this API key now: it is not shown again, only a hash of it is kept\n"
    created.err = ""  # the answer is the rest
    listed = outbox(*remote, "list", name).json
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = outbox("principals", "list", name).json
    revoked = outbox(*remote, "revoke", name, "--key-id", created.json["key_id"]).json

    assert created.json["principal"] == f"User:{name}" and created.json["api_key"].startswith("outbox_")
    assert listed == direct == {"principals": [{"principal": f"User:{name}", "api_keys": [
        {"key_id": created.json["key_id"], "created_ms": created.json["created_ms"], "revoked_ms": None,
         "scram_credentials": True}]}]}
    assert revoked == {"revoked": [created.json["key_id"]]}
    everyone = served.admin().get("/v1/principals").json()["principals"]
    assert [p["api_keys"][0]["revoked_ms"] is not None for p in everyone if p["principal"] == f"User:{name}"] == [True]


def test_the_service_flags_are_taken_after_the_command_as_before_it(served, outbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key_file = tmp_path / "admin.key"
    key_file.write_text(served.admin_key + "\n")
    topic = _topic("after")
    assert served.admin().post("/v1/topics", json={"name": topic, "partitions": 1}).status_code == 201

    done = outbox("topics", "describe", topic, "--url", served.secured_url, "--api-key-file", str(key_file),
                  "--timeout", "30")

    assert done.json == served.admin().get(f"/v1/topics/{topic}").json()


def test_a_principal_without_the_acl_gets_the_403_code_and_exit_status_4(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_URL", served.secured_url)
    monkeypatch.setenv("OUTBOX_API_KEY", served.reader_key)

    described = outbox("topics", "describe", "anything")
    aborted = outbox("transactions", "abort", "anyone")

    assert (described.status, described.out) == (EXIT_AUTH, "")
    assert described.err == ("outbox: error: TOPIC_AUTHORIZATION_FAILED: User:reader is not authorized for describe "
                             "on topic 'anything': no ACL allows it\n")
    assert (aborted.status, aborted.out) == (EXIT_AUTH, "")
    assert aborted.err == ("outbox: error: CLUSTER_AUTHORIZATION_FAILED: User:reader is not authorized for "
                           "cluster_action on the cluster: no ACL allows it\n")


@pytest.mark.parametrize(("key", "line"), [
    (None, "AUTHENTICATION_FAILED: this operation needs credentials: an API key (Authorization: Bearer outbox_…); "
           "no API key was given: set OUTBOX_API_KEY or give --api-key-file FILE"),
    ("outbox_0000000000000000_wrong", "AUTHENTICATION_FAILED: the API key is unknown, revoked or wrong"),
], ids=["no key", "wrong key"])
def test_no_key_or_a_wrong_one_is_the_401_code_and_exit_status_4_and_the_key_is_never_printed(served, outbox, key, line) -> None:  # type: ignore[no-untyped-def]
    done = outbox("-v", "--url", served.secured_url, *(["--api-key", key] if key else []), "topics", "list")

    assert (done.status, done.out) == (EXIT_AUTH, "")
    assert done.err.splitlines()[-1] == f"outbox: error: {line}"
    assert key is None or key not in done.err


def test_a_path_in_outbox_api_key_is_named_with_what_the_variable_takes(served, outbox, monkeypatch,  # type: ignore[no-untyped-def]
                                                                         tmp_path) -> None:
    # The variable holds the key, --api-key-file a file: a path put in the variable was sent as
    # the key and refused as "not an API key", which did not say what to change.
    key_file = tmp_path / "admin.key"
    key_file.write_text(served.admin_key + "\n")
    monkeypatch.setenv("OUTBOX_API_KEY", str(key_file))

    done = outbox("--url", served.secured_url, "topics", "list")

    assert (done.status, done.out) == (EXIT_AUTH, "")
    assert done.err.splitlines()[-1].endswith(
        "; OUTBOX_API_KEY names a file: it holds the key itself "
        '(export OUTBOX_API_KEY="$(cat FILE)"), or give the file with --api-key-file FILE')
    assert served.admin_key not in done.err


def test_an_unreachable_service_is_one_line_and_exit_status_1(outbox) -> None:  # type: ignore[no-untyped-def]
    port = free_port()  # nothing listens there

    done = outbox("--url", f"http://127.0.0.1:{port}", "topics", "list")

    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err == f"outbox: error: cannot reach the service at http://127.0.0.1:{port} (--url, OUTBOX_URL): [Errno 111] Connection refused\n"


def test_an_https_url_for_a_plain_http_service_says_to_try_http(outbox) -> None:  # type: ignore[no-untyped-def]
    with stand_in_http_server(lambda path: (200, "application/json", b"[]")) as url:
        address = url.removeprefix("http://")

        done = outbox("--url", f"https://{address}", "topics", "list")

    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err.startswith(f"outbox: error: cannot reach the service at https://{address} (--url, OUTBOX_URL): ")
    assert done.err.endswith(f"; the service may serve plain HTTP: try http://{address}\n")


@pytest.mark.parametrize("setting", [("OUTBOX_DATABASE_URL", "mysql://shop@db/shop"),
                                     ("OUTBOX_DB_POOL_PRE_PING", "true"),
                                     ("OUTBOX_MAX_PARTITIONS_PER_TOPIC", "many")], ids=lambda s: s[0])
def test_a_command_over_http_is_not_refused_for_a_service_setting_it_does_not_act_on(  # type: ignore[no-untyped-def]
        outbox, monkeypatch, setting) -> None:
    # An operator's shell may carry a service's environment: its database is the service's.
    monkeypatch.setenv(*setting)
    port = free_port()

    done = outbox("--url", f"http://127.0.0.1:{port}", "topics", "list")

    assert (done.status, done.err) == (
        EXIT_FAILURE, f"outbox: error: cannot reach the service at http://127.0.0.1:{port} (--url, OUTBOX_URL): [Errno 111] Connection refused\n")


def test_a_command_over_http_still_refuses_a_wrong_log_setting(outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_LOG_FORMAT", "xml")

    done = outbox("--url", "http://127.0.0.1:1", "topics", "list")

    assert (done.status, done.err) == (EXIT_USAGE, "outbox: error: OUTBOX_LOG_FORMAT: Input should be 'text' or 'json'\n")


@pytest.fixture
def web_server() -> Iterator[int]:
    """A port where a web server that is not the service answers every GET with an HTML page:
    200 for /v1/topics, 404 for any other path."""
    body = b"<!DOCTYPE html><html><body><h1>Welcome</h1></body></html>"
    with stand_in_http_server(lambda path: (200 if path == "/v1/topics" else 404, "text/html", body)) as url:
        yield int(url.rpartition(":")[2])


def test_a_web_page_that_is_not_the_service_is_one_line_naming_the_url_not_the_page(outbox, web_server) -> None:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{web_server}"

    ok_page = outbox("--url", url, "topics", "list")
    not_found = outbox("--url", url, "topics", "describe", "clicks")

    hint = "is --url the outbox service's address, e.g. http://127.0.0.1:8000 (no path)?"
    assert (ok_page.status, ok_page.out, ok_page.err) == (
        EXIT_FAILURE, "", f"outbox: error: {url} answered GET /v1/topics with something that is not JSON: {hint}\n")
    assert (not_found.status, not_found.out, not_found.err) == (
        EXIT_FAILURE, "", f"outbox: error: {url} answered GET /v1/topics/clicks with HTTP 404 and no outbox error: {hint}\n")


@pytest.fixture
def proxy_page(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port where a proxy in front of the service answers every GET with its own HTML page
    and the status the test is parametrized with (the service behind it never answers)."""
    body = b"<html><body>Authorization Required / Bad Gateway</body></html>"
    with stand_in_http_server(lambda _path: (request.param, "text/html", body)) as url:
        yield int(url.rpartition(":")[2])


@pytest.mark.parametrize(("proxy_page", "status", "line"), [
    (401, EXIT_AUTH, "HTTP 401 and no outbox error: something in front of the service (an authenticating proxy?) "
                     "asked for credentials"),
    (403, EXIT_AUTH, "HTTP 403 and no outbox error: something in front of the service (an authenticating proxy?) "
                     "refused the request"),
    (502, EXIT_FAILURE, "HTTP 502 and no outbox error: something in front of the service (a proxy, a load "
                        "balancer?) answered it: is the service up behind it?"),
    (503, EXIT_FAILURE, "HTTP 503 and no outbox error: something in front of the service (a proxy, a load "
                        "balancer?) answered it: is the service up behind it?"),
], indirect=["proxy_page"], ids=["401", "403", "502", "503"])
def test_a_proxy_s_own_refusal_or_failure_says_so_and_a_refusal_of_the_caller_is_exit_status_4(
        outbox, proxy_page: int, status: int, line: str) -> None:  # type: ignore[no-untyped-def]
    url = f"http://127.0.0.1:{proxy_page}"

    done = outbox("--url", url, "topics", "list")

    assert (done.status, done.out, done.err) == (status, "", f"outbox: error: {url} answered GET /v1/topics with {line}\n")


def test_a_url_with_a_path_after_the_services_address_says_the_route_is_not_there(served, outbox) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", f"{served.open_url}/v1", "topics", "list")

    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err == (f"outbox: error: NOT_FOUND: the service at {served.open_url}/v1 has no route /v1/topics: "
                        "is --url the outbox service's address, e.g. http://127.0.0.1:8000 (no path)?\n")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose server accepts connections and reads what it is sent, but never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])  # kept open, unanswered, until the test ends
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(STOP_TIMEOUT_S)
        for conn in held:
            conn.close()
        server.close()


def test_a_service_that_never_answers_is_one_line_and_exit_status_1_after_the_timeout(outbox, silent_port) -> None:  # type: ignore[no-untyped-def]
    started = time.monotonic()

    done = outbox("--url", f"http://127.0.0.1:{silent_port}", "--timeout", "1", "topics", "list")

    took = time.monotonic() - started
    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err == (f"outbox: error: the service at http://127.0.0.1:{silent_port} did not answer within "
                        f"1s (--timeout)\n")
    assert 0.9 <= took < 20  # the timeout's second, and not the default 30 s


@pytest.mark.parametrize("seconds", ["-1", "0", "nan", "inf", "1e10"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_up_to_a_day_is_a_usage_error(outbox, seconds: str) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", "http://127.0.0.1:1", "--timeout", seconds, "topics", "list")

    assert (done.status, done.out, done.err) == (
        EXIT_USAGE, "", f"outbox: error: argument --timeout: must be a number of seconds above 0 and at most 86400, "
                        f"not '{seconds}' (see `outbox --help`)\n")


@pytest.mark.parametrize(("url", "problem"), [
    ("http://[::1", "not an address, e.g. http://127.0.0.1:8000 (an IPv6 host goes in brackets: http://[::1]:8000)"),
    ("http://127.0.0.1:99999", "the port must be a number from 1 to 65535"),
    ("http://127.0.0.1:0", "the port must be a number from 1 to 65535"),
    ("http://:8000", "no host, e.g. http://127.0.0.1:8000"),
    ("http://nohost..x:8000", "'nohost..x' is not a valid host name (label empty or too long)"),
], ids=["bracket left open", "port past 65535", "port 0", "no host", "host name no resolver takes"])
def test_a_url_without_a_valid_host_and_port_is_a_usage_error(outbox, url: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", url, "topics", "list")

    assert (done.status, done.out, done.err) == (EXIT_USAGE, "", f"outbox: error: --url '{url}': {problem}\n")


def test_a_wrong_url_from_the_environment_is_named_as_outbox_url(outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OUTBOX_URL", "localhost:8431")

    done = outbox("topics", "list")

    assert (done.status, done.out, done.err) == (
        EXIT_USAGE, "", "outbox: error: OUTBOX_URL 'localhost:8431': give the service's http:// or https:// address, "
                        "e.g. http://127.0.0.1:8000\n")


def test_a_wrong_url_is_shown_without_its_credentials_or_query(outbox) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", "http://admin:hunter2@127.0.0.1:99999/?token=s3cret", "topics", "list")

    assert (done.status, done.out, done.err) == (
        EXIT_USAGE, "", "outbox: error: --url 'http://127.0.0.1:99999/': the port must be a number from 1 to 65535\n")


@pytest.mark.parametrize("url", ["http://admin:pa/ss@127.0.0.1:99999/", "http://admin:p?ss@127.0.0.1:99999/",
                                 "http://admin:p#ss@127.0.0.1:99999/"])
def test_a_wrong_url_never_shows_a_part_of_a_password_that_holds_a_delimiter(outbox, url: str) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", url, "topics", "list")

    assert done.status == EXIT_USAGE
    assert "ss@" not in done.err and "admin" not in done.err and "pa/" not in done.err, done.err


@pytest.mark.parametrize("url", ["http://admin:8000/s3cret@127.0.0.1:8000", "http://admin:8000#s3cret@127.0.0.1:8000",
                                 "http://admin:8000?s3cret@127.0.0.1:8000"])
def test_a_password_that_ends_the_host_early_is_refused_before_any_request(outbox, url: str) -> None:  # type: ignore[no-untyped-def]
    # Taken as it is, the host would be "admin", port 8000, and the password's rest its path.
    done = outbox("--url", url, "topics", "list")

    assert (done.status, done.out, done.err) == (
        EXIT_USAGE, "", "outbox: error: --url 'http://127.0.0.1:8000': an '@' after the host: write the user's or "
                        "password's '/', '?', '#' and '@' as %2F, %3F, %23 and %40\n")


# One case per way an API key can reach argparse's or the CLI's error message: the command
# line, and the message on stderr, compared whole (the key shown as *** where it was given).
_KEY = "outbox_0123456789abcdef_secret"


@pytest.mark.parametrize(("args", "message"), [
    (["transactions", "list", "--state", "Ongoing", "--api-key", _KEY], "--api-key: only for the admin commands "
     "over HTTP (acls, groups, principals, topics, transactions with --url); without --url or OUTBOX_URL"),
    (["serve", "--api-key", _KEY], "unrecognized arguments: --api-key *** (see `outbox serve --help`)"),
    (["topics", "list", f"--api-ke={_KEY}"], "unrecognized arguments: --api-ke=*** (see `outbox topics list --help`)"),
    (["serve", "--api_key", _KEY], "unrecognized arguments: --api_key *** (see `outbox serve --help`)"),
    (["--api-key", "outbox_0123", "serve", "--api-key", "outbox_0123_not_key_shaped_secret"],
     "unrecognized arguments: --api-key *** (see `outbox serve --help`)"),
], ids=["on a command that takes no key", "repeated by argparse as an unrecognized argument",
        "after an abbreviation of its flag", "key-shaped after a flag argparse does not recognise",
        "holding another given value, hidden whole"])
def test_an_api_key_in_a_usage_error_is_not_echoed(outbox, args, message) -> None:  # type: ignore[no-untyped-def]
    done = outbox(*args)

    assert (done.status, done.out) == (EXIT_USAGE, "")
    assert done.err == f"outbox: error: {message}\n"


def test_an_empty_url_is_refused_as_the_admin_commands_flag_it_is(outbox) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", "", "topics", "list")

    assert (done.status, done.out, done.err) == (
        EXIT_USAGE, "", "outbox: error: --url: empty; give the service's address, e.g. http://127.0.0.1:8000\n")


def test_a_host_name_the_http_library_cannot_decode_is_refused_before_any_request(outbox) -> None:  # type: ignore[no-untyped-def]
    done = outbox("--url", "http://u:pw@xn--.com:80", "topics", "list")

    assert (done.status, done.out, done.err) == (
        EXIT_USAGE, "", "outbox: error: --url 'http://xn--.com:80': 'xn--.com' is not a valid host name "
                        "(Malformed A-label, no Punycode eligible content found)\n")


@pytest.mark.parametrize(("args", "message"), [
    (["topics", "list", "--ulr", "http://admin:s3cr3t@127.0.0.1:8000"], "unrecognized arguments: --ulr ***"),
    (["topics", "list", "--apikey", "eyJhbGciOiJIUzI1NiJ9.e30.s3cr3t"], "unrecognized arguments: --apikey ***"),
    (["topics", "list", "--token=s3cr3t"], "unrecognized arguments: --token=***"),
    # Taken for --password-stdin, were abbreviations allowed, and s3cr3t then shown alone.
    (["grant-reader", "reader", "--password", "s3cr3t"], "unrecognized arguments: --password ***"),
    (["topics", "list", "extra"], "unrecognized arguments: extra"),
])
def test_a_misspelt_options_value_is_not_echoed(outbox, args, message) -> None:  # type: ignore[no-untyped-def]
    done = outbox(*args)

    command = " ".join(a for a in args[:2] if a not in ("reader",))  # the (sub)command that met it
    assert (done.status, done.out, done.err) == (EXIT_USAGE, "", f"outbox: error: {message} (see `outbox {command} --help`)\n")


def test_a_key_file_of_more_than_one_line_is_refused_without_its_contents(outbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    key_file = tmp_path / "admin.key"
    key_file.write_text("outbox_0123456789abcdef_secret\nmy admin key\n")

    done = outbox("--url", "http://127.0.0.1:1", "--api-key-file", str(key_file), "topics", "list")

    assert (done.status, done.out) == (EXIT_USAGE, "")
    assert done.err == (f"outbox: error: --api-key-file: {key_file} holds more than one line: give a file with "
                        "the key alone\n")


def test_the_service_s_address_is_named_without_its_credentials_or_query(outbox) -> None:  # type: ignore[no-untyped-def]
    port = free_port()

    done = outbox("--url", f"http://admin:hunter2@127.0.0.1:{port}/?token=s3cret", "topics", "list")

    assert (done.status, done.out) == (EXIT_FAILURE, "")
    assert done.err == f"outbox: error: cannot reach the service at http://127.0.0.1:{port}/ (--url, OUTBOX_URL): [Errno 111] Connection refused\n"


@pytest.mark.parametrize(("args", "line"), [
    (["--url", "http://127.0.0.1:1", "migrate"],
     "outbox: error: --url: only for the admin commands over HTTP (acls, groups, principals, topics, transactions "
     "with --url); `outbox migrate` opens the database (OUTBOX_DATABASE_URL)"),
    (["topics", "list", "--json"],
     "outbox: error: --json: only for the admin commands over HTTP (acls, groups, principals, topics, transactions "
     "with --url); without --url or OUTBOX_URL"),
    (["--timeout", "5", "transactions", "list"],
     "outbox: error: --timeout: only for the admin commands over HTTP (acls, groups, principals, topics, "
     "transactions with --url); without --url or OUTBOX_URL"),
    (["--url", "http://127.0.0.1:1", "--api-key-file", "/nonexistent/outbox.key", "topics", "list"],
     "outbox: error: --api-key-file: No such file or directory: /nonexistent/outbox.key"),
    (["--url", "127.0.0.1:8000", "topics", "list"],
     "outbox: error: --url '127.0.0.1:8000': give the service's http:// or https:// address, e.g. "
     "http://127.0.0.1:8000"),
    (["--url", "http://127.0.0.1:1", "principals", "revoke", "ops"],
     "outbox: error: over HTTP, revoke names the key: --key-id ID (`outbox principals list` shows them)"),
])
def test_a_flag_that_would_do_nothing_is_a_usage_error(outbox, args, line) -> None:  # type: ignore[no-untyped-def]
    done = outbox(*args)

    assert (done.status, done.out, done.err) == (EXIT_USAGE, "", line + "\n")


def test_an_api_key_in_the_environment_without_a_service_address_is_refused_and_opens_nothing(outbox, monkeypatch,  # type: ignore[no-untyped-def]
                                                                                                tmp_path: Path) -> None:
    # A mistyped or unset OUTBOX_URL: the command would administer the database with no ACL checked.
    database = tmp_path / "outbox.db"
    monkeypatch.delenv("OUTBOX_URL", raising=False)
    monkeypatch.setenv("OUTBOX_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv("OUTBOX_API_KEY", "outbox_0123456789abcdef_secret")

    done = outbox("topics", "list")

    assert (done.status, done.out) == (EXIT_USAGE, "")
    assert done.err == ("outbox: error: OUTBOX_API_KEY is set but neither --url nor OUTBOX_URL is: `outbox topics` "
                        "would open the database (OUTBOX_DATABASE_URL), no ACL checked, not the service as the "
                        "key's principal; set OUTBOX_URL, or unset OUTBOX_API_KEY to administer the database\n")
    assert not database.exists()


def test_an_api_key_in_the_environment_is_no_mistake_for_a_command_that_only_opens_the_database(outbox, monkeypatch,  # type: ignore[no-untyped-def]
                                                                                                 tmp_path: Path) -> None:
    monkeypatch.delenv("OUTBOX_URL", raising=False)
    monkeypatch.setenv("OUTBOX_DATABASE_URL", f"sqlite:///{tmp_path / 'outbox.db'}")
    monkeypatch.setenv("OUTBOX_API_KEY", "outbox_0123456789abcdef_secret")

    done = outbox("migrate")

    assert (done.status, done.err) == (0, "")


def test_a_topic_shown_without_its_config_prints_a_dash_for_it_and_lists_its_value_format(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # User:reader may describe the topic, not its configs: HTTP answers its config null, and its
    # value_format apart. A bytes topic, not the default json, so the column can only have come
    # from that answer.
    topic = _topic("noconf")
    admin = served.admin()
    assert admin.post("/v1/topics", json={"name": topic, "partitions": 1,
                                          "config": {"value_format": "bytes"}}).status_code == 201
    assert admin.post("/v1/acls", json={"acls": [{
        "principal": "User:reader", "resource_type": "topic", "resource_name": topic, "pattern_type": "literal",
        "operation": "describe", "permission": "allow"}]}).status_code == 200
    monkeypatch.setenv("OUTBOX_URL", served.secured_url)
    monkeypatch.setenv("OUTBOX_API_KEY", served.reader_key)

    described = outbox("topics", "describe", topic, "--table")
    listed = outbox("topics", "list", "--table")

    assert (described.status, described.err) == (0, "")
    assert described.out.splitlines()[0] == f"Topic: {topic}\tPartitionCount: 1\tConfigs: -"
    assert (listed.status, listed.err) == (0, "")
    assert [line.split() for line in listed.out.splitlines() if line.startswith(topic)] == [
        [topic, "1", "-", "-", "-", "bytes"]]


@pytest.mark.parametrize("key_id", ["nope", "0123456789ABCDEF", "0" * 33, "0123456789abcdef\n"])
def test_a_malformed_key_id_is_a_usage_error_before_any_call_over_http_or_not(served, outbox, monkeypatch,  # type: ignore[no-untyped-def]
                                                                               key_id: str) -> None:
    name = _topic("ops")
    admin = served.admin()
    assert admin.post(f"/v1/principals/User:{name}/api-keys").status_code == 201
    monkeypatch.setenv("OUTBOX_API_KEY", served.admin_key)

    over_http = outbox("--url", served.secured_url, "principals", "revoke", name, "--key-id", key_id)
    monkeypatch.delenv("OUTBOX_API_KEY")
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = outbox("principals", "revoke", name, "--key-id", key_id)

    line = (f"outbox: error: argument --key-id: {key_id!r} is not an API key id: 1 to 32 lowercase hex digits, as "
            "`outbox principals list` shows them (see `outbox principals revoke --help`)\n")
    assert (over_http.status, over_http.out, over_http.err) == (EXIT_USAGE, "", line)
    assert (direct.status, direct.out, direct.err) == (EXIT_USAGE, "", line)
    [principal] = [p for p in admin.get("/v1/principals").json()["principals"] if p["principal"] == f"User:{name}"]
    assert [k["revoked_ms"] for k in principal["api_keys"]] == [None]


def test_revoking_a_key_that_is_not_live_is_the_same_refusal_over_http_or_not(served, outbox, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    name = _topic("ops")
    monkeypatch.setenv("OUTBOX_API_KEY", served.admin_key)
    over_http = outbox("--url", served.secured_url, "principals", "revoke", name, "--key-id", "abcdef")
    monkeypatch.delenv("OUTBOX_API_KEY")
    monkeypatch.setenv("OUTBOX_DATABASE_URL", served.db_url)
    direct = outbox("principals", "revoke", name, "--key-id", "abcdef")
    line = f"outbox: error: RESOURCE_NOT_FOUND: User:{name} has no live API key 'abcdef'\n"
    assert (over_http.status, over_http.out, over_http.err) == (1, "", line)
    assert (direct.status, direct.out, direct.err) == (1, "", line)
