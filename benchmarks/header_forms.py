"""Benchmarks only: a record's headers in forms Spark turns into the data source's `headers`
(map<string,string>) without a JSON parse, each made from the stored JSON object's text and
turned back into the map (benchmarks/spark_source.py's headers_* variants; docs/SPARK.md,
"Headers without a JSON parse, measured (2026-12-07)"). Nothing of the service or of the reader
writes or reads these forms.

- Delimited text: the object's entries in its order, each name and value joined by KV
  (U+0002), the entries joined by PAIR (U+0001), made a map by Spark's str_to_map. A header's
  name or value may hold any character but NUL (app.domain.records.check_text,
  app.domain.kafka_records), U+0001 and U+0002 included, so each name and value is escaped:
  ESC (U+0003) as ESC 'c', U+0001 as ESC 'a', U+0002 as ESC 'b' (ESC first, so that the ESCs
  the other two bring are not escaped again). The escaped text holds U+0001 and U+0002 only as
  delimiters, and ESC only as the start of one of the three pairs, so undoing the three
  replacements in the other order gives each text back. A text without ESC (every header whose
  names and values hold none of the three characters) is made a map by str_to_map alone; the
  others are unescaped name by name and value by value. An empty object is the empty text
  (str_to_map makes that {"": null}, so it is tested first), no headers NULL.
- Two arrays: names and values in the object's order, made a map by map_from_arrays.
- The JSON text itself, made a map by the JVM read's Java UDF (spark_jobs.headers_jar), which
  reads only the shape the service stores, in one pass, where from_json makes a general parser
  per row: no stored form at all.

delimited_sql and arrays_sql make the same forms on PostgreSQL from the stored text (what a
view would do), the object's order kept by json_each_text over the text as `json`.
"""

from __future__ import annotations

import json
from typing import Any

MAP = "map<string,string>"
PAIR, KV, ESC = "\x01", "\x02", "\x03"
# What each of the three characters becomes in an escaped name or value, in escaping order.
ESCAPES = ((ESC, ESC + "c"), (PAIR, ESC + "a"), (KV, ESC + "b"))

# Header objects a Send may store (any character but NUL in a name or value) that a delimited
# form must carry exactly: the delimiters and ESC themselves, sequences that look escaped, an
# empty name and value, an empty object, no headers, non-ASCII, the object's order, and a
# stored text with spaces (jsonb's print, which rows appended in-database before migration 0013
# keep). The fill's headers hold none of the three characters.
EDGE_CASES: list[str | None] = [
    None,
    "{}",
    json.dumps({"": ""}),
    json.dumps({"a": "1"}),
    json.dumps({"b": "1", "a": "2"}),
    '{"a": "2", "bb": "1"}',
    json.dumps({"k\x01": "v\x02"}),
    json.dumps({"a\x02b": "c\x01d", "x": "\x01\x02\x03"}),
    json.dumps({"\x03a": "\x03b\x03c\x03", "\x03": "\x03\x03a"}),
    json.dumps({"p\x02q": "\x03c", "\x03": ""}, ensure_ascii=False),
    json.dumps({"caf\u00e9": "\u00fc\U0001f600", "back\\slash": 'quote"d', "nl": "a\nb\tc\x04"}, ensure_ascii=False),
]


def from_udf(text: Any) -> Any:
    """The map of a JSON object's text (a column or its name) by the JVM read's UDF alone
    (spark_jobs.headers_jar; without from_json for the texts it gives null for): the session
    must have it (register_headers_udf)."""
    from pyspark.sql import functions as F

    from spark_jobs.headers_jar import FUNCTION

    return F.call_function(FUNCTION, F.col(text) if isinstance(text, str) else text)


def _replaced(column: Any, pairs: Any) -> Any:
    from pyspark.sql import functions as F

    for old, new in pairs:
        column = F.replace(column, F.lit(old), F.lit(new))
    return column


def delimited(headers: Any, *, escaped: bool = True) -> Any:
    """The delimited text of `headers` (a map column, from_json's): NULL for NULL, '' for an
    empty map. escaped=False: names and values as they are, a form only for headers that hold
    neither delimiter (which the service does not refuse)."""
    from pyspark.sql import functions as F

    def esc(c: Any) -> Any:
        return _replaced(c, ESCAPES) if escaped else c

    return F.array_join(F.transform(F.map_entries(headers), lambda e: F.concat(
        esc(e["key"]), F.lit(KV), esc(e["value"]))), PAIR)


def from_delimited(text: Any, *, escaped: bool = True) -> Any:
    """The map of a delimited text (a column or its name): str_to_map, the empty text an empty
    map; escaped=True, the names and values of a text holding ESC unescaped."""
    from pyspark.sql import functions as F

    t = F.col(text) if isinstance(text, str) else text
    made = F.str_to_map(t, F.lit(PAIR), F.lit(KV))
    out = F.when(t == "", F.create_map().cast(MAP))
    if escaped:
        undo = [(new, old) for old, new in reversed(ESCAPES)]
        out = out.when(F.instr(t, ESC) > 0, F.transform_values(
            F.transform_keys(made, lambda k, _: _replaced(k, undo)), lambda _, v: _replaced(v, undo)))
    return out.otherwise(made)


def from_arrays(keys: Any, values: Any) -> Any:
    from pyspark.sql import functions as F

    return F.map_from_arrays(keys, values)


def differing_rows(frame: Any, column: str = "headers", delimited_column: str | None = None,
                   udf: bool = False) -> dict[str, int]:
    """Rows of `frame` whose map made through each form from the row's own JSON text (`column`)
    differs from from_json's map of it, compared as JSON (to_json: the entries' order counts, as
    it shows in the map), by form: `escaped` (delimited text, escaped), `unescaped` (delimited
    text as it is, str_to_map alone), `arrays`, and `given` (`delimited_column`, a delimited
    text made elsewhere, e.g. by delimited_sql, when named), and `udf` (the UDF over the row's
    own JSON text, when udf is true: the session must have it)."""
    from pyspark.sql import functions as F

    from spark_jobs.reader.jvm import parsed_headers

    parsed = parsed_headers(column)
    forms = {"escaped": from_delimited(delimited(parsed)),
             "unescaped": from_delimited(delimited(parsed, escaped=False), escaped=False),
             "arrays": from_arrays(F.map_keys(parsed), F.map_values(parsed))}
    if delimited_column is not None:
        forms["given"] = from_delimited(delimited_column)
    if udf:
        forms["udf"] = from_udf(column)
    reference = F.to_json(parsed)
    row = frame.select(*[F.sum(F.when(reference.eqNullSafe(F.to_json(made)), 0).otherwise(1)).alias(name)
                         for name, made in forms.items()]).first()
    return {name: int(row[name]) for name in forms}


def _escaped_sql(text: str) -> str:
    for old, new in ESCAPES:
        text = f"replace({text}, {_chars_sql(old)}, {_chars_sql(new)})"
    return text


def _chars_sql(s: str) -> str:
    return " || ".join(f"chr({ord(c)})" if ord(c) < 32 else f"'{c}'" for c in s)


def delimited_sql(column: str) -> str:
    """PostgreSQL: the delimited text (escaped) of the JSON object's text in `column`, the
    object's order kept; NULL for NULL, '' for an empty object."""
    return (f"CASE WHEN {column} IS NULL THEN NULL ELSE (SELECT coalesce(string_agg("
            f"{_escaped_sql('e.k')} || {_chars_sql(KV)} || {_escaped_sql('e.v')}, {_chars_sql(PAIR)} ORDER BY e.n), '') "
            f"FROM json_each_text({column}::json) WITH ORDINALITY AS e(k, v, n)) END")


def arrays_sql(relation: str, column: str = "headers") -> str:
    """PostgreSQL: every row of `relation` as two text[] columns, header_keys and header_values,
    made from the JSON object's text in `column` (as benchmarks/header_arrays_prototype.py fills
    them); NULL for NULL, two empty arrays for an empty object."""
    return (f"SELECT CASE WHEN r.{column} IS NULL THEN NULL ELSE coalesce(a.k, '{{}}') END AS header_keys, "
            f"CASE WHEN r.{column} IS NULL THEN NULL ELSE coalesce(a.v, '{{}}') END AS header_values "
            f"FROM {relation} r CROSS JOIN LATERAL (SELECT array_agg(e.k ORDER BY e.n) AS k, "
            f"array_agg(e.v ORDER BY e.n) AS v FROM json_each_text(r.{column}::json) WITH ORDINALITY AS e(k, v, n)) a")
