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

.PHONY: setup run test test-fast bench bench-decode dist clean

$(VENV)/.installed: setup.cfg setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[test]"
	touch $@

setup: $(VENV)/.installed

# Sample -> rebuild -> what the snapshot holds, per group type and state -> one busy group, as Kafka shows it.
run: setup
	$(OFFSETLAKE) sample $(SAMPLE_DIR) --records 20000 --groups 200 --partitions 8 --seed 7 --force
	$(OFFSETLAKE) rebuild --input $(SAMPLE_DIR) --warehouse $(WAREHOUSE) --snapshot-id sample
	$(OFFSETLAKE) sql --warehouse $(WAREHOUSE) "SELECT group_type, coalesce(protocol_type, '(simple)') AS protocol_type, state, count(*) AS groups FROM loaded_groups GROUP BY ALL ORDER BY ALL"
	@G=$$($(OFFSETLAKE) sql --warehouse $(WAREHOUSE) --format csv "SELECT group_id FROM loaded_groups WHERE state = 'Stable' AND protocol_type = 'consumer' AND group_type = 'classic' ORDER BY member_count DESC, group_id LIMIT 1" | tail -n 1); \
	  echo; echo "$$ offsetlake describe --warehouse $(WAREHOUSE) $$G --members"; $(OFFSETLAKE) describe --warehouse $(WAREHOUSE) "$$G" --members; \
	  echo; echo "$$ offsetlake describe --warehouse $(WAREHOUSE) $$G"; $(OFFSETLAKE) describe --warehouse $(WAREHOUSE) "$$G"

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not spark and not integration"

# Benchmarks print figures; they are never part of `make test`.
bench: setup
	$(PY) benchmarks/bench_decode.py --mb 100
	$(PY) benchmarks/bench_rebuild.py
	$(PY) benchmarks/bench_replay.py
	$(PY) benchmarks/bench_validation.py
	$(PY) benchmarks/bench_serving.py

bench-decode: setup
	$(PY) benchmarks/bench_decode.py

dist: setup
	$(PIP) install -q build
	$(PY) -m build --wheel --outdir dist .

clean:
	rm -rf $(VENV) dist build *.egg-info warehouse sample .pytest_cache
