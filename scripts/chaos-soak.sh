#!/usr/bin/env bash
# `make chaos DURATION=600`: a fresh local cluster, random faults for DURATION seconds under
# load, then the history checker's report; the cluster is stopped and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
dir=$(mktemp -d -t minikafka-chaos-XXXXXX)
trap '.venv/bin/minikafka cluster down --dir "$dir" --purge >/dev/null 2>&1 || true' EXIT
.venv/bin/minikafka cluster up --dir "$dir" --brokers 3 --random-ports  # a throwaway cluster: never the fixed ports
.venv/bin/minikafka chaos --dir "$dir" --scenario soak --duration "$duration"
