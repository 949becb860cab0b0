"""benchmarks/header_forms.py's forms of the headers made into the data source's map without a
JSON parse (benchmarks only): over header objects holding the very characters the delimited
form delimits and escapes with (EDGE_CASES), the delimited text Spark makes of from_json's map
is the form's text (each name and value escaped, U+0003 first, then U+0001 and U+0002; entries
in the object's order), str_to_map over that text (from_delimited) gives from_json's map with
its entries in order, and so does map_from_arrays over the map's names and values; str_to_map
alone (escaped=False) does not, where a name or value holds a delimiter."""

from __future__ import annotations

import json

from benchmarks.header_forms import EDGE_CASES, MAP, delimited, from_arrays, from_delimited


def _escaped(t: str) -> str:
    return t.replace("\x03", "\x03c").replace("\x01", "\x03a").replace("\x02", "\x03b")


def _form(stored: str | None) -> str | None:
    if stored is None:
        return None
    return "\x01".join(_escaped(k) + "\x02" + _escaped(v) for k, v in json.loads(stored).items())


def test_each_form_gives_from_jsons_map_in_the_objects_order(spark) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(i, c) for i, c in enumerate(EDGE_CASES)], "i int, headers string")
    parsed = F.from_json("headers", MAP)
    rows = df.select("i", delimited(parsed).alias("d")).orderBy("i").collect()
    assert [r.d for r in rows] == [_form(c) for c in EDGE_CASES]

    made = df.select("i", delimited(parsed).alias("d"), delimited(parsed, escaped=False).alias("raw"),
                     F.map_keys(parsed).alias("k"), F.map_values(parsed).alias("v")).select(
        "i", F.to_json(from_delimited("d")).alias("escaped"),
        F.to_json(from_delimited("raw", escaped=False)).alias("unescaped"),
        F.to_json(from_arrays("k", "v")).alias("arrays")).orderBy("i").collect()
    # to_json of the map: its entries in order, as from_json kept the object's.
    expected = [None if c is None else json.dumps(json.loads(c), separators=(",", ":"), ensure_ascii=False)
                for c in EDGE_CASES]
    assert [r.escaped for r in made] == expected
    assert [r.arrays for r in made] == expected
    wrong = [i for i, r in enumerate(made) if r.unescaped != expected[i]]
    assert wrong == [i for i, c in enumerate(EDGE_CASES) if c is not None and any(
        ch in k + v for k, v in json.loads(c).items() for ch in "\x01\x02")]
    assert len(wrong) >= 2
