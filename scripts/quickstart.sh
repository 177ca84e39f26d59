#!/usr/bin/env bash
# The README's first command (`make quickstart`): show the system working.
# Until the broker cluster lands, this runs the storage engine end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/minikafka demo log
