#!/usr/bin/env bash
# Make sure the Debian packages the project runs with are installed:
#   zookeeper       - the real ZooKeeper server (tests and `minikafka cluster up` start it on loopback)
#   docker-compose  - only to validate docker-compose.yml (`docker-compose config -q`); no engine needed
#   kcat            - Kafka's command-line client, against the Kafka protocol listener (a test lists the cluster)
#   docker.io       - dockerd, for the compose test (tests/deploy starts an engine of its own, as root)
#   debootstrap     - the compose test's base images, made from Debian where no image registry answers
set -euo pipefail
missing=()
[ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 || missing+=(zookeeper)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
if [ "$(id -u)" = "0" ]; then  # only root can start the compose test's own engine: skipped otherwise
    command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system-packages: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Install services without starting them (Debian's policy-rc.d): the compose test starts a
    # dockerd of its own; no system-wide engine.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
    exit 0
fi
echo "ensure-system-packages: missing Debian packages: ${missing[*]}" >&2
echo "  Install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
exit 1
