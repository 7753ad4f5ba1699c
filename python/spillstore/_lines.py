"""The Spark lines spillstore is built for, and which bundled jar serves which pyspark."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SPARK_LINES", "SUPPORTED_PYSPARK", "SparkLine", "line_of", "supported_lines_text"]


@dataclass(frozen=True)
class SparkLine:
    """One Spark line: its ``major.minor``, the Scala version its pyspark ships, its jar."""

    line: str
    scala: str

    @property
    def jar(self) -> str:
        return f"spillstore-spark{self.line}_{self.scala}.jar"


SPARK_LINES: dict[str, SparkLine] = {
    line.line: line
    for line in (
        SparkLine("3.5", "2.12"),
        SparkLine("4.0", "2.13"),
        SparkLine("4.1", "2.13"),
        SparkLine("4.2", "2.13"),
        SparkLine("4.3", "2.13"),
    )
}
"""Spark ``major.minor`` -> its line; each line's jar is compiled against that line's API."""

SUPPORTED_PYSPARK = ">=3.5.0,<4.4"
"""The pyspark versions spillstore supports (as in the package's requirements)."""

_MAJOR_MINOR = re.compile(r"(\d+)\.(\d+)(?:[.+-]|[a-z]|$)")


def line_of(pyspark_version: str) -> SparkLine | None:
    """The line serving ``pyspark_version`` (``"3.5.3"``, ``"4.3.1.dev0"``), or None."""
    match = _MAJOR_MINOR.match(pyspark_version)
    return SPARK_LINES.get(f"{match.group(1)}.{match.group(2)}") if match else None


def supported_lines_text() -> str:
    """``3.5, 4.0, 4.1, 4.2 and 4.3``, for error messages."""
    names = [f"{line}" for line in SPARK_LINES]
    return ", ".join(names[:-1]) + " and " + names[-1]
