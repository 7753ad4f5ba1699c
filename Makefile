# The two commands a newcomer runs:  `make demo`  and  `make test`.
# Both install what they need (the venvs, sbt through bin/sbt) first.
#
# spillstore is built once per Spark line (python/spillstore/spark_lines.txt), one jar each.
# 4.3 is the default line: .venv (pyspark 4.3.0), the JVM unit suites, the demo. Every other
# line has its own venv, .venv-<line>, with that line's pyspark, for its end-to-end tests.
PYTHON ?= python3
# The one place the version is written (build.sbt and the Python package read it too).
VERSION := $(shell cat python/spillstore/VERSION)
VENV := .venv
PY := $(VENV)/bin/python
# The Spark lines, their Scala versions and roles: python/spillstore/spark_lines.txt.
LINES_FILE := python/spillstore/spark_lines.txt
lines_where = $(shell awk '!/^\#/ && NF && $(1) {print $$1}' $(LINES_FILE))
LINES := $(call lines_where,1)
DEFAULT_LINE := $(call lines_where,$$5 ~ /default/)
OTHER_LINES := $(filter-out $(DEFAULT_LINE),$(LINES))
scala_of = $(shell awk '$$1 == "$(1)" {split($$3, v, "."); print v[1] "." v[2]}' $(LINES_FILE))
jar_of = spillstore-spark$(1)_$(call scala_of,$(1)).jar
JARS := $(foreach l,$(LINES),target/$(call jar_of,$(l)))
# What the jars are built from; VERSION too, as each jar's manifest records it (build.sbt), and
# the package refuses a jar of another version.
SCALA_SRC := $(shell find jvm/src/main -name '*.scala' 2>/dev/null) build.sbt project/SparkLine.scala \
  $(LINES_FILE) python/spillstore/VERSION
# sbt projects per line (build.sbt): the default line is `spillstore`.
sbt_of = $(if $(filter $(DEFAULT_LINE),$(1)),spillstore,spark$(subst .,,$(1)))
# Per-line pyspark (pip) and what else that line's end-to-end tests need.
pyspark_of = pyspark==$(1).*
# pyspark 3.5 predates numpy 2 (and pyarrow 20+ needs numpy 2).
constraints_of = $(if $(filter 3.5,$(1)),"numpy<2" "pyarrow<20",)
# The smaller end-to-end set for 4.0, 4.1, 4.2 (docs/testing.md: which target runs what).
E2E_SMALL := tests/test_package.py tests/test_cli.py tests/test_e2e_spillstore.py \
  tests/test_e2e_restart.py tests/test_e2e_spill.py tests/test_e2e_metrics.py tests/test_migrate.py \
  tests/test_change_feed.py tests/test_e2e_maintenance_faults.py tests/test_e2e_checkpoint_ids.py

.PHONY: all venv venvs jar jars demo test test-build test-lane-jvm test-lane-e2e test-fast test-jvm test-python test-heavy test-cluster test-remote \
  test-connect test-lines test-conformance $(foreach l,$(OTHER_LINES),test-line-$(l) test-conformance-$(l)) \
  test-s3 test-soak test-install dist bench bench-remote bench-api bench-latency clean servers lint fmt doc-tables

all: jar

# VERSION: the editable install records the package's version (importlib.metadata) when it is made.
$(VENV)/.installed: python/requirements-dev.txt python/pyproject.toml python/spillstore/VERSION
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r python/requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e python
	touch $@

venv: $(VENV)/.installed

# Another line's venv: its pyspark, the test tools, and this package (editable).
$(foreach l,$(OTHER_LINES),.venv-$(l)/.installed): .venv-%/.installed: python/requirements-e2e.txt python/pyproject.toml \
  python/spillstore/VERSION
	$(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install -q --upgrade pip
	.venv-$*/bin/python -m pip install -q "$(call pyspark_of,$*)" -r python/requirements-e2e.txt $(call constraints_of,$*)
	.venv-$*/bin/python -m pip install -q --no-deps -e python
	touch $@

venvs: venv $(foreach l,$(OTHER_LINES),.venv-$(l)/.installed)

# All five jars in one sbt run (Spark 3.5 .. 4.2 come from the Maven repository).
target/.jars: $(VENV)/.installed $(SCALA_SRC)
	bin/sbt $(foreach l,$(LINES),$(call sbt_of,$(l))/package)
	touch $@

# Replaced atomically, so a JVM that has an old jar open keeps reading it.
python/spillstore/jars/.copied: target/.jars
	mkdir -p $(dir $@)
	for j in $(notdir $(JARS)); do cp target/$$j python/spillstore/jars/$$j.tmp && \
	  mv python/spillstore/jars/$$j.tmp python/spillstore/jars/$$j; done
	touch $@

PKG_JAR := python/spillstore/jars/.copied

jar jars: $(PKG_JAR)

demo: $(PKG_JAR)
	$(PY) -m spillstore demo

# What a release publishes, in dist/: the wheel and the sdist (the five jars inside; the wheel
# is built from the sdist, so the sdist is complete), and per Spark line the Maven artifacts
# (jar, sources, scaladoc, POM; .md5/.sha1 each) in dist/maven, a Maven-layout repository.
dist: $(PKG_JAR)
	rm -rf dist python/build
	bin/sbt $(foreach l,$(LINES),$(call sbt_of,$(l))/publish)
	$(PY) -m build --no-isolation --outdir dist python
	rm -rf python/build
	cd dist && sha256sum spillstore-$(VERSION)* > SHA256SUMS

# What tests/servers.py starts its HDFS and S3 servers with, on the lines that have them (4.3
# and 3.5): target/hdfs-classpath-<line>.txt (MiniHdfsMain's JVM) and target/s3a-jars-<line>.txt
# (hadoop-aws and its AWS SDK bundle: about 690 MB for 4.3 and 280 MB for 3.5 the first time).
SERVER_LINES := $(call lines_where,$$5 ~ /servers/)
SERVERS := target/.servers
$(SERVERS): $(VENV)/.installed $(SCALA_SRC) $(shell find jvm/src/test/remote -name '*.scala')
	bin/sbt $(foreach l,$(SERVER_LINES),$(call sbt_of,$(l))/serverClasspaths)
	touch $@

servers: $(SERVERS)

# JVM tests keep their temp files in jvm/target/test-tmp (build.sbt), removed after the run,
# failed or not; a failed run ends by listing its failed tests with their messages (from sbt's
# reports, cleared first): $(call sbt_test,<sbt commands>).
sbt_reports := jvm/target/test-reports jvm/lines/*/target/test-reports
sbt_test = rm -rf jvm/target/test-tmp $(sbt_reports); bin/sbt $(1); status=$$?; \
  rm -rf jvm/target/test-tmp; [ $$status = 0 ] || $(PY) bin/failed-tests jvm; exit $$status

test-jvm: $(VENV)/.installed
	$(call sbt_test,spillstore/test)

# Every suite has a --basetemp of its own: under the shared /tmp/pytest-of-<user>, pytest deletes
# other sessions' dirs (retention 0), which breaks any run going on at the same time.
test-python: $(PKG_JAR)
	$(PY) -m pytest -q -m "not heavy and not soak and not install and not cluster and not remote" --basetemp=target/pytest-python tests

test-heavy: $(PKG_JAR)
	$(PY) -m pytest -q -s -m heavy --basetemp=target/pytest-heavy tests

# The end-to-end tests on local-cluster (executor JVMs apart from the driver); minutes.
test-cluster: $(PKG_JAR)
	$(PY) -m pytest -q -s -m cluster --basetemp=target/pytest-cluster tests

# The tests that start HDFS (a MiniDFSCluster) and S3 (a moto server) servers: the servers
# themselves and the checkpoint on HDFS, on 4.3, and a subset of tests/test_e2e_remote.py on 3.5
# (which runs the servers as 4.3 does, with its own jars). The checkpoint on S3 is test-s3's.
test-remote: $(PKG_JAR) $(SERVERS) .venv-3.5/.installed
	$(PY) -m pytest -q -s -m "remote and not s3" --basetemp=target/pytest-remote tests
	.venv-3.5/bin/python -m pytest -q -s -m "remote and not s3" --basetemp=target/pytest-remote-3.5 tests/test_e2e_remote.py

# tests/test_e2e_remote.py with the checkpoint on S3 (moto), on 4.3 and 3.5: about 8 minutes,
# left out of `make test` to keep it within CI's time (docs/testing.md).
test-s3: $(PKG_JAR) $(SERVERS) .venv-3.5/.installed
	$(PY) -m pytest -q -s -m s3 --basetemp=target/pytest-s3 tests/test_e2e_remote.py
	.venv-3.5/bin/python -m pytest -q -s -m s3 --basetemp=target/pytest-s3-3.5 tests/test_e2e_remote.py

# Spark's StateStoreSuiteBase from each line's own test jar against that line's build
# (4.3's runs in test-jvm, with the 4.2 test jar).
$(foreach l,$(OTHER_LINES),test-conformance-$(l)): test-conformance-%: $(VENV)/.installed
	$(call sbt_test,$(call sbt_of,$*)/test)

# Every other line's in one sbt start (tens of seconds each on 2 cores).
test-conformance: $(VENV)/.installed
	$(call sbt_test,$(foreach l,$(OTHER_LINES),$(call sbt_of,$(l))/test))

# A line's end-to-end tests in its own venv: all of them (but heavy) on 3.5, the smaller set
# on 4.0, 4.1 and 4.2, on neither the `one_line` tests (tests/pytest.ini); each with its own
# --basetemp (see test-python).
test-line-3.5: $(PKG_JAR) .venv-3.5/.installed
	.venv-3.5/bin/python -m pytest -q -m "not heavy and not soak and not browser and not install and not cluster and not remote and not one_line" --basetemp=target/pytest-3.5 tests

# Soaks, left out of `make test` to keep it within CI's time (docs/testing.md): the kill -9 and
# ownership stress suites at many times the trials `make test` gives them, and the pytest tests
# marked `soak`, long reproductions at the load that once failed (applyInPandasWithState's two
# threads on 3.5, about 13 minutes on 2 cores; JVM suites guard the same race in `make test`).
SOAK_CRASH_TRIALS ?= 150
SOAK_STRESS_ROUNDS ?= 8000
test-soak: $(PKG_JAR) .venv-3.5/.installed
	export SPILLSTORE_CRASH_TRIALS=$(SOAK_CRASH_TRIALS) SPILLSTORE_STRESS_ROUNDS=$(SOAK_STRESS_ROUNDS); \
	  $(call sbt_test,"spillstore/testOnly spillstore.faults.CrashInjectionSuite spillstore.faults.OwnershipStressSuite")
	.venv-3.5/bin/python -m pytest -q -s -m soak --basetemp=target/pytest-soak-3.5 tests

$(foreach l,4.0 4.1 4.2,test-line-$(l)): test-line-%: $(PKG_JAR) .venv-%/.installed
	.venv-$*/bin/python -m pytest -q -m "not heavy and not browser and not install and not one_line" --basetemp=target/pytest-$* $(E2E_SMALL)

test-lines: test-conformance $(foreach l,$(OTHER_LINES),test-line-$(l))

# tests/test_e2e_connect.py (a Spark Connect server from the line's pyspark with spillstore's jar,
# and a client set up by `configure`) on every 4.x line, each in its venv; `make test` runs it on
# 4.3 alone (test-python), and 3.5's pyspark has no Connect server. Every line runs; each one's
# seconds are printed, and the target fails if any line failed.
CONNECT_LINES := $(call lines_where,$$1 ~ /^4\./)
py_of = $(if $(filter $(DEFAULT_LINE),$(1)),$(PY),.venv-$(1)/bin/python)
test-connect: $(PKG_JAR) $(VENV)/.installed \
  $(foreach l,$(filter-out $(DEFAULT_LINE),$(CONNECT_LINES)),.venv-$(l)/.installed)
	@status=0; $(foreach l,$(CONNECT_LINES),start=$$(date +%s); \
	  $(call py_of,$(l)) -m pytest -q -s --basetemp=target/pytest-connect-$(l) tests/test_e2e_connect.py; \
	  s=$$?; echo "== test-connect on $(l): $$(( $$(date +%s) - start )) s, exit $$s"; \
	  [ $$s = 0 ] || status=$$s;) exit $$status

# dist/ installed as users install it, outside the repository: the wheel into a fresh venv,
# and the Maven artifacts through spark-submit --packages, on 4.3 and 3.5.
test-install: dist
	$(PY) -m pytest -q -m install --basetemp=target/pytest-install tests/test_install.py

# All tests, in two lanes side by side (CI has two cores, and each suite leaves a good part of
# them idle: JVM starts, Python workers, waits on batches and servers). What every suite needs
# is built first: the sbt steps (the jars, the servers' class paths, lint) one after the other,
# so that no two sbt runs overlap, beside the other lines' venvs (pip). Each lane runs its
# suites one after the other and prints each one's minutes (docs/testing.md says which suite
# goes in which lane, and why).
LANE_JVM := test-jvm test-conformance test-remote test-line-4.0 test-line-4.1 test-install
LANE_E2E := test-python test-heavy test-cluster test-line-3.5 test-line-4.2
test: $(VENV)/.installed
	@start=$$(date +%s); $(MAKE) --no-print-directory -j2 --output-sync=target test-build \
	  $(foreach l,$(OTHER_LINES),.venv-$(l)/.installed); status=$$?; \
	  echo "== make test-build and venvs: $$(( $$(date +%s) - start )) s, exit $$status"; exit $$status
	$(MAKE) --no-print-directory -j2 --output-sync=line test-lane-jvm test-lane-e2e

test-build:
	$(MAKE) --no-print-directory -j1 $(PKG_JAR) $(SERVERS) lint

# One suite as a recipe line of its own (printed whole when it ends), timed; a lane stops at
# its first failing suite.
define timed
@start=$$(date +%s); $(MAKE) --no-print-directory -j1 $(1); status=$$?; \
  echo "== make $(1): $$(( $$(date +%s) - start )) s, exit $$status"; exit $$status

endef

test-lane-jvm:
	$(foreach t,$(LANE_JVM),$(call timed,$(t)))

test-lane-e2e:
	$(foreach t,$(LANE_E2E),$(call timed,$(t)))

# Everything but the heavy suites and the other lines, for quick iterations (4.3 only).
test-fast: test-jvm test-python

# The linters. Python, configured in python/pyproject.toml: ruff on the package and the tests,
# mypy (types) on the package, lint-imports (import-linter: the package's import layers) on
# this checkout's package (PYTHONPATH: not a copy the venv may have installed from elsewhere;
# no cache, which it would leave in the working directory). Scala: scalafmt (.scalafmt.conf)
# on every line's sources and the build's; `make fmt` formats them.
lint: $(VENV)/.installed
	$(PY) -m ruff check --config python/pyproject.toml python tests
	$(PY) -m mypy --config-file python/pyproject.toml python/spillstore
	PYTHONPATH=python $(dir $(PY))lint-imports --no-logo --no-cache python/pyproject.toml
	bin/sbt scalafmtCheckAll scalafmtSbtCheck

fmt: $(VENV)/.installed
	bin/sbt scalafmtAll scalafmtSbt

# The docs' generated tables (conf keys and metrics, in README.md and docs/monitoring.md),
# rewritten from the code; ReadmeSuite fails while a file's differs.
doc-tables: $(VENV)/.installed
	bin/sbt "spillstore/Test/runMain spillstore.DocTables"

# End-to-end benchmark: one streaming aggregation per provider, each in its own JVM, e.g.
#   make bench BENCH_ARGS="--preset small --preset skewed --plot docs/bench-e2e.png"
bench: $(PKG_JAR)
	$(PY) -m spillstore bench $(BENCH_ARGS)

# The same with the checkpoints on a test server (tests/bench_remote.py): STORAGE=hdfs, s3 or
# local; for s3 it also prints the requests per state store and batch, e.g.
#   make bench-remote STORAGE=s3 BENCH_ARGS="--keys 200000 --batches 6 --restart"
STORAGE ?= s3
bench-remote: $(PKG_JAR) $(SERVERS)
	$(PY) tests/bench_remote.py --storage $(STORAGE) $(BENCH_ARGS)

# StateStore-API benchmark, all scenarios at full size (docs/benchmarks.md); about 10 minutes.
# The 10M-key scenario needs the larger heap: the default provider copies its map each batch.
bench-api: $(VENV)/.installed
	bin/sbt 'set spillstore / Test / javaOptions += "-Xmx12g"' "spillstore/Test/runMain spillstore.bench.ApiBench $(BENCH_ARGS)"

# Real-time mode latency (Spark 4.3, local mode): spillstore with the state fitting its budget and
# several times it, against Spark's RocksDB provider; 1M keys, input rates swept upwards until p99
# reaches 1 s; a JVM and a JSON each in LATENCY_OUT (GC logs gc-<pid>.log beside them). About 10
# minutes on 2 cores. The 24m budget is about a quarter of the 1M keys' ~90 MB of state.
# RealTimeLatencyBench's scaladoc lists its arguments, e.g.
#   make bench-latency LATENCY_ARGS="rates=10000,50000 seconds=10"
LATENCY_OUT ?= target/bench-latency
LATENCY_FIT_BUDGET ?= 1g
LATENCY_SPILL_BUDGET ?= 24m
latency_run = "spillstore/Test/runMain spillstore.bench.RealTimeLatencyBench $(1) out=$(abspath $(LATENCY_OUT))/$(2).json $(LATENCY_ARGS)"
bench-latency: $(VENV)/.installed
	mkdir -p $(LATENCY_OUT)
	bin/sbt 'set spillstore / Test / javaOptions ++= Seq("-Xmx6g", "-Xlog:gc:file=$(abspath $(LATENCY_OUT))/gc-%p.log")' \
	  $(call latency_run,provider=spillstore budget=$(LATENCY_FIT_BUDGET),spillstore-fit) \
	  $(call latency_run,provider=spillstore budget=$(LATENCY_SPILL_BUDGET),spillstore-spill) \
	  $(call latency_run,provider=rocksdb,rocksdb)

clean:
	rm -rf target jvm/target jvm/lines project/target python/spillstore/jars dist python/build
