"""conf/spillstore.properties selects spillstore and its examples are well-formed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import spillstore

PROPERTIES = Path(__file__).resolve().parents[1] / "conf" / "spillstore.properties"
# java.util.Properties: key, then '=', ':' or whitespace, then the value
_ENTRY = re.compile(r"([^\s=:]+)\s*[=:\s]\s*(.*)")
_COMMENTED_ENTRY = re.compile(r"[#!]\s*(spark\.[^\s=:]+\s*[=:\s].*)")


def _entries(lines: list[str]) -> dict[str, str]:
    entries = {}
    for line in lines:
        m = _ENTRY.fullmatch(line.strip())
        assert m, f"not a key/value line: {line!r}"
        assert m.group(1) not in entries, f"{m.group(1)} set twice"
        entries[m.group(1)] = m.group(2).strip()
    return entries


def _lines() -> list[str]:
    return [line.strip() for line in PROPERTIES.read_text().splitlines()]


def test_sets_the_provider_class() -> None:
    active = _entries([ln for ln in _lines() if ln and not ln.startswith(("#", "!"))])
    assert active == {spillstore.PROVIDER_CLASS_CONF: spillstore.PROVIDER_CLASS,
                      spillstore.PLUGINS_CONF: spillstore.PLUGIN_CLASS,
                      "spark.sql.streaming.streamingQueryListeners": "spillstore.ProviderCheck"}


def test_commented_examples_are_valid_entries() -> None:
    examples = _entries([m.group(1) for ln in _lines() if (m := _COMMENTED_ENTRY.fullmatch(ln))])
    assert "spark.jars" in examples
    assert "spark.sql.streaming.stateStore.compression.codec" in examples
    for key in (k for k in examples if k.startswith(spillstore.CONF_PREFIX)):
        name = key[len(spillstore.CONF_PREFIX):]
        assert spillstore.option_key(name) == key, f"{key}: not a camelCase option name"
    for key in examples:
        assert key.startswith(("spark.sql.streaming.", "spark.jars", "spark.metrics.")), key
    assert examples["spark.metrics.conf.*.sink.prometheusServlet.class"] == \
        "org.apache.spark.metrics.sink.PrometheusServlet"


def test_lists_every_option_of_the_readme_with_its_default() -> None:
    """Every spillstore option of the README's configuration table is in the file, with the
    README's default where it has one, and no other spillstore option is."""
    readme = (PROPERTIES.parents[1] / "README.md").read_text()
    table = dict(re.findall(
        rf"^\| `({re.escape(spillstore.CONF_PREFIX)}[A-Za-z]+)` \| ([^|]*) \|", readme, re.M))
    assert len(table) >= 7, table
    examples = _entries([m.group(1) for ln in _lines() if (m := _COMMENTED_ENTRY.fullmatch(ln))])
    listed = {k: v for k, v in examples.items() if k.startswith(spillstore.CONF_PREFIX)}
    assert set(listed) == set(table)
    for key, default in table.items():
        if default.strip().startswith("`"):
            assert listed[key] == default.strip().strip("`"), key


def test_spark_reads_the_file_as_spark_submit_does(spark: Any) -> None:
    """The file through Spark's own loader (the one spark-submit uses for --properties-file)."""
    props = spark._jvm.org.apache.spark.util.Utils.getPropertiesFromFile(str(PROPERTIES))
    assert props.size() == 3
    assert props.get(spillstore.PROVIDER_CLASS_CONF).get() == spillstore.PROVIDER_CLASS
    assert props.get(spillstore.PLUGINS_CONF).get() == spillstore.PLUGIN_CLASS
