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


# spillstore options that make every committed entry leave the heap at the next growth.
EVERYTHING_SPILLS = {"memoryBudget": "1"}


@pytest.fixture(scope="session")
def full_run(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., harness.Run]:
    """``full_run(query, provider, spill=False)``: the query run once over all input batches
    with a new checkpoint and the given provider (with ``spill``, spillstore under a budget that
    spills everything); cached for the session."""
    cache: dict[tuple[str, str, bool], harness.Run] = {}

    def get(query: str, provider: str, spill: bool = False) -> harness.Run:
        if (query, provider, spill) not in cache:
            tag = "spillstore" if provider == harness.SPILLSTORE else "default"
            workdir: Path = tmp_path_factory.mktemp(f"{query}-{tag}{'-spill' if spill else ''}-")
            inputs = harness.write_inputs(
                workdir, harness.QUERIES[query].sources, range(harness.NUM_BATCHES))
            cache[(query, provider, spill)] = harness.run_query(
                spark, query, inputs, workdir / "checkpoint", workdir / "output", provider,
                options=EVERYTHING_SPILLS if spill else None)
        return cache[(query, provider, spill)]

    return get
