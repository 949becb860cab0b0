"""The JVM read's headers parser (spark_jobs.headers_jar, spark_jobs/java/outbox/spark/HeadersMap.java):
built once per source and PySpark version into a jar only its user can read, put in the
session's spark.jars by build_session, and used by the JVM read, which then gives from_json's
map for every text: the UDF's own where the text has the shape the service stores (and it must
make that shape itself, or the read would be from_json's speed under another name), from_json's
for any other text."""

from __future__ import annotations

import json
import logging
import random
import stat
from pathlib import Path

import pytest

from spark_jobs import headers_jar
from spark_jobs.datasource import read_outbox
from spark_jobs.reader.jvm import parsed_headers
from tests.conftest import unavailable
from tests.e2e.api import ok

MAP = "map<string,string>"

# Objects of strings as a Send stores them (json.dumps, compact, non-ASCII escaped or not), as
# jsonb prints them (a space after ':' and ','), and with every character JSON escapes.
SERVICE_SHAPED = [
    "{}", '{"a":"1"}', '{"b": "1", "a": "2"}', '{"": ""}',
    json.dumps({"q\"uote": "back\\slash", "sl/ash": "\b\f\n\r\t", "ctl": "\x00\x01\x1f\x7f"}),
    json.dumps({"caf\u00e9": "\u00fc\U0001f600", "\u2028": "\ufeff"}),
    json.dumps({"caf\u00e9": "\u00fc\U0001f600", "\u2028": "\ufeff"}, ensure_ascii=False),
    ' { "a" : "b" ,\n\t"c":"d"\r} ',
    '{"u":"\\u00E9\\u00e9\\/"}',
]
# Texts of other shapes: the UDF gives null and from_json decides.
OTHER_SHAPES = [
    '{"a":1}', '{"a":null}', '{"a":true}', '{"a":{"b":"c"}}', '{"a":["b"]}', '[]', '["a"]', '"a"', '1', 'null',
    '', ' ', '{', '{"a"', '{"a":"b"', '{"a":"b",}', '{"a":"b"} x', '{"a":"b"}}', "{'a':'b'}", '{a:"b"}',
    '{"a":"1","a":"2"}', '{"a":"\\x"}', '{"a":"\\u12"}', '{"a":"\\u12g4"}', '{"a":"b\x01c"}', '{"a\nb":"c"}', '{"a":"b" "c":"d"}',
]


def _random_objects(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = ["a", "Z", "0", " ", '"', "\\", "/", "\n", "\t", "\x00", "\x01", "\x1f", "\x7f", "\u00e9", "\u2028",
                "\ud7ff", "\ue000", "\uffff", "\U0001f600", "{", "}", ":", ","]

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 8)))

    out = []
    for _ in range(n):
        obj = {text(): text() for _ in range(rng.randrange(0, 5))}
        separators = rng.choice([(",", ":"), (", ", ": ")])
        out.append(json.dumps(obj, ensure_ascii=rng.random() < 0.5, separators=separators))
    return out


@pytest.fixture(scope="module")
def with_udf(spark) -> object:  # type: ignore[no-untyped-def]
    if headers_jar.javac_executable() is None:
        unavailable("no javac: the headers parser needs a JDK (apt-get install -y openjdk-17-jdk-headless)")
    assert headers_jar.register_headers_udf(spark), "build_session put no headers parser in the session"
    return spark


def _compared(spark, texts: list[str | None]) -> list[tuple[str | None, str | None, str | None]]:  # type: ignore[no-untyped-def]
    """(from_json's map, the JVM read's, the UDF's alone) of each text, each map as JSON."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, headers string")
    rows = df.select("i", F.to_json(F.from_json("headers", MAP)).alias("reference"),
                     F.to_json(parsed_headers("headers", udf=True)).alias("read"),
                     F.to_json(F.call_function(headers_jar.FUNCTION, F.col("headers"))).alias("udf")
                     ).orderBy("i").collect()
    return [(r["reference"], r["read"], r["udf"]) for r in rows]


def test_the_read_gives_from_jsons_map_and_the_udf_makes_every_object_of_strings(with_udf) -> None:  # type: ignore[no-untyped-def]
    texts = [None, *SERVICE_SHAPED, *_random_objects(400, seed=7)]
    for text, (reference, read, udf) in zip(texts, _compared(with_udf, texts), strict=True):
        assert read == reference, text
        assert udf == reference, text  # the UDF's own map, the entries in the object's order
    assert all(reference is not None for reference, _, _ in _compared(with_udf, SERVICE_SHAPED))


def test_a_text_of_any_other_shape_is_left_to_from_json(with_udf) -> None:  # type: ignore[no-untyped-def]
    for text, (reference, read, udf) in zip(OTHER_SHAPES, _compared(with_udf, OTHER_SHAPES), strict=True):
        assert udf is None, text
        assert read == reference, text
    # from_json keeps what the UDF leaves: a number's text, a JSON null, both entries of a name
    # given twice.
    by_text = dict(zip(OTHER_SHAPES, _compared(with_udf, OTHER_SHAPES), strict=True))
    assert by_text['{"a":1}'][1] == '{"a":"1"}' and by_text['{"a":null}'][1] == '{"a":null}'
    assert by_text['{"a":"1","a":"2"}'][1] == '{"a":"1","a":"2"}'


def test_the_jvm_read_parses_headers_with_the_udf(with_udf, backend, url, client) -> None:  # type: ignore[no-untyped-def]
    ok(client.post("/v1/topics", json={"name": "headers-parser", "partitions": 1}), 201)
    ok(client.post("/v1/records", json={"batches": [{"topic": "headers-parser", "partition": 0, "records": [
        {"value": {"n": 1}, "headers": {"b": "1", "a": "\u00e9\n"}}, {"value": {"n": 2}}]}]}))
    df = read_outbox(with_udf, reader="jvm", url=url, databaseUrl=backend.url, topics="headers-parser")
    assert headers_jar.FUNCTION in df._jdf.queryExecution().analyzed().toString()
    assert [r["headers"] for r in df.orderBy("offset").collect()] == [{"b": "1", "a": "\u00e9\n"}, None]
    as_json = read_outbox(with_udf, reader="jvm", url=url, databaseUrl=backend.url, topics="headers-parser",
                          headersFormat="json")
    assert headers_jar.FUNCTION not in as_json._jdf.queryExecution().analyzed().toString()


def test_build_session_puts_the_jar_in_spark_jars(with_udf) -> None:  # type: ignore[no-untyped-def]
    jars = with_udf.sparkContext.getConf().get("spark.jars", "")
    assert any(Path(j.removeprefix("file:")).name.startswith(headers_jar.JAR_PREFIX) for j in jars.split(","))


def test_a_session_without_the_jar_reads_with_from_json(with_udf) -> None:  # type: ignore[no-untyped-def]
    assert not headers_jar.register_headers_udf(with_udf, class_name="outbox.spark.NoSuchClass")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    import os

    return {"PATH": os.environ["PATH"], "XDG_CACHE_HOME": str(tmp_path / "cache"), **extra}


def test_the_jar_is_built_once_and_readable_by_its_user_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if headers_jar.javac_executable() is None:
        unavailable("no javac: the headers parser needs a JDK (apt-get install -y openjdk-17-jdk-headless)")
    jar = headers_jar.headers_jar(_env(tmp_path))
    assert jar is not None and jar.parent == tmp_path / "cache" / "outbox-spark"
    assert stat.S_IMODE(jar.parent.stat().st_mode) == 0o700 and stat.S_IMODE(jar.stat().st_mode) == 0o600
    import zipfile

    assert "outbox/spark/HeadersMap.class" in zipfile.ZipFile(jar).namelist()
    assert list(jar.parent.iterdir()) == [jar]  # the build's own directory is gone
    # Built: found again with no JDK at all.
    assert headers_jar.headers_jar(_env(tmp_path, PATH="/nonexistent")) == jar


def test_no_javac_means_no_jar_and_says_why(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="spark_jobs.headers_jar")
    assert headers_jar.headers_jar(_env(tmp_path, PATH="/nonexistent")) is None
    assert headers_jar.headers_jar(_env(tmp_path, JAVA_HOME=str(tmp_path))) is None
    assert "openjdk-17-jdk-headless" in caplog.text
    assert not (tmp_path / "cache" / "outbox-spark").exists()


def test_a_source_that_does_not_compile_means_no_jar_and_a_warning(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    if headers_jar.javac_executable() is None:
        unavailable("no javac: the headers parser needs a JDK (apt-get install -y openjdk-17-jdk-headless)")
    broken = tmp_path / "HeadersMap.java"
    broken.write_text("package outbox.spark; public final class HeadersMap { oops }\n")
    assert headers_jar.headers_jar(_env(tmp_path), source=broken) is None
    assert "building HeadersMap.java failed" in caplog.text
    assert list((tmp_path / "cache" / "outbox-spark").iterdir()) == []


def test_the_module_prints_the_jars_path_for_spark_submit_or_says_why_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    if headers_jar.javac_executable() is None:
        unavailable("no javac: the headers parser needs a JDK (apt-get install -y openjdk-17-jdk-headless)")
    built = subprocess.run([sys.executable, "-m", "spark_jobs.headers_jar"], env=_env(tmp_path),
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    assert Path(built.stdout.strip()).is_file() and Path(built.stdout.strip()).parent == tmp_path / "cache" / "outbox-spark"
    missing = subprocess.run([sys.executable, "-m", "spark_jobs.headers_jar"],
                             env=_env(tmp_path / "other", PATH="/nonexistent"), capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1 and missing.stdout == "" and "openjdk-17-jdk-headless" in missing.stderr
