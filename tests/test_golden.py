"""Every release's golden checkpoints (tests/golden/<version>/, written by that release with
``golden_job.py``) resumed by this build: a checkpoint format change must never strand a
user's state.

Each golden checkpoint holds the first input batches of one query of ``harness.QUERIES``
(spillstore's journals and snapshots, and from 0.2.0 the runs its snapshots list; Spark's logs)
and what the release output for them. It is copied and moved to a new input directory (the
file source's log names the files it read by absolute path: those are rewritten, as a user
moving a checkpoint with its input would), then resumed with spillstore over the whole input, of
which it reads only the files it had not; the release's output plus the resumed run's must be,
batch by batch, the output of Spark's default provider over the whole input. Spark reads
checkpoints of its own and older lines only, so a golden checkpoint runs on Spark lines at or
after the one that wrote it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harness
import pytest

GOLDEN = Path(__file__).with_name("golden")
RELEASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "golden.json").is_file())


def _meta(release: str) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((GOLDEN / release / "golden.json").read_text())
    return meta


def _move_input(checkpoint: Path, input_root: Path) -> None:
    """Point the file sources' logs in ``checkpoint`` at the same files under ``input_root``."""
    for entry in checkpoint.glob("sources/*/[0-9]*"):
        lines = entry.read_text().splitlines()
        files = [json.loads(line) for line in lines[1:]]
        for f in files:
            f["path"] = re.sub(r"^.*?/input/", input_root.as_uri() + "/", f["path"])
        entry.write_text("\n".join([lines[0], *(json.dumps(f) for f in files)]))
        # The log's checksum file would no longer match; Hadoop checks only those that exist.
        (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)


def test_every_release_has_golden_checkpoints_of_every_query() -> None:
    assert RELEASES, "no golden checkpoints"
    for release in RELEASES:
        assert _meta(release)["spillstore"] == release
        assert {p.name for p in (GOLDEN / release).iterdir() if p.is_dir()} >= set(harness.QUERIES)
    # The recovery paths a user's checkpoint takes: a snapshot with journals after it, the
    # snapshot either a whole one (format 2, 0.1.0) or a manifest of sorted runs (format 3).
    state_files = [p.name for p in GOLDEN.rglob("state/*/*/*") if p.is_file()]
    assert any(n.endswith(".snapshot") for n in state_files)
    assert any(n.endswith(".journal") for n in state_files)
    assert any(n.endswith(".run") for n in state_files), "no golden checkpoint of format 3"


@pytest.mark.parametrize("release,query",
                         [(r, q) for r in RELEASES for q in sorted(harness.QUERIES)])
def test_release_checkpoint_resumes_exactly(
    spark: Any, full_run: Callable[[str, str], harness.Run], tmp_path: Path,
    release: str, query: str,
) -> None:
    meta = _meta(release)
    written_by = tuple(int(p) for p in meta["spark"].split(".")[:2])
    if harness.SPARK_LINE < written_by:
        pytest.skip(f"written by Spark {meta['spark']}; this is an older line")
    golden = GOLDEN / release / query
    checkpoint = shutil.copytree(golden / "checkpoint", tmp_path / "checkpoint")
    spec = harness.QUERIES[query]
    inputs = harness.write_inputs(tmp_path, spec.sources, range(harness.NUM_BATCHES))
    _move_input(checkpoint, tmp_path / "input")
    resumed = harness.run_query(spark, query, inputs, checkpoint, tmp_path / "output",
                                harness.SPILLSTORE)
    assert harness.checkpoint_provider(checkpoint) == {harness.SPILLSTORE}
    released = harness.read_outputs(golden / "output")
    assert released and resumed.outputs, "both parts of the input produce batches"
    assert not set(released) & set(resumed.outputs), "the resumed run continues the batch ids"
    expected = full_run(query, harness.DEFAULT).outputs
    actual = {**released, **resumed.outputs}
    assert actual == expected, harness.describe_difference(
        actual, expected, f"{release}'s checkpoint resumed", "the default provider")
