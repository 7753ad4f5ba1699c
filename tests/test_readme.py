"""The README's metric table against the Python package's list of metrics, and its Maven
coordinates against the package's version (no Spark session).

The table is generated from the JVM side's metric definitions
(``jvm/src/test/scala/spillstore/DocTables.scala``, checked by ``ReadmeSuite.scala``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import spillstore
from spillstore import _config
from spillstore.metrics import METRICS

README = Path(__file__).resolve().parent.parent / "README.md"
CONNECT_DOC = README.parent / "docs" / "connect.md"


def first_table(lines: list[str], heading: str) -> list[str]:
    """The body rows of the first table after ``heading`` (header and separator dropped)."""
    at = lines.index(heading)
    rows: list[str] = []
    for line in lines[at + 1:]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows[2:]


def names(rows: list[str]) -> list[str]:
    """The code-formatted names in each row's first cell, without annotations in parentheses."""
    found: list[str] = []
    for row in rows:
        first = re.sub(r"\([^)]*\)", "", row.strip("|").split("|")[0])
        found += re.findall(r"`([^`]+)`", first)
    return found


def test_metric_table_lists_exactly_the_packages_metrics() -> None:
    listed = names(first_table(README.read_text(encoding="utf-8").splitlines(), "## Metrics"))
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert set(listed) == set(METRICS), (
        f"in METRICS only: {sorted(set(METRICS) - set(listed))}; "
        f"in the README only: {sorted(set(listed) - set(METRICS))}")


def test_maven_coordinates_are_this_version() -> None:
    # The version is written once (python/spillstore/VERSION); the `--packages` coordinates of
    # the README and docs/connect.md, which users copy, must follow it.
    found = re.findall(r"io\.spillstore:spillstore-spark[^:`\s]+:([^`\s]+)",
                       "".join(p.read_text(encoding="utf-8") for p in (README, CONNECT_DOC)))
    assert found, "the README gives no --packages coordinates"
    assert set(found) == {spillstore.__version__}, found


def test_connect_server_command_has_every_conf_a_client_cannot_set() -> None:
    text = CONNECT_DOC.read_text(encoding="utf-8")
    for key, value in _config._server_confs().items():
        assert f"--conf {key}={value}" in text, f"{key} is not in the server's command"


def test_parser_reads_first_cells_and_needs_the_section() -> None:
    text = ["## A", "", "| m | x |", "|---|---|", "| `a` / `b` (`src`) | `c` |", "", "| `d` | e |"]
    assert names(first_table(text, "## A")) == ["a", "b"]
    with pytest.raises(ValueError):
        first_table(text, "## B")
