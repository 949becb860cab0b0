"""HTTP helpers for the end-to-end tests (httpx clients against a running `serve`)."""

from __future__ import annotations

import time
from typing import Any

import httpx


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text}"
    return r.json()


def refused(r: httpx.Response, status: int, error_code: str) -> dict:
    assert r.status_code == status, f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text}"
    body = r.json()
    assert body["error_code"] == error_code, body
    return body


def read_all(client: httpx.Client, topic: str, partition: int, isolation: str = "read_committed",
             max_records: int = 10_000) -> list[dict]:
    """Every record from position 0 to the log end, following next_offset."""
    out: list[dict] = []
    pos = 0
    while True:
        page = ok(client.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                             params={"offset": pos, "isolation": isolation, "max_records": max_records}))
        out.extend(page["records"])
        assert page["next_offset"] >= pos, page
        if page["next_offset"] >= page["high_watermark"]:
            return out
        pos = page["next_offset"]


def committed_view(client: httpx.Client, topic: str, partition: int) -> list[tuple[int, int, Any]]:
    """read_committed as (offset, commit_position, value)."""
    return [(r["offset"], r["commit_position"], r["value"]) for r in read_all(client, topic, partition)]


def uncommitted_view(client: httpx.Client, topic: str, partition: int) -> list[tuple[int, Any]]:
    """read_uncommitted as (offset, value)."""
    return [(r["offset"], r["value"]) for r in read_all(client, topic, partition, "read_uncommitted")]


def partition_offsets(client: httpx.Client, topic: str) -> dict[int, tuple[int, int, int]]:
    """Topic describe: partition -> (log_start_offset, log_end_offset, last_stable_offset)."""
    desc = ok(client.get(f"/v1/topics/{topic}"))
    return {
        p["partition"]: (p["log_start_offset"], p["log_end_offset"], p["last_stable_offset"])
        for p in desc["partitions"]
    }


def group_offsets(client: httpx.Client, group_id: str) -> list[tuple[str, int, int]]:
    """Stable fetch (require_stable): (topic, partition, offset)."""
    body = ok(client.get(f"/v1/groups/{group_id}/offsets"))
    return [(o["topic"], o["partition"], o["offset"]) for o in body["offsets"]]


def unfinished_transactions(service: httpx.Client | str) -> dict[str, str]:
    """transactional_id → state of every transaction still Ongoing or Prepared; `service` a
    client, or the service's base URL."""
    params = {"state": ["Ongoing", "Prepared"]}
    answer = (service.get("/v1/transactions", params=params) if isinstance(service, httpx.Client)
              else httpx.get(f"{service}/v1/transactions", params=params))
    return {t["transactional_id"]: t["state"] for t in ok(answer)["transactions"]}


def describe_txn(client: httpx.Client, tid: str) -> dict:
    return ok(client.get(f"/v1/transactions/{tid}"))


def wait_for_state(client: httpx.Client, tid: str, state: str, timeout_s: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        desc = describe_txn(client, tid)
        if desc["state"] == state or time.monotonic() > deadline:
            assert desc["state"] == state, f"{tid} still {desc['state']} after {timeout_s}s"
            return desc
        time.sleep(0.05)
