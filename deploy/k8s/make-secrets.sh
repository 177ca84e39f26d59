#!/bin/sh
# The Secret the brokers mount (minikafka-secrets): the cluster CA certificate, a certificate and key
# per broker naming its pod's DNS name, and ZooKeeper's digest credential - made by `minikafka certs`
# on your machine, so nothing secret is in the manifests or the image. The CA's private key stays in
# DIR (keep it: it issues the certificates of brokers added later).
#   deploy/k8s/make-secrets.sh [DIR] [BROKERS] [NAMESPACE] | kubectl apply -f -
set -eu
DIR=${1:-./minikafka-k8s-secrets}
BROKERS=${2:-3}
NAMESPACE=${3:-minikafka}
IDS=$(seq -s, 0 $((BROKERS - 1)))
minikafka certs init --dir "$DIR" --brokers "$IDS" \
    --broker-host "broker-{id}.broker.${NAMESPACE}.svc.cluster.local" --zookeeper-digest >&2
set -- --from-file="ca.pem=$DIR/ca.pem" --from-file="zookeeper.digest=$DIR/zookeeper.digest"
for id in $(seq 0 $((BROKERS - 1))); do
    set -- "$@" --from-file="broker-$id.pem=$DIR/broker-$id.pem"
done
kubectl create secret generic minikafka-secrets --namespace "$NAMESPACE" "$@" --dry-run=client -o yaml
