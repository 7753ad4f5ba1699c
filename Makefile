# The two commands a newcomer runs:  `make demo`  and  `make test`.
# Both install what they need (the venv with pyspark 4.3.0, sbt through bin/sbt) first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JAR := target/spillstore.jar
PKG_JAR := python/spillstore/jars/spillstore.jar
SCALA_SRC := $(shell find jvm/src/main -name '*.scala' 2>/dev/null) build.sbt

.PHONY: all venv jar demo test test-fast test-jvm test-python test-heavy bench bench-api clean

all: jar

$(VENV)/.installed: python/requirements-dev.txt python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r python/requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e python
	touch $@

venv: $(VENV)/.installed

$(JAR): $(VENV)/.installed $(SCALA_SRC)
	bin/sbt spillstore/package

# Replaced atomically, so a JVM that has the old jar open keeps reading it.
$(PKG_JAR): $(JAR)
	mkdir -p $(dir $@)
	cp $(JAR) $@.tmp && mv $@.tmp $@

jar: $(PKG_JAR)

demo: $(PKG_JAR)
	$(PY) -m spillstore demo

# JVM tests keep their temp files in jvm/target/test-tmp (build.sbt), removed after the run.
test-jvm: $(VENV)/.installed
	rm -rf jvm/target/test-tmp
	bin/sbt spillstore/test; status=$$?; rm -rf jvm/target/test-tmp; exit $$status

test-python: $(PKG_JAR)
	$(PY) -m pytest -q -m "not heavy" tests

test-heavy: $(PKG_JAR)
	$(PY) -m pytest -q -s -m heavy tests

# All tests: JVM, Python and end to end, then the heavy suites.
test: test-jvm test-python test-heavy

# Everything but the heavy suites, for quick iterations.
test-fast: test-jvm test-python

# End-to-end benchmark: one streaming aggregation per provider, each in its own JVM, e.g.
#   make bench BENCH_ARGS="--preset small --preset skewed --plot docs/bench-e2e.png"
bench: $(PKG_JAR)
	$(PY) -m spillstore bench $(BENCH_ARGS)

# StateStore-API benchmark, all scenarios at full size (docs/benchmarks.md); about 10 minutes.
# The 10M-key scenario needs the larger heap: the default provider copies its map each batch.
bench-api: $(VENV)/.installed
	bin/sbt 'set spillstore / Test / javaOptions += "-Xmx12g"' "spillstore/Test/runMain spillstore.bench.ApiBench $(BENCH_ARGS)"

clean:
	rm -rf target jvm/target project/target python/spillstore/jars
