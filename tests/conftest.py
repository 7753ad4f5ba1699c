"""Fixtures shared by the end-to-end tests: one SparkSession for the whole run, and every
full (uninterrupted) run of a test query computed once and shared between tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import harness
import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """local[2] session configured with ``spillstore.configure`` (jar on spark.jars, provider
    class spillstore); ``harness.run_query`` switches the provider per query."""
    session = harness.start_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def full_run(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, str], harness.Run]:
    """``full_run(query, provider)``: the query run once over all input batches with a new
    checkpoint and the given provider; cached for the session."""
    cache: dict[tuple[str, str], harness.Run] = {}

    def get(query: str, provider: str) -> harness.Run:
        if (query, provider) not in cache:
            tag = "spillstore" if provider == harness.SPILLSTORE else "default"
            workdir: Path = tmp_path_factory.mktemp(f"{query}-{tag}-")
            inputs = harness.write_inputs(
                workdir, harness.QUERIES[query].sources, range(harness.NUM_BATCHES))
            cache[(query, provider)] = harness.run_query(
                spark, query, inputs, workdir / "checkpoint", workdir / "output", provider)
        return cache[(query, provider)]

    return get
