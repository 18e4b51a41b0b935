# offsetlake: `make run` rebuilds the bundled sample end to end; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
OFFSETLAKE := $(VENV)/bin/offsetlake
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
SAMPLE_DIR ?= sample/dump
WAREHOUSE ?= warehouse

VERSION := $(shell sed -n 's/^version = //p' setup.cfg)
# Packaging tools live in a small venv of their own: `make dist` needs neither .venv nor its dependencies.
TOOLS := build/tools-venv
# The cluster package: a venv holding the wheel and its dependencies, packed by venv-pack (Spark's recipe for
# shipping Python dependencies to executors with --archives).
PACK_VENV := build/pack-venv
PACK := dist/offsetlake-env.tar.gz
# gzip's level for the pack. Executors unpack it as fast at any level; what differs is the packing, once, against
# the bytes every executor fetches, each application: level 1 packs in two thirds of 4's time (venv-pack's default)
# to an archive 9 % larger. A cluster fetches it far more often than it is packed, so 4 stays the default; a pack
# used once (the test suite's) is cheaper at 1.
PACK_COMPRESS_LEVEL ?= 4
PACKAGE_SOURCES := setup.py setup.cfg MANIFEST.in \
  $(shell find pipelines jobs schemas simulator conf -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -not -name '*.so')

.PHONY: setup run test test-fast test-deep bench bench-decode dist pack clean

$(VENV)/.installed: setup.cfg setup.py $(wildcard pipelines/decoding/_*.c pipelines/decoding/_*.h)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# setuptools says of every editable install that folders named like its packages may shadow them: advice, not news
	PYTHONWARNINGS=ignore $(PIP) install -q -e ".[test]"
	touch $@

# The driver JVM's class-data archive (pipelines/class_archive.py): a session's start and its first Python job in
# half the time. Optional: without it sessions start as they always did.
CLASS_ARCHIVE := $(VENV)/share/offsetlake/spark-classes.jsa
$(CLASS_ARCHIVE): $(VENV)/.installed
	$(PY) -m jobs.class_archive || echo "class archive not written: Spark sessions start without it"

setup: $(VENV)/.installed $(CLASS_ARCHIVE)

# Sample -> rebuild -> what the snapshot holds, per group type and state -> one busy group, as Kafka shows it.
run: setup
	$(OFFSETLAKE) sample $(SAMPLE_DIR) --records 20000 --groups 200 --partitions 8 --seed 7 --force
	$(OFFSETLAKE) rebuild --input $(SAMPLE_DIR) --warehouse $(WAREHOUSE) --snapshot-id sample --semantics modern
	$(OFFSETLAKE) sql --warehouse $(WAREHOUSE) "SELECT group_type, coalesce(protocol_type, '(simple)') AS protocol_type, state, count(*) AS groups FROM loaded_groups GROUP BY ALL ORDER BY ALL"
	@G=$$($(OFFSETLAKE) sql --warehouse $(WAREHOUSE) --format csv "SELECT group_id FROM loaded_groups WHERE state = 'Stable' AND protocol_type = 'consumer' AND group_type = 'classic' ORDER BY member_count DESC, group_id LIMIT 1" | tail -n 1); \
	  echo; echo "$$ offsetlake describe --warehouse $(WAREHOUSE) $$G --members"; $(OFFSETLAKE) describe --warehouse $(WAREHOUSE) "$$G" --members; \
	  echo; echo "$$ offsetlake describe --warehouse $(WAREHOUSE) $$G"; $(OFFSETLAKE) describe --warehouse $(WAREHOUSE) "$$G"

# Worker processes for the test suite (pytest-xdist); each module's tests run in one of them. TEST_WORKERS=0: none.
# One more than the cores, up to 8: much of the suite's time waits on processes it starts (JVMs, servers, a
# store's retries), and the extra worker runs beside those waits.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n < 8 ? n + 1 : 8 )))
PYTEST_WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: setup
	$(PY) -m pytest -q $(PYTEST_WORKERS)

test-fast: setup
	$(PY) -m pytest -q $(PYTEST_WORKERS) -m "not spark and not integration and not slow and not readers"

# The whole suite with the property and fuzz tests' deep case counts (tests/depth.py).
test-deep: setup
	OFFSETLAKE_TEST_DEPTH=deep $(PY) -m pytest -q $(PYTEST_WORKERS)

# Benchmarks print figures; they are never part of `make test`.
bench: setup
	$(PY) benchmarks/bench_decode.py --mb 100
	$(PY) benchmarks/bench_rebuild.py --repeat 3
	$(PY) benchmarks/bench_task.py --profile
	$(PY) benchmarks/bench_task.py --split --profile
	$(PY) benchmarks/bench_skew.py --compare-unsplit --compare-balanced --pairs 3
	$(PY) benchmarks/bench_replay.py
	$(PY) benchmarks/bench_groups.py
	$(PY) benchmarks/bench_committed.py
	$(PY) benchmarks/bench_cold.py --records 300000 2000000 3000000 10000000
	$(PY) benchmarks/bench_validation.py
	$(PY) benchmarks/bench_serving.py
	$(PY) benchmarks/bench_lag.py
	$(PY) benchmarks/bench_heap.py --heap 1g --heap 4g --compare-unsplit
	$(PY) -m pytest -q -m bench -p no:cacheprovider tests/rebuild/test_jvm_heap.py
	$(PY) benchmarks/bench_faults.py --rate 0.05 --runs 10
	$(PY) benchmarks/bench_faults.py --rate 0.30 --runs 10

bench-decode: setup
	$(PY) benchmarks/bench_decode.py

$(TOOLS)/.installed:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install -q build==1.6.1 venv-pack==0.2.0
	touch $@

# dist/offsetlake-<version>-<python>-<platform>.whl, with conf/ inside (pipelines/_conf) and the C extension.
dist: $(TOOLS)/.installed
	rm -f dist/offsetlake-*.whl
	$(TOOLS)/bin/python -m build --wheel --outdir dist .

pack: $(PACK)

# The wheel installed into a fresh venv, packed. pyspark is left out: Spark puts its own pyspark.zip first on
# every executor's PYTHONPATH, so its 400 MB of jars would travel for nothing. venv-pack does not copy the
# interpreter: bin/python links to $(PYTHON)'s installation, which the executors need at the same path.
$(PACK): $(PACKAGE_SOURCES) | $(TOOLS)/.installed
	$(MAKE) dist
	rm -rf $(PACK_VENV)
	$(PYTHON) -m venv $(PACK_VENV)
	$(PACK_VENV)/bin/pip install -q dist/offsetlake-$(VERSION)-*.whl
	$(PACK_VENV)/bin/pip uninstall -q -y pyspark
	$(TOOLS)/bin/venv-pack -q -p $(PACK_VENV) -o $@.part --format tar.gz --compress-level $(PACK_COMPRESS_LEVEL) \
	  --force
	chmod 644 $@.part
	mv $@.part $@
	rm -rf $(PACK_VENV)
	@ls -l $@

clean:
	rm -rf $(VENV) dist build *.egg-info warehouse sample .pytest_cache
