#!/usr/bin/env bash
# The Kubernetes suite (on the node; tests/k8s/run.sh boots it):
#   tests/k8s/run.sh tests/k8s/suite/run.sh [PATTERN...]
# runs every test_* function of the NN-*.sh files here whose name matches an ERE PATTERN (all
# without one), in file and definition order, one cluster for all. Each test is a user's
# action with kubectl and a check of what it left on the node. test_ofed_* run only on
# VM_RDMA=ofed, test_upstream_* only without it. test_two_nodes_* run only on two nodes
# (K8S_NODES=2: RDMA between pods on different nodes, over the wire between them), and only they
# do: the others read the one node's state.
# K8S_API_ONLY=1 (tests/k8s/crd-test.sh: an API server on the host, no node): only the
# test_crds_* tests run, which need the API server alone, and no cleanup runs after them:
# cleanup_k8s's node side (/opt/cni/bin, /run, the rails' routers) would be the host's there.
# Prints one line per test and ends with "k8s: N passed, M failed"; exits non-zero when a test
# failed or none ran.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/k8s/suite/lib.sh
source "$here/lib.sh"

# shellcheck source=tests/suite-runner.sh
source "$here/../../suite-runner.sh"

# skip_test NAME: the tests this node cannot run (see the header).
skip_test() {
	if [[ ${K8S_API_ONLY:-} == 1 ]]; then
		[[ $1 == test_crds_* ]] && return 1
		echo "needs the node (K8S_API_ONLY: an API server alone)"
		return 0
	fi
	if [[ ${K8S_NODES:-1} == 2 ]]; then
		[[ $1 == test_two_nodes_* ]] && return 1
		echo "written for one node (its checks read that node's state)"
		return 0
	fi
	case $1 in
	test_ofed_*) [[ ${VM_RDMA:-upstream} != ofed ]] && echo "needs VM_RDMA=ofed" ;;
	test_upstream_*) [[ ${VM_RDMA:-upstream} != upstream ]] && echo "the upstream view's" ;;
	test_two_nodes_*) echo "needs two nodes (K8S_NODES=2)" ;;
	*) return 1 ;;
	esac
}

cleanup=cleanup_k8s
[[ ${K8S_API_ONLY:-} == 1 ]] && cleanup=true
run_suite k8s "$here" "$cleanup" "$@"
