# minikafka developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
PYTEST_ARGS ?=

.PHONY: setup venv proto codec system-packages lint typecheck test unit integration fuzz quickstart chaos compose-test bench bench-scale clean

setup: venv proto codec system-packages

# Reinstall only when the dependency list changed (idempotent).
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	touch $@

# The generated modules are committed (so a plain `pip install` works); this
# regenerates them from proto/*.proto and is a no-op when nothing changed.
proto: $(VENV)/.installed
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. proto/minikafka.proto

# The compiled record validator (proto/_codec.c). Optional: without a C compiler the build
# warns and proto.record_batch uses its pure-Python twin.
codec: $(VENV)/.codec
$(VENV)/.codec: proto/_codec.c proto/_columnar.c setup.py $(VENV)/.installed
	$(PY) setup.py -q build_ext --inplace || echo "codec: not compiled; the pure-Python validator is used"
	rm -rf build
	touch $@

system-packages:
	bash scripts/ensure-system-packages.sh

lint: setup
	$(BIN)/ruff check .

typecheck: setup
	$(BIN)/mypy proto zk broker controller client bench spark_jobs

test: setup lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

unit: setup
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: setup
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

# Hostile input against a real cluster (issue 12): the long hypothesis profile of tests/fuzz
# (`make test` runs its short, derandomized profile). MINIKAFKA_FUZZ_KEEP_GOING=1 lists every
# failing example (in MINIKAFKA_FUZZ_JOURNAL) instead of stopping at the first.
fuzz: setup
	MINIKAFKA_FUZZ_PROFILE=long $(BIN)/pytest tests/fuzz --timeout 3600 $(PYTEST_ARGS)

# docker-compose.yml for real (issue 35): images built, cluster up (a ZooKeeper ensemble of 3), clients,
# a leader and then the ZooKeeper leader SIGKILLed under load, the secure and single-zk overrides, `down -v` (tests/deploy; `make test` runs it too). Needs root for a Docker
# engine of its own (Debian's docker.io) and debootstrap when no image registry answers.
compose-test: setup
	$(BIN)/pytest tests/deploy $(PYTEST_ARGS)

# The README's first command: start something real and show it working.
quickstart: setup
	bash scripts/quickstart.sh

# A long soak: random faults (kills, pauses, rolling restarts) under load, then the checker's report.
DURATION ?= 600
chaos: setup
	bash scripts/chaos-soak.sh $(DURATION)

# cleaner_bench: the log cleaner's MB/s beside raw read MB/s of the same segments (issue 30).
# txn_bench: transactions/s, broker CPU and ZooKeeper writes per transaction beside idempotent
# flushes, and read_committed next to read_uncommitted (issue 31).
# Every figure of issue 15 from one run, each case with its CPU seconds per process, so a
# regression shows: throughput (send, send_batch), latency at 20k rec/s with linger_ms=0, consumer.
# 1M records: at ~500k records/s a 400k run lasted 0.8 s, a fifth of it filling and draining the
# producer's 8 MiB buffer.
BENCH_RECORDS ?= 1000000
bench: setup
	@echo "cores: $$(nproc)"
	$(PY) bench/log_bench.py
	$(PY) bench/cleaner_bench.py
	$(PY) bench/validate_bench.py
	$(PY) bench/rpc_cost_bench.py
	$(PY) bench/replication_bench.py --records $(BENCH_RECORDS) --bulk --rate 20000 --rate-linger-ms 0
	$(PY) bench/consume_bench.py --records $(BENCH_RECORDS)
	$(PY) bench/spark_read_bench.py
	$(PY) bench/txn_bench.py
	@echo "issue 29: partitions at scale (3,000; then 10,000 with the failovers) and the largest legal requests"
	$(PY) bench/partition_scale_bench.py --partitions $(SCALE_PARTITIONS) --records $(SCALE_RECORDS) $(SCALE_ARGS)
	$(PY) bench/partition_scale_bench.py --partitions 10000 --records $(SCALE_RECORDS) --failover
	$(PY) bench/large_request_bench.py

# Issue 29: what partitions cost - spread and hot produce (librdkafka acks=all), idle CPU, create time,
# RSS and open files at ~50 and at SCALE_PARTITIONS partitions in one run (several minutes at 3,000).
# SCALE_ARGS=--failover adds controlled shutdown and controller SIGKILL; quick smoke run:
# make bench-scale SCALE_PARTITIONS=300 SCALE_RECORDS=20000
SCALE_PARTITIONS ?= 3000
SCALE_RECORDS ?= 200000
SCALE_ARGS ?=
bench-scale: setup
	$(PY) bench/partition_scale_bench.py --partitions $(SCALE_PARTITIONS) --records $(SCALE_RECORDS) $(SCALE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
