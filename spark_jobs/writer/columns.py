"""The sink's columns: which the DataFrame has, checked on the driver before any task (one-line
errors), and how a value of any Spark type is sent as JSON (json_converter), as Spark's to_json
writes it."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegralType,
    MapType,
    StringType,
    StructType,
)

from spark_jobs.errors import OutboxSinkError
from spark_jobs.writer.options import SinkOptions

COLUMNS = ("topic", "partition", "key", "value", "headers")


@dataclass(frozen=True, slots=True)
class Columns:
    """Which of the sink's columns the DataFrame has (value always), and how value is sent."""

    topic: bool
    partition: bool
    key: bool
    headers: bool
    value_is_json_text: bool


def check_columns(schema: StructType, options: SinkOptions) -> Columns:
    """The DataFrame's columns against the sink's; OutboxSinkError (one line) for the first
    column of an unknown name or the wrong type."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    unknown = [f.name for f in schema.fields if f.name.lower() not in COLUMNS]
    if unknown:
        raise OutboxSinkError(f"column {unknown[0]!r} is not one the outbox sink writes; "
                              f"select {', '.join(COLUMNS)} (value required)")
    if "value" not in types:
        raise OutboxSinkError("the outbox sink needs a column value (JSON text, or any type, sent as its JSON)")
    if "topic" not in types and options.topic is None:
        raise OutboxSinkError("no output topic: give the option topic, or a column topic")

    def need(name: str, ok: bool, what: str) -> None:
        if name in types and not ok:
            raise OutboxSinkError(f"column {name} is {types[name].simpleString()}; the outbox sink needs {what}")

    need("topic", isinstance(types.get("topic"), StringType), "a string (cast it)")
    need("partition", isinstance(types.get("partition"), IntegralType), "an integer (cast it)")
    need("key", isinstance(types.get("key"), StringType), "a string or null (cast it)")
    headers = types.get("headers")
    need("headers", isinstance(headers, MapType) and isinstance(headers.keyType, StringType)
         and isinstance(headers.valueType, StringType), "map<string,string>")
    return Columns(topic="topic" in types, partition="partition" in types, key="key" in types,
                   headers="headers" in types, value_is_json_text=isinstance(types["value"], StringType))


def json_converter(data_type: DataType) -> Callable[[Any], Any] | None:
    """How a value of `data_type`, as Arrow hands it to Python, becomes a JSON value, as Spark's
    to_json writes it: structs and maps as objects, arrays as arrays, numbers as numbers
    (decimals through float, as the service stores any JSON number), dates and timestamps as
    ISO 8601 text, binary as base64. None: the value is JSON already (numbers, booleans, text).
    A string column is not converted here: it holds JSON text (see write_partition)."""
    from pyspark.sql.types import DateType, DecimalType, TimestampNTZType, TimestampType

    if isinstance(data_type, StructType):
        fields = [(f.name, json_converter(f.dataType)) for f in data_type.fields]
        return lambda v: None if v is None else {n: (v[n] if c is None else c(v[n])) for n, c in fields}
    if isinstance(data_type, MapType):
        kc, vc = json_converter(data_type.keyType), json_converter(data_type.valueType)
        # Arrow hands a map over as a list of (key, value) pairs; JSON keys are text.
        return lambda v: None if v is None else {
            str(k if kc is None else kc(k)): (x if vc is None else vc(x)) for k, x in v}
    if isinstance(data_type, ArrayType):
        ec = json_converter(data_type.elementType)
        return None if ec is None else (lambda v: None if v is None else [ec(x) for x in v])
    if isinstance(data_type, DecimalType):
        return lambda v: None if v is None else (int(v) if data_type.scale == 0 else float(v))
    if isinstance(data_type, (DateType, TimestampType, TimestampNTZType)):
        return lambda v: None if v is None else v.isoformat()
    if isinstance(data_type, BinaryType):
        return lambda v: None if v is None else base64.b64encode(v).decode()
    return None
