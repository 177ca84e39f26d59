#!/usr/bin/env bash
# Make sure the Debian packages the project runs with are installed:
#   zookeeper       - the real ZooKeeper server (tests and `minikafka cluster up` start it on loopback)
#   docker-compose  - only to validate docker-compose.yml (`docker-compose config -q`); no engine needed
#   kcat            - Kafka's command-line client, against the Kafka protocol listener (a test lists the cluster)
set -euo pipefail
missing=()
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || missing+=(zookeeper)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system-packages: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
    exit 0
fi
echo "ensure-system-packages: missing Debian packages: ${missing[*]}" >&2
echo "  Install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
exit 1
