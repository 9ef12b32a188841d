#!/usr/bin/env bash
# The second node of a two-node cluster (K8S_NODES=2): node.sh on fabric host a runs this on
# host b (`on b`) once it has made b's certificate. It sets up the node's own side as node.sh
# does on a (tests/k8s/lib.sh: node_host, node_containerd, node_kubelet, node_railpf), with
# kubelet registering with a's API server over the fabric's cluster link, and returns once
# railpf runs; the daemons stay, their logs in /run/k8s/logs on b.
#
#   tests/k8s/worker.sh CACHE NODE NODE_IP POD_CIDR API_IP CREDENTIALS
#
# CREDENTIALS: the folder with ca.crt and node-b.kubeconfig (and the certificate it names).
set -euo pipefail
(($# == 6)) || { echo "usage: worker.sh CACHE NODE NODE_IP POD_CIDR API_IP CREDENTIALS" >&2; exit 2; }
cache=$1 node=$2 node_ip=$3 pod_cidr=$4 api_ip=$5 creds=$6
here=$(cd "$(dirname "$0")" && pwd)
export PATH=$cache/bin:$here:$PATH K8S_CACHE=$cache K8S_LOGS=/run/k8s/logs K8S_NODES=2
mkdir -p "$K8S_LOGS"
# shellcheck source=tests/k8s/lib.sh
source "$here/lib.sh"

node_host "$node" "$node_ip" "$pod_cidr"
# The kubernetes Service's ClusterIP (10.96.0.1) is on a's lo: host-network pods here reach
# it by way of a (a answers from that address; no kube-proxy, no NAT).
ip route add 10.96.0.1/32 via "$api_ip"
node_containerd
node_kubelet "$node" "$node_ip" "$creds/node-b.kubeconfig" "$creds/ca.crt"
wait "$K8S_PULLS" || { cat "$K8S_LOGS/pull.log" >&2; exit 1; }
node_railpf
echo "worker: node $node's containerd, kubelet and railpf run after $SECONDS s"
