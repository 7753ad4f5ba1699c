"""The Spark lines spillstore is built for, and which bundled jar serves which pyspark."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

__all__ = ["SPARK_LINES", "SUPPORTED_PYSPARK", "SparkLine", "line_of", "supported_lines_text"]


@dataclass(frozen=True)
class SparkLine:
    """One Spark line: its ``major.minor``, the Scala version its pyspark ships, its jar."""

    line: str
    scala: str

    @property
    def jar(self) -> str:
        return f"spillstore-spark{self.line}_{self.scala}.jar"


def _read_lines() -> dict[str, SparkLine]:
    """The rows of ``spark_lines.txt`` (line, Spark, Scala and Hadoop versions, roles), the list
    build.sbt and the Makefile read too."""
    text = resources.files("spillstore").joinpath("spark_lines.txt").read_text(encoding="utf-8")
    rows = [row.split() for row in text.splitlines() if row.strip() and not row.startswith("#")]
    return {row[0]: SparkLine(row[0], ".".join(row[2].split(".")[:2])) for row in rows}


SPARK_LINES: dict[str, SparkLine] = _read_lines()
"""Spark ``major.minor`` -> its line; each line's jar is compiled against that line's API."""


def _supported_range(lines: list[str]) -> str:
    first = min(lines, key=lambda v: tuple(map(int, v.split("."))))
    major, minor = max(tuple(map(int, v.split("."))) for v in lines)
    return f">={first}.0,<{major}.{minor + 1}"


SUPPORTED_PYSPARK = _supported_range(list(SPARK_LINES))
"""The pyspark versions spillstore supports: from its first line to the end of its last (the
package's requirement in pyproject.toml says the same; tests/test_package.py checks it)."""

_MAJOR_MINOR = re.compile(r"(\d+)\.(\d+)(?:[.+-]|[a-z]|$)")


def line_of(pyspark_version: str) -> SparkLine | None:
    """The line serving ``pyspark_version`` (``"3.5.3"``, ``"4.3.1.dev0"``), or None."""
    match = _MAJOR_MINOR.match(pyspark_version)
    return SPARK_LINES.get(f"{match.group(1)}.{match.group(2)}") if match else None


def supported_lines_text() -> str:
    """``3.5, 4.0, 4.1, 4.2 and 4.3``, for error messages."""
    names = [f"{line}" for line in SPARK_LINES]
    return ", ".join(names[:-1]) + " and " + names[-1]
