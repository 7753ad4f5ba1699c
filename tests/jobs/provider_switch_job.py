"""A query started on Spark's HDFS provider, stopped, and restarted with spillstore selected,
in a fresh JVM whose driver log (stderr, WARN level) the test reads.

    python tests/jobs/provider_switch_job.py WORKDIR

Prints one JSON line: the provider each run's operator reported (``operator_metrics``) and the
state rows counted by the second run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for harness
import harness  # noqa: E402
import spillstore  # noqa: E402


def main(workdir: str) -> int:
    work = Path(workdir)
    data = [[(i % 7,) for i in range(100)], [(i % 11,) for i in range(100)]]
    spark = harness.session_builder("local[2]").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    providers = []
    try:
        for batch, provider in enumerate((harness.DEFAULT, harness.SPILLSTORE)):
            spark.conf.set(harness.PROVIDER_CONF, provider)
            harness.write_batches(work / "input", "key LONG", data, range(batch, batch + 1))
            query = (spark.readStream.schema("key LONG").json(str(work / "input"))
                     .groupBy("key").count().writeStream.outputMode("update").format("noop")
                     .option("checkpointLocation", str(work / "checkpoint"))
                     .queryName(f"switch_{batch}").trigger(availableNow=True).start())
            assert query.awaitTermination(harness.QUERY_TIMEOUT_S), "query did not finish"
            assert query.exception() is None, query.exception()
            providers.append([op.provider for op in spillstore.operator_metrics(query)])
    finally:
        spark.stop()
    print(json.dumps({"providers": providers}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
