"""The orders the pizza jobs read: plain and transactional writers, some aborted, some left
open, and what a read_committed reader must see of them (`committed`)."""

from __future__ import annotations

from app.client import Producer
from spark_jobs.pizza_income import INPUT


class Orders:
    """Orders in `orders`: plain ones and transactional ones; unique ids; every third a salad."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.plain_producer = Producer(url)
        self.shops: dict[str, Producer] = {}
        self.next_id = 1
        self.committed: dict[int, dict] = {}  # what the job must count: order_id -> order
        self._pending: dict[str, list[dict]] = {}

    def _orders(self, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            i = self.next_id
            self.next_id += 1
            out.append({"order_id": i, "meal": "Salad" if i % 3 == 0 else "Pizza", "value": i + 0.25})
        return out

    def plain(self, n_per_partition: int) -> None:
        for p in (0, 1):
            for o in self._orders(n_per_partition):
                self.plain_producer.send(INPUT, o, key=str(o["order_id"]), partition=p)
                self.committed[o["order_id"]] = o
        self.plain_producer.flush()

    def open(self, shop: str, n_per_partition: int) -> None:
        if shop not in self.shops:
            self.shops[shop] = Producer(self.url, shop)
            self.shops[shop].init_transactions()
        self.shops[shop].begin_transaction()
        self._pending[shop] = []
        for p in (0, 1):
            for o in self._orders(n_per_partition):
                self.shops[shop].send(INPUT, o, key=str(o["order_id"]), partition=p)
                self._pending[shop].append(o)
        self.shops[shop].flush()

    def commit(self, shop: str) -> None:
        self.shops[shop].commit_transaction()
        self.committed.update((o["order_id"], o) for o in self._pending.pop(shop))

    def abort(self, shop: str) -> None:
        self.shops[shop].abort_transaction()
        self._pending.pop(shop)

    def pizza(self) -> dict[int, float]:
        return {i: o["value"] for i, o in self.committed.items() if o["meal"] == "Pizza"}

    def close(self) -> None:
        self.plain_producer.close()
        for p in self.shops.values():
            p.close()
