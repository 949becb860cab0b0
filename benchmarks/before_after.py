"""Before and after in one run, the shape benchmarks/ab.py, send_cpu.py, send_memory.py and
kafka_consume.py share: the two source trees named on the command line (`tree_arguments`), a
service of each on one database (`services`; `services_and_reference` with the database's own
insert beside them), and turns of every path taken in rotation, so that every path meets the
same drift of the machine (`rotate`, docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Hashable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from run import ROOT, Producer, RawInserter, Service, Turn, create_topic


def tree_arguments(parser: argparse.ArgumentParser) -> None:
    """--before (required) and --after (this tree by default): the source trees compared."""
    parser.add_argument("--before", type=Path, required=True, help="source tree of the 'before' service")
    parser.add_argument("--after", type=Path, default=ROOT, help="source tree of the 'after' service")


def rate(turns: list[Turn]) -> float:
    """Records a second over the turns: all their records over all their time."""
    return sum(n for n, _ in turns) / sum(took for _, took in turns)


@contextmanager
def services(db_url: str, before: Path, after: Path,
             settings: Callable[[str], dict[str, str]] = lambda side: {}) -> Iterator[dict[str, Service]]:
    """`outbox serve` from each tree ("before", "after") on `db_url`, each with the OUTBOX_
    settings `settings(side)` gives it, asked for just before that side starts; all stopped on
    exit, whatever failed (a service that started is never left running)."""
    with ExitStack() as stack:
        started = {}
        for side, tree in (("before", before), ("after", after)):
            started[side] = service = Service(db_url, tree, **settings(side))
            stack.callback(service.stop)
        yield started


@contextmanager
def services_and_reference(db_url: str, before: Path, after: Path) -> Iterator[tuple[dict[str, Service], RawInserter]]:
    """`services` without settings, and the raw insert into `db_url`; all stopped on exit."""
    with services(db_url, before, after) as started, closing(RawInserter(db_url)) as raw:
        yield started, raw


@dataclass
class Rotation:
    """What `rotate` measured: each path's turns and the raw insert's (key "raw"), each path's
    service CPU seconds over its turns, and the raw insert's method (the reference)."""

    turns: dict[Hashable, list[Turn]]
    cpu: dict[Hashable, float]
    method: str


def rotate(paths: dict[Hashable, tuple[Service, Producer]], raw: RawInserter, reference: Service, *,
           rounds: int, turn_seconds: float, prefix: str, rng: random.Random | None = None) -> Rotation:
    """`rounds` rounds, each a turn of every path (in `rng`'s shuffled order if given, in the
    order of `paths` otherwise) and then of the raw insert, each into a topic of its own made
    for the turn (the raw insert's through `reference`). The producers are closed at the end."""
    method = raw.methods[-1]
    keys = list(paths)
    index = {key: i for i, key in enumerate(keys)}
    turns: dict[Hashable, list[Turn]] = {key: [] for key in [*keys, "raw"]}
    cpu = dict.fromkeys(keys, 0.0)
    try:
        for r in range(rounds):
            if rng is not None:
                rng.shuffle(keys)
            for key in keys:
                service, producer = paths[key]
                topic = f"{prefix}-{index[key]}-{r}"
                create_topic(service.url, topic, 1)
                before_cpu = service.cpu_seconds()
                turns[key].append(producer.turn(topic, turn_seconds))
                cpu[key] += service.cpu_seconds() - before_cpu
            topic = f"{prefix}-raw-{r}"
            create_topic(reference.url, topic, 1)
            turns["raw"].append(raw.turn(method, raw.topic_id(topic), turn_seconds))
    finally:
        for _, producer in paths.values():
            producer.close()
    return Rotation(turns, cpu, method)
