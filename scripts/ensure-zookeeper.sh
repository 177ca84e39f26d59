#!/usr/bin/env bash
# Make sure Debian's ZooKeeper server (and a Java to run it) is installed.
# Tests and `minikafka cluster up` start it themselves on loopback ports.
set -euo pipefail
jar=/usr/share/java/zookeeper.jar
if [ -f "$jar" ] && command -v java >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-zookeeper: installing Debian's zookeeper package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq zookeeper >/dev/null
    exit 0
fi
echo "ensure-zookeeper: ZooKeeper is missing ($jar not found)." >&2
echo "  Install it with: sudo apt-get update && sudo apt-get install -y zookeeper" >&2
exit 1
