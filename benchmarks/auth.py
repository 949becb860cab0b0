"""What authentication and ACLs cost a producer: the same service with them on and off, side by
side on one database (the authorization work's target: plain produce with them on ÷ off at least 0.95).

    .venv/bin/python benchmarks/auth.py --db postgresql --rounds 16

Starts two `outbox serve` from this tree on one fresh database: one with OUTBOX_AUTHENTICATION
unset, one with `api_key` and a producer principal allowed by prefixed ACLs among
`--other-acls` bindings of other principals (so the decision is made against a realistic
table, then remembered). Plain and transactional producers (a commit per Send) take turns of
half a second against both, with the database's own insert as a reference, in rotation, so
both sides meet the same drift of the machine (docs/benchmarks.md). Prints records/s, the
service's CPU µs per record (from /proc/<pid>/stat) and the on ÷ off ratios, with their spread
over each quarter of the rounds; then what a request's checks cost in process (authenticate
and two ACL checks, with the verdicts remembered).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scratch import scratch_database  # noqa: E402
from run import (  # noqa: E402 - the benchmark's own modules, not a package
    ROOT,
    Producer,
    RawInserter,
    Service,
    create_topic,
    ratio_line,
)

PRINCIPAL = "bench"


def rate(turns: list[tuple[int, float]]) -> float:
    return sum(n for n, _ in turns) / sum(took for _, took in turns)


def cli(db_url: str, *args: str, **settings: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update({"OUTBOX_DATABASE_URL": db_url, **settings})
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=ROOT, env=env, check=True,
                          capture_output=True, text=True).stdout


def in_process_cost(db_url: str, other_acls: int) -> dict[str, float]:
    """µs per request of authenticate + two ACL checks (a transactional Send's), remembered,
    against the same table of bindings, with the HTTP stack left out."""
    import asyncio

    from starlette.requests import Request

    from app.api.security import Access, authenticate
    from app.domain import acl
    from app.domain.acl import Operation
    from app.domain.clock import system_clock
    from app.services.security import SecurityService, SecurityState
    from app.settings import Settings
    from app.storage.engine import open_database

    settings = Settings(database_url=db_url, authentication="api_key")
    db = open_database(settings, pool_size=1)
    state = SecurityState(db, settings, system_clock)
    key = SecurityService(db, system_clock).create_api_key("bench-in-process", by="benchmark").api_key
    state.reload(unless_unchanged=False)

    class App:
        class state:  # noqa: N801 - what Request.app.state looks like
            pass

    App.state.security = state
    App.state.settings = settings
    scope = {"type": "http", "method": "POST", "path": "/v1/records", "app": App,
             "headers": [(b"authorization", f"Bearer {key}".encode())], "client": ("127.0.0.1", 1)}

    async def one() -> None:
        principal = await authenticate(Request(scope))
        access = Access(principal, state)
        access.allows(Operation.WRITE, acl.transactional_id("t-1"))
        access.allows(Operation.WRITE, acl.topic("t-1"))

    async def loop(n: int) -> float:
        await one()  # the scrypt, once
        t0 = time.perf_counter()
        for _ in range(n):
            await one()
        return (time.perf_counter() - t0) / n * 1e6

    n = 20_000
    us = asyncio.run(loop(n))
    db.dispose()
    return {"authenticate + 2 ACL checks, µs / request": us, "bindings in the table": float(other_acls + 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--turn-seconds", type=float, default=0.5)
    parser.add_argument("--other-acls", type=int, default=1000, help="bindings of other principals in the table")
    args = parser.parse_args(argv)

    with scratch_database(args.db, "auth") as db_url:
        run_and_report(args, db_url)
    return 0


def run_and_report(args: argparse.Namespace, db_url: str) -> None:
    services: dict[str, Service] = {}
    raw = None
    try:
        cli(db_url, "migrate")
        key = json.loads(cli(db_url, "principals", "create", PRINCIPAL))["api_key"]
        for kind in ("--topic", "--transactional-id"):  # a prefixed command names one kind of resource
            cli(db_url, "acls", "add", "--allow-principal", f"User:{PRINCIPAL}", "--operation", "all",
                kind, "auth-", "--resource-pattern-type", "prefixed")
        engine = create_engine(db_url)
        with engine.begin() as conn:  # other principals' bindings, straight into the table
            conn.execute(text("INSERT INTO acls (principal, resource_type, resource_name, pattern_type, operation, "
                              "permission, created_ms) VALUES (:p, 'topic', :n, 'literal', 'read', 'allow', 0)"),
                         [{"p": f"User:other-{i % 50}", "n": f"topic-{i}"} for i in range(args.other_acls)])
            conn.execute(text("UPDATE counters SET value = value + 1 WHERE name = 'security_version'"))
        engine.dispose()
        services = {"off": Service(db_url, OUTBOX_LOG_LEVEL="warning"),
                    "on": Service(db_url, OUTBOX_AUTHENTICATION="api_key", OUTBOX_LOG_LEVEL="warning")}
        headers = {"off": {}, "on": {"Authorization": f"Bearer {key}"}}
        raw = RawInserter(db_url)
        paths = {}
        for side, service in services.items():
            paths[(side, "plain")] = Producer(service.url, "plain", headers=headers[side])
            paths[(side, "transactional, commit / Send")] = Producer(
                service.url, "transactional", f"auth-{side}", headers=headers[side])
        method = raw.methods[-1]
        turns: dict[object, list[tuple[int, float]]] = {key: [] for key in [*paths, "raw"]}
        cpu: dict[object, float] = {key: 0.0 for key in paths}
        for r in range(args.rounds):
            for k, producer in paths.items():
                side = k[0]
                topic = f"auth-{side}-{abs(hash(k[1])) % 1000}-{r}"
                httpx.post(f"{services[side].url}/v1/topics", json={"name": topic, "partitions": 1},
                           headers=headers[side]).raise_for_status()
                before_cpu = services[side].cpu_seconds()
                turns[k].append(producer.turn(topic, args.turn_seconds))
                cpu[k] += services[side].cpu_seconds() - before_cpu
            topic = f"auth-raw-{r}"
            create_topic(services["off"].url, topic, 1)
            turns["raw"].append(raw.turn(method, raw.topic_id(topic), args.turn_seconds))
        for producer in paths.values():
            producer.close()
    finally:
        if raw is not None:
            raw.close()
        for service in services.values():
            service.stop()
    cost = in_process_cost(db_url, args.other_acls)

    print(f"# {args.db}: {args.rounds} rounds of {args.turn_seconds:g} s turns; reference: raw {method}; "
          f"{args.other_acls} other bindings\n")
    print("| path | authentication | records/s | service CPU µs / record |\n| --- | --- | ---: | ---: |")
    for k in paths:
        n = sum(records for records, _ in turns[k])
        print(f"| {k[1]} | {k[0]} | {rate(turns[k]):,.0f} | {cpu[k] / n * 1e6:.2f} |")
    print(f"| raw {method}, no HTTP | | {rate(turns['raw']):,.0f} | |")
    print("\n| ratio | value | in each quarter of the rounds |\n| --- | ---: | ---: |")
    for name in dict.fromkeys(k[1] for k in paths):
        a, b = turns[("on", name)], turns[("off", name)]
        print(ratio_line(f"{name}: on ÷ off", rate(a) / rate(b), a, b))
        for side in services:
            print(ratio_line(f"{name}, {side} ÷ raw {method}", rate(turns[(side, name)]) / rate(turns["raw"]),
                             turns[(side, name)], turns["raw"]))
    print()
    for label, value in cost.items():
        print(f"{label}: {value:,.1f}")


if __name__ == "__main__":
    sys.exit(main())
