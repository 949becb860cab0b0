"""The console's record browser pages (app/api/static/console/pager.js, run under Node.js) over
a partition whose high watermark stops below its log end: plain records p0-p4 (offsets 0-4), an
Ongoing transaction of a producer of durability "commit" (5-7), plain records q0-q4 (8-12). On
PostgreSQL the high watermark is 5; on SQLite, where every Send is durable, the log end, 13.

Following its next-page links from the log start reads every record a read of that isolation
gives, and no link leads past where such reads end: read_uncommitted's the high watermark,
read_committed's the log end (its commit points past the high watermark are durable)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from app.api import console
from tests.conftest import unavailable
from tests.helpers import batch, create_topic, fetch, init_producer, send

PAGER = console.STATIC_DIR / "console" / "pager.js"
PAGE = 3  # records a page: the log takes several


def _pager(function: str, *args: Any) -> Any:
    if shutil.which("node") is None:
        unavailable("Node.js runs the console's pager (Debian: apt-get install nodejs)")
    script = (f"const pager = require({json.dumps(str(PAGER))});"
              f"console.log(JSON.stringify(pager.{function}(...JSON.parse(process.argv[1]))));")
    done = subprocess.run(["node", "-e", script, json.dumps(args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def partition(client) -> dict:  # type: ignore[no-untyped-def]
    """The partition's description, once written."""
    create_topic(client, "out", 1)
    assert send(client, [batch("out", 0, [f"p{i}" for i in range(5)])]).status_code == 200
    p = init_producer(client, "relaxed", transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["t0", "t1", "t2"], 0)], p, "relaxed").status_code == 200
    assert send(client, [batch("out", 0, [f"q{i}" for i in range(5)])]).status_code == 200
    (described,) = client.get("/v1/topics/out").json()["partitions"]
    return described


def _walk(client, described: dict, isolation: str) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    """The offsets of the records read by following next-page links from the log start, and
    the offsets the links led to."""
    offset, read, offered = 0, [], []
    while True:
        page = fetch(client, "out", 0, offset=offset, isolation=isolation, max_records=PAGE)
        read += [r["offset"] for r in page["records"]]
        if not _pager("hasNext", page, described, isolation):
            return read, offered
        offset = page["next_offset"]
        offered.append(offset)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_following_next_page_reads_what_one_read_gives_and_no_link_passes_where_reads_end(  # type: ignore[no-untyped-def]
        client, database, partition, isolation: str) -> None:
    whole = [r["offset"] for r in fetch(client, "out", 0, isolation=isolation, max_records=1000)["records"]]
    end = partition["high_watermark"] if isolation == "read_uncommitted" else partition["log_end_offset"]

    read, offered = _walk(client, partition, isolation)

    assert read == whole
    assert [o for o in offered if o >= end] == []
    if database.dialect == "postgresql":
        assert whole == ([0, 1, 2, 3, 4] if isolation == "read_uncommitted" else [0, 1, 2, 3, 4, 8, 9, 10, 11, 12])


def test_a_read_committed_page_past_the_high_watermark_offers_the_next_one(client, database, partition) -> None:  # type: ignore[no-untyped-def]
    """p3, p4, q0 (offsets 3, 4, 8): its next_offset, 9, is past the high watermark on PostgreSQL."""
    page = fetch(client, "out", 0, offset=3, max_records=PAGE)

    assert ([r["offset"] for r in page["records"]], page["next_offset"]) == ([3, 4, 8], 9)
    assert _pager("hasNext", page, partition, "read_committed") is True


def test_a_read_committed_page_that_found_nothing_more_offers_none(client, database, partition) -> None:  # type: ignore[no-untyped-def]
    """A second such transaction at the log end (offsets 13-14): a read from 13 finds no commit
    point and answers next_offset 13, below the log end; the same page is not offered again."""
    if database.dialect != "postgresql":
        pytest.skip("on SQLite nothing stops a read before the log end")
    p = init_producer(client, "tail", transaction_version=2, durability="commit")
    assert send(client, [batch("out", 0, ["u0", "u1"], 0)], p, "tail").status_code == 200
    (described,) = client.get("/v1/topics/out").json()["partitions"]

    page = fetch(client, "out", 0, offset=13, max_records=PAGE)

    assert (page["records"], page["next_offset"], described["log_end_offset"]) == ([], 13, 15)
    assert _pager("hasNext", page, described, "read_committed") is False


@pytest.mark.parametrize(("isolation", "postgresql", "sqlite"), [("read_uncommitted", 2, 10), ("read_committed", 10, 10)])
def test_the_newest_page_ends_where_reads_of_its_isolation_end(  # type: ignore[no-untyped-def]
        database, partition, isolation: str, postgresql: int, sqlite: int) -> None:
    expected = postgresql if database.dialect == "postgresql" else sqlite

    assert _pager("newest", partition, isolation, PAGE) == expected
