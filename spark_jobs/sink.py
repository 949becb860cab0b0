"""The name users' code imports write_outbox by (docs/SPARK.md, "The sink"): a re-export. The
sink itself is spark_jobs.writer; write_outbox is defined in spark_jobs.datasource."""

from __future__ import annotations

from spark_jobs.datasource import write_outbox

__all__ = ["write_outbox"]
