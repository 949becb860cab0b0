"""PROTOTYPE, benchmarks only: what writing a json topic's headers also as two `text[]` columns
(benchmarks/header_arrays_prototype.py) would add to a Send's append on PostgreSQL.

A Send's append writes its records with one COPY in text format (app.storage.record_rows, lines
made by app.storage.dialect.copy_texts). Two tables of a scratch database, shaped as `records`'
columns a json topic's Send writes, one with the two arrays more; each turn appends --batches
batches of --records records, every record with --headers headers (the worst case: in the
Spark benchmarks one record in ten has headers), each batch one COPY and one commit, from the
decoded headers (dicts, as a Send's body gives them) to the committed rows:

- json: the headers' JSON text (orjson, as batch_of makes it), COPY lines, COPY;
- json_arrays: the same, and each record's names and values as two array literals, COPY
  lines of those too, COPY of the wider rows.

Turns alternate in an order shuffled each round (printed --seed); medians of --rounds rounds,
and json / json_arrays per round.

    .venv/bin/python benchmarks/header_arrays_send.py --rounds 9
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import orjson
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scratch import scratch_database  # noqa: E402

from app.storage.dialect import copy_texts  # noqa: E402

COLUMNS = '"partition" int NOT NULL, "offset" bigint NOT NULL, timestamp_ms bigint NOT NULL, key text, value text, headers text'
TABLES = {"json": f"CREATE TABLE send_json ({COLUMNS}, PRIMARY KEY (\"partition\", \"offset\"))",
          "json_arrays": f"CREATE TABLE send_json_arrays ({COLUMNS}, header_keys text[], header_values text[], "
                         "PRIMARY KEY (\"partition\", \"offset\"))"}


def array_literal(items: list[str]) -> str:
    """A PostgreSQL array literal of texts: each quoted, its backslashes and quotes escaped, so
    that commas, braces, spaces and the word NULL read as text."""
    return "{" + ",".join('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items) + "}"


def lines(start: int, keys: list[str], values: list[str], headers: list[dict[str, str]], arrays: bool) -> str:
    texts = [orjson.dumps(h).decode() for h in headers]
    columns = [copy_texts(keys), copy_texts(values), copy_texts(texts)]
    if arrays:
        columns.append(copy_texts([array_literal(list(h)) for h in headers]))
        columns.append(copy_texts([array_literal(list(h.values())) for h in headers]))
    now = int(time.time() * 1000)
    return "".join(f"0\t{start + i}\t{now}\t" + "\t".join(c[i] for c in columns) + "\n"  # type: ignore[index]
                   for i in range(len(keys)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--headers", type=int, default=2, help="headers per record")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)
    keys = [f"order-{i}" for i in range(args.records)]
    values = [orjson.dumps({"order_id": i, "income": i * 1.5}).decode() for i in range(args.records)]
    headers = [{f"h{j}": f"till-{i % 7}-{j}" for j in range(args.headers)} for i in range(args.records)]
    print(f"order shuffled each round, --seed {seed}", file=sys.stderr)
    with scratch_database("postgresql", "headers_send", migrate_with=()) as url:
        conninfo = url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(conninfo) as conn:
            for ddl in TABLES.values():
                conn.execute(ddl)
            conn.commit()
            next_offset = {name: 0 for name in TABLES}
            seconds: dict[str, list[float]] = {name: [] for name in TABLES}

            def turn(name: str) -> float:
                t0 = time.perf_counter()
                for _ in range(args.batches):
                    data = lines(next_offset[name], keys, values, headers, name == "json_arrays")
                    with conn.cursor().copy(f"COPY send_{name} FROM STDIN") as copy:
                        copy.write(data)
                    conn.commit()
                    next_offset[name] += args.records
                return time.perf_counter() - t0

            for round_ in range(args.rounds + 1):  # round 0 warms up
                took = {name: turn(name) for name in rng.sample(list(TABLES), len(TABLES))}
                print(f"  round {round_}{' (warm-up)' if round_ == 0 else ''}: "
                      + ", ".join(f"{n} {s:.3f}" for n, s in took.items()), file=sys.stderr)
                if round_:
                    for name, s in took.items():
                        seconds[name].append(s)
            sizes = {name: conn.execute(f"SELECT pg_total_relation_size('send_{name}')").fetchone()[0]  # type: ignore[index]
                     for name in TABLES}
    n = args.batches * args.records
    per_round = [a / b for a, b in zip(seconds["json"], seconds["json_arrays"])]
    for name in TABLES:
        m = statistics.median(seconds[name])
        print(f"{name}: median {m:.3f} s for {n:,} records, {m / n * 1e6:.2f} µs a record; "
              f"table and index {sizes[name] / (n * (args.rounds + 1)):.0f} bytes a record")
    print(f"json / json_arrays: median {statistics.median(per_round):.2f}, rounds "
          + ", ".join(f"{r:.2f}" for r in per_round))
    return 0


if __name__ == "__main__":
    sys.exit(main())
