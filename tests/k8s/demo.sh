#!/usr/bin/env bash
# make demo-k8s: the story of `make demo`, told with kubectl on the Kubernetes node (the OFED
# view: VM_RDMA=ofed). Runs on the node through tests/k8s/run.sh.
set -euo pipefail
# shellcheck source=tests/k8s/suite/lib.sh
source "$(dirname "$0")/suite/lib.sh"
say() { printf '\n\033[1m## %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

say "A GPU node with Multus thin and the roce-ipvlan installer"
show kubectl get nodes -o wide
show kubectl get ds -A
show ls -l /opt/cni/bin/roce-ipvlan

say "A pod with the RDMA devices but no rail attachment reads zero RoCE GIDs (the report's symptom)"
testpod no-rails '[]'
wait_pod_ready no-rails
# shellcheck disable=SC2016 # expanded in the pod
show kubectl exec no-rails -- sh -c 'for f in /sys/class/infiniband/rxe0/ports/1/gids/[0-3]; do echo "$f $(cat "$f")"; done'

say "One NAD for every rail; the pod names a rail per attachment with cni-args"
rail_nad rails
show kubectl get net-attach-def rails -o jsonpath='{.spec.config}'
echo
testpod on-rails "$(networks_on_rails rails rdma0 rdma1 rdma2 rdma3)"
show kubectl wait --for=condition=Ready pod/on-rails --timeout=300s
say "What Multus wrote into the pod (network-status)"
netstatus on-rails | jq -c '.[] | {name, interface, ips, mac}'
say "Each rail's GID index, from kubectl (published by the installer's annotate container)"
wait_for 60 "the pod's roce-ipvlan.io/gids annotation" \
	kubectl get pod on-rails -o jsonpath='{.metadata.annotations.roce-ipvlan\.io/gids}' --allow-missing-template-keys=false
kubectl get pod on-rails -o jsonpath='{.metadata.annotations.roce-ipvlan\.io/gids}' | jq -c '.[]'
say "Inside the pod: each child, its ifalias, and the GID at the index it names"
# shellcheck disable=SC2016 # expanded in the pod
show kubectl exec on-rails -- sh -c 'for n in net1 net2 net3 net4; do a=$(cat /sys/class/net/$n/ifalias); echo "$n: $a"; set -- $a; d=${1#rdma_dev=}; p=${2#port=}; i=${3#gid_index=}; echo "    gids/$i = $(cat /sys/class/infiniband/$d/ports/$p/gids/$i)"; done'
show kubectl exec on-rails -- roce-ipvlan env

say "Deleting the pod leaves nothing on the node"
show kubectl delete pod on-rails no-rails
echo "host-local allocations: $(host_local_count), device-info files: $(devinfo_count), ipvlan children: $(children_count)"

say "A NAD that names no rail: the pod waits, and its events say why"
nad broken '{"cniVersion": "1.0.0", "name": "broken", "type": "roce-ipvlan", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.57.0.0/24"}]]}}'
testpod broken '[{"name": "broken", "interface": "net1"}]'
wait_for 180 "the pod's FailedCreatePodSandBox event" bash -c \
	"kubectl get events --field-selector involvedObject.name=broken,reason=FailedCreatePodSandBox -o name | grep -q ."
show kubectl get pod broken
kubectl describe pod broken | grep -m1 -A3 FailedCreatePodSandBox | cut -c1-600
kubectl delete pod broken --wait=false >/dev/null
