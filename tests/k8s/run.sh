#!/usr/bin/env bash
# Boot the test VM as a one-node Kubernetes cluster and run one script on the node: the
# Kubernetes counterpart of tests/vm/run.sh, with the same contract.
#
#   tests/k8s/run.sh SCRIPT [ARGS...]
#
# builds (or takes from the cache) what tests/k8s/build.sh lists, boots the VM with the
# Soft-RoCE rails of tests/vm (rdma0..rdma3, ens1f0np0; the bare NIC ens2f0np0), starts etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd and kubelet in it,
# installs Multus (thin; thick with K8S_NODES=2), nv-ipam (its controller and ipam-node, from its own deploy/ tree, in
# namespace nvidia-network-operator), the SR-IOV network device plugin (its own DaemonSet, in
# kube-system) and roce-ipvlan's installer DaemonSet with kubectl, waits
# until the node and every DaemonSet's pods are Ready and nv-ipam's controller leads, then runs
# SCRIPT inside the VM as root with kubectl on PATH and KUBECONFIG exported (tests/k8s/node.sh),
# prints its output and exits with its code. nv-ipam reads IPPools and CIDRPools from
# nvidia-network-operator only; the node carries the labels nvidia.com/gpu.present=true (the
# examples' pools select it) and feature.node.kubernetes.io/pci-15b3.present=true.
# SCRIPT is a path on the host (the VM sees the host's root); it may `source "$K8S_LIB"`
# (tests/k8s/lib.sh) for the helpers. Pods use images already on the node:
# localhost/roce-ipvlan-testpod:latest (a shell, iproute2, ibv_devinfo, perftest, UCX and the
# plugin for `roce-ipvlan env`) with `imagePullPolicy: IfNotPresent` or `Never`. The node offers
# the rails as devices: `nvidia.com/hostdev`, one per rail rdma0..rdma3 by PCI address (the SR-IOV
# network device plugin; a NAD with that resourceName gets Multus's deviceID), and
# `rdma/rdma_shared_device_a`, every rail's /dev/infiniband devices for any pod (tests/k8s/go/railpf).
# K8S_SRIOVDP_SELECTORS=example gives sriovdp examples/nicclusterpolicy.yaml's selectors as they
# are (it then offers no rail: docs/testing.md says why).
#
# Environment: everything tests/vm/run.sh reads (VM_KERNEL=backports, VM_RDMA=ofed, VM_RAILS,
# VM_TIMEOUT, ...), and VM_MEM (default 6144 here: a control plane needs more than the 1 GiB of
# the plain VM tests).
#   K8S_NODES=2   two nodes, two VMs: the flat fabric of tests/fabric/run.sh (its hosts a and b,
#                 rail i of both on one wire of its own, the 7.x kernel and its NIC-like rxe)
#                 with node roce-node on a (the control plane, SCRIPT runs there) and node
#                 roce-node-b on b (tests/k8s/worker.sh), both with every DaemonSet above.
#                 SCRIPT may also source "$FABRIC_LIB" (`on b CMD`: b's side of a check) and
#                 finds b's node name in K8S_NODE_B. Each host has the rails rdma0..rdma3 only
#                 (no ens1f0np0, no bare NIC); a has two CPUs, b one (FABRIC_SMP_A,
#                 FABRIC_SMP). The suite's tests for two nodes are test_two_nodes_*
#                 (tests/k8s/suite/run.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
(($# > 0)) || { echo "usage: $0 SCRIPT [ARGS...]" >&2; exit 2; }
script=$1
shift
[[ $script == /* ]] || script=$PWD/$script
[[ -r $script ]] || { echo "run.sh: no such script: $script" >&2; exit 2; }

# The VM mounts fresh tmpfs on /tmp, /var/tmp and /run: a script or file argument there is
# bound back from the host.
keep=$(dirname "$script")
for a in "$@"; do [[ -e $a ]] && keep+=" $(cd "$(dirname "$a")" && pwd)"; done
export VM_KEEP_PATHS="${VM_KEEP_PATHS:-} $keep"

cache=$("$here/build.sh")
# The VM's plugin binary (tests/vm/run.sh links it into its own CNI dir) is the shipped one;
# the node itself gets it from the installer image.
ROCE_IPVLAN_BIN=$repo/$(make -s --no-print-directory -C "$repo" static-bin)
export ROCE_IPVLAN_BIN
case ${K8S_NODES:-1} in
1)
	VM_MEM=${VM_MEM:-6144} VM_TIMEOUT=${VM_TIMEOUT:-2400} \
		exec "$repo/tests/vm/run.sh" bash "$here/node.sh" "$cache" bash "$script" "$@"
	;;
2)
	export K8S_NODES
	VM_MEM=${VM_MEM:-6144} FABRIC_LAYOUT=flat FABRIC_TIMEOUT=${VM_TIMEOUT:-2400} FABRIC_SMP_A=${FABRIC_SMP_A:-2} \
		exec "$repo/tests/fabric/run.sh" "$here/node.sh" "$cache" bash "$script" "$@"
	;;
*) echo "run.sh: K8S_NODES must be 1 or 2, not '$K8S_NODES'" >&2; exit 2 ;;
esac
