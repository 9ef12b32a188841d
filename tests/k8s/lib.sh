# shellcheck shell=bash
# Helpers for code running on the Kubernetes test node (sourced by tests/k8s/node.sh, and by
# the scripts it runs: `source "$K8S_LIB"`). Nothing here runs on the host.
#
#   daemon NAME ARGS...          start bin/NAME in the background, its log in $K8S_LOGS/NAME.log
#   wait_for SECS WHAT CMD...    retry CMD (quietly) once a second until it succeeds or SECS pass
#   node_ready                   the node's Ready condition is True
#   install_multus               Multus thin from the module's own daemonset manifest
#   install_nv_ipam              nv-ipam's controller and node DaemonSet from its deploy/ tree
#   install_sriovdp              the SR-IOV network device plugin's DaemonSet and its ConfigMap
#   netstatus POD [NS]           the pod's k8s.v1.cni.cncf.io/network-status annotation (JSON)
#   in_pod POD CMD...            kubectl exec in the pod's first container
#   wait_pod_ready POD [SECS]    wait for the pod's Ready condition
#   wait_pod_gone POD [SECS]     wait until the pod no longer exists
#   check / fail / finish        a small test reporter: "ok ..." / "FAIL ..." lines and the
#                                closing "N passed, N failed" line; finish exits non-zero on any
#                                failure
K8S_LIB=${BASH_SOURCE[0]}
export K8S_LIB

daemon() {
	local name=$1
	shift
	setsid "$name" "$@" >>"$K8S_LOGS/$name.log" 2>&1 </dev/null &
	echo $! >"$K8S_LOGS/$name.pid"
}

wait_for() { # wait_for SECS WHAT CMD...
	local secs=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + secs))
	while ((SECONDS < deadline)); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 1
	done
	echo "k8s: gave up after ${secs}s waiting for $what (last try: $*)" >&2
	"$@" >&2 || true
	return 1
}

node_ready() {
	[[ $(kubectl get node "$K8S_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

daemonsets_ready() { # every DaemonSet's pods Ready; every 30 s the pods' state on stderr
	local ds
	ds=$(kubectl get ds -A -o jsonpath='{range .items[*]}{.status.desiredNumberScheduled} {.status.numberReady} {.status.updatedNumberScheduled}{"\n"}{end}') || return 1
	if ((SECONDS - ${K8S_SHOWN:-0} >= 30)) && { true >&3; } 2>/dev/null; then
		K8S_SHOWN=$SECONDS
		kubectl get pods -A -o wide --no-headers >&3 || true
		kubectl get events -A --field-selector type=Warning --no-headers 2>/dev/null | tail -n 3 | cut -c1-400 >&3 || true
		grep -hiE 'level=(error|warn)|^E[0-9]{4}' "$K8S_LOGS/containerd.log" "$K8S_LOGS/kubelet.log" 2>/dev/null | tail -n 6 | cut -c1-400 >&3 || true
	fi
	[[ -n $ds ]] && ! awk '$1 == 0 || $1 != $2 || $1 != $3 {bad = 1} END {exit !bad}' <<<"$ds"
}

install_multus() {
	# The upstream thin DaemonSet (deployments/multus-daemonset.yml of the module build.sh built
	# Multus from), its image swapped for the one built here, and its limits lifted: 100m of a
	# TCG CPU starves thin_entrypoint for minutes, and the binaries it copies into the node's
	# /opt/cni/bin (tmpfs in the VM) are charged to its 50Mi memory limit, which OOM-killed it
	# into CrashLoopBackOff on a slow machine. Nothing else is changed.
	local dir
	dir=$(mktemp -d /run/k8s/multus.XXXXXX)
	cp "$K8S_CACHE/manifests/multus-daemonset.yml" "$dir/"
	cat >"$dir/kustomization.yaml" <<'EOF'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [multus-daemonset.yml]
images:
  - name: ghcr.io/k8snetworkplumbingwg/multus-cni
    newName: localhost/multus-cni
    newTag: v4.2.3-thin
patches:
  - target: { kind: DaemonSet, name: kube-multus-ds }
    patch: |
      - op: replace
        path: /spec/template/spec/containers/0/resources/limits/cpu
        value: "1"
      - op: add
        path: /spec/template/spec/containers/0/resources/limits/memory
        value: 512Mi
EOF
	kubectl apply -k "$dir" >/dev/null
}

# nv-ipam (tests/k8s/manifests/nv-ipam: upstream's no-webhook overlay of the tree build.sh
# built, in the Network Operator's namespace, with the node's image), in the namespace a user
# creates for it first.
NV_IPAM_NS=nvidia-network-operator
install_nv_ipam() {
	kubectl create namespace "$NV_IPAM_NS" >/dev/null
	kubectl apply -k "$K8S_CACHE/manifests/nv-ipam" >/dev/null
}
# The controller's Deployment is available and the controller holds its leader lease (the
# LeaderElectionID of cmd/ipam-controller): only the leader gives nodes their blocks.
nv_ipam_controller_ready() {
	[[ $(kubectl -n "$NV_IPAM_NS" get deploy nv-ipam-controller -o jsonpath='{.status.availableReplicas}') == 1 ]] &&
		[[ -n $(kubectl -n "$NV_IPAM_NS" get lease dd1643cf.nvidia.com -o jsonpath='{.spec.holderIdentity}') ]]
}

# The SR-IOV network device plugin (tests/k8s/manifests/sriovdp: its own DaemonSet manifest)
# with the ConfigMap sriovdp-config made from examples/nicclusterpolicy.yaml's
# sriovDevicePlugin.config, the rails' PCI addresses in place of the example's. As is, the
# example's other two selectors match nothing here: "vendors": ["15b3"] (the rails are
# virtio-net functions, vendor 1af4) and "isRdma": true (sriovdp looks for an RDMA device under
# the PCI function, /sys/bus/pci/devices/<address>/infiniband; a Soft-RoCE device hangs off the
# netdev instead). So both are dropped, and the PCI addresses alone select the rails; sriovdp
# then mounts no RDMA devices (isRdma is what makes it), which railpf's shared resource gives.
# K8S_SRIOVDP_SELECTORS=example keeps the example's selectors (sriovdp then offers nothing:
# its log says why, docs/testing.md).
install_sriovdp() {
	local nd d pcis=() cfg
	for nd in /sys/class/net/rdma*; do
		d=$(readlink -f "$nd/device")
		[[ $(basename "$d") == virtio* ]] && d=$(dirname "$d") # a virtio NIC's function is its parent
		pcis+=("$(basename "$d")")
	done
	cfg=$(python3 -c 'import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc.get("spec", {}).get("sriovDevicePlugin"):
        print(doc["spec"]["sriovDevicePlugin"]["config"])' "${K8S_LIB%/*}/../../examples/nicclusterpolicy.yaml" |
		jq --arg mode "${K8S_SRIOVDP_SELECTORS:-virtio}" '.resourceList[0].selectors |=
			(.pciAddresses = $ARGS.positional | if $mode == "example" then . else del(.vendors, .isRdma) end)' \
			--args "${pcis[@]}") || return 1
	kubectl -n kube-system create configmap sriovdp-config --from-literal=config.json="$cfg" >/dev/null
	kubectl apply -k "$K8S_CACHE/manifests/sriovdp" >/dev/null
}

netstatus() { # netstatus POD [NS]
	kubectl get pod "$1" -n "${2:-default}" -o jsonpath='{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/network-status}'
}

in_pod() { # in_pod POD [-n NS] CMD...
	local pod=$1 ns=default
	shift
	if [[ ${1:-} == -n ]]; then ns=$2; shift 2; fi
	kubectl exec -n "$ns" "$pod" -- "$@"
}

wait_pod_ready() { # wait_pod_ready POD [SECS] [NS]
	kubectl wait --for=condition=Ready "pod/$1" -n "${3:-default}" --timeout="${2:-300}s" >/dev/null
}

wait_pod_gone() { # wait_pod_gone POD [SECS] [NS]
	kubectl wait --for=delete "pod/$1" -n "${3:-default}" --timeout="${2:-300}s" >/dev/null 2>&1 || true
	! kubectl get pod "$1" -n "${3:-default}" >/dev/null 2>&1
}

K8S_PASSED=0
K8S_FAILED=0
check() { # check DESCRIPTION CMD...: ok when CMD succeeds
	local what=$1
	shift
	if "$@"; then
		echo "ok    $what"
		K8S_PASSED=$((K8S_PASSED + 1))
	else
		echo "FAIL  $what"
		K8S_FAILED=$((K8S_FAILED + 1))
	fi
}
fail() { echo "FAIL  $*"; K8S_FAILED=$((K8S_FAILED + 1)); }
pass() { echo "ok    $*"; K8S_PASSED=$((K8S_PASSED + 1)); }
finish() {
	echo "k8s: $K8S_PASSED passed, $K8S_FAILED failed"
	((K8S_FAILED == 0))
}
