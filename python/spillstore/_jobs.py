"""The local streaming job that the demo (:mod:`spillstore.cli`) and each benchmark run
(:mod:`spillstore.bench._worker`) start: the providers they can select, the session they run
on and the skewed keys they group by."""

from __future__ import annotations

from typing import Any

from ._config import PROVIDERS

__all__ = ["PROVIDERS", "local_builder", "skewed_key"]


def local_builder(app_name: str) -> Any:
    """A ``SparkSession.Builder`` for ``local[2]`` with 4 shuffle partitions and no UI: the
    session of the demo and of each benchmark run."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )


def skewed_key(keys: int) -> Any:
    """A key in [0, keys) with a log-uniform (Zipf-like, P(k) ~ 1/k) distribution, computed
    from the rate source's ``value``: key 0 gets ~ln 2/ln(keys+1) of the rows, most keys are
    cold."""
    from pyspark.sql import functions as F

    uniform = F.pmod(F.xxhash64("value"), F.lit(1_000_003)) / F.lit(1_000_003.0)
    return (F.floor(F.pow(F.lit(float(keys + 1)), uniform)) - 1).cast("long")
