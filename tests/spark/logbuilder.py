"""Write a partition log with every kind of record, over HTTP, step by step."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.api import ok


class LogBuilder:
    """Plain (non-transactional and idempotent) Sends and transactions, driven one request at a
    time so the test decides exactly how they interleave."""

    def __init__(self, client: httpx.Client, topic: str) -> None:
        self.c = client
        self.topic = topic
        self._producers: dict[str, dict] = {}
        self._seq: dict[tuple[str, int], int] = {}
        self._n = 0

    def create(self, partitions: int) -> None:
        ok(self.c.post("/v1/topics", json={"name": self.topic, "partitions": partitions}), 201)

    def _records(self, n: int, tag: str, **extra: Any) -> list[dict]:
        out = []
        for _ in range(n):
            self._n += 1
            rec: dict[str, Any] = {"value": {"n": self._n, "tag": tag, **extra}}
            if self._n % 3:
                rec["key"] = f"k-{self._n}"  # every third record has a null key
            if self._n % 4 == 0:
                rec["headers"] = {"tag": tag, "n": str(self._n)}
            out.append(rec)
        return out

    def plain(self, partition: int, n: int, tag: str = "plain") -> None:
        """Non-transactional, without a producer id (not idempotent)."""
        ok(self.c.post("/v1/records", json={"batches": [
            {"topic": self.topic, "partition": partition, "records": self._records(n, tag)}]}))

    def idempotent(self, name: str, partition: int, n: int, tag: str = "idempotent") -> None:
        """Non-transactional, from an idempotent producer (producer id and sequences)."""
        self._send(name, partition, n, tag, transactional=False)

    def begin(self, tid: str) -> None:
        if tid not in self._producers:
            self._producers[tid] = ok(self.c.post("/v1/producers", json={"transactional_id": tid}))
        p = self._producers[tid]
        ok(self.c.post(f"/v1/transactions/{tid}/begin",
                       json={"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}))

    def send(self, tid: str, partition: int, n: int, tag: str | None = None) -> None:
        self._send(tid, partition, n, tag or tid, transactional=True)

    def _send(self, name: str, partition: int, n: int, tag: str, *, transactional: bool) -> None:
        if name not in self._producers:
            self._producers[name] = ok(self.c.post("/v1/producers", json={}))
        p = self._producers[name]
        seq = self._seq.get((name, partition), 0)
        body: dict[str, Any] = {
            "producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"],
            "batches": [{"topic": self.topic, "partition": partition, "base_sequence": seq,
                         "records": self._records(n, tag)}],
        }
        if transactional:
            body["transactional_id"] = name
        ok(self.c.post("/v1/records", json=body))
        self._seq[(name, partition)] = seq + n

    def commit(self, tid: str) -> None:
        self._end(tid, "commit")

    def abort(self, tid: str) -> None:
        self._end(tid, "abort")

    def _end(self, tid: str, what: str) -> None:
        p = self._producers[tid]
        ok(self.c.post(f"/v1/transactions/{tid}/{what}",
                       json={"producer_id": p["producer_id"], "producer_epoch": p["producer_epoch"]}))

    def log_ends(self) -> dict[int, int]:
        desc = ok(self.c.get(f"/v1/topics/{self.topic}"))
        return {p["partition"]: p["log_end_offset"] for p in desc["partitions"]}


def read_committed_api(client: httpx.Client, topic: str, partition: int, start: int, end: int,
                       max_records: int = 7) -> list[dict]:
    """What a read_committed consumer gets from position `start`, up to commit position `end`,
    paging with a small max_records so that paging itself is exercised."""
    out: list[dict] = []
    pos = start
    while pos < end:
        page = ok(client.get(f"/v1/topics/{topic}/partitions/{partition}/records",
                             params={"offset": pos, "isolation": "read_committed", "max_records": max_records}))
        out.extend(r for r in page["records"] if r["commit_position"] < end)
        if page["next_offset"] <= pos:
            break
        pos = page["next_offset"]
    return out
