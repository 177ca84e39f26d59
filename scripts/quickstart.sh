#!/usr/bin/env bash
# The README's first command (`make quickstart`): start a local cluster
# (ZooKeeper + 3 brokers) and show a produce/consume round trip against it.
set -euo pipefail
cd "$(dirname "$0")/.."
mk=.venv/bin/minikafka
dir=${MINIKAFKA_DIR:-.minikafka}
if ! $mk cluster status --dir "$dir" --output json 2>/dev/null | grep -q '"alive": true'; then
    $mk cluster up --dir "$dir" --brokers 3
fi
$mk demo cluster --dir "$dir"
$mk cluster status --dir "$dir"
echo
echo "The cluster keeps running. Try: $mk cluster kill <controller id> --dir $dir; $mk cluster status --dir $dir"
echo "Stop it with: $mk cluster down --dir $dir"
