#!/usr/bin/env bash
# Inside the test VM (tests/vm/guest.sh has loaded the modules and built the Soft-RoCE rails):
# bring up a one-node Kubernetes cluster, install Multus (thin; thick on two nodes), nv-ipam and
# roce-ipvlan's installer DaemonSet as users do, wait until they are Ready, then run SCRIPT with
# kubectl on PATH and KUBECONFIG exported, and exit with its status. tests/k8s/run.sh starts this; see its header
# and docs/testing.md ("The Kubernetes node").
#
#   tests/k8s/node.sh CACHE SCRIPT [ARGS...]     (CACHE: what tests/k8s/build.sh printed)
#
# The whole cluster runs in the VM: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd (its runc shim running runc), kubelet. Nothing crosses the VM's
# boundary, so the VM needs no network to the host. The API server listens on 443 on all
# addresses and the `kubernetes` Service's ClusterIP (10.96.0.1) sits on lo: host-network pods
# (Multus, its kubeconfig) reach the API through the Service address without a kube-proxy.
#
# K8S_NODES=2: this VM is host a of a flat fabric (tests/fabric/run.sh; tests/k8s/run.sh boots
# it so) and its node is the first of two. The second, roce-node-b, is host b: once b's
# certificate is made here, `on b tests/k8s/worker.sh` starts its containerd, kubelet and
# railpf, and its kubelet joins this API server over the fabric's cluster link (eth0,
# 10.88.0.1 here, 10.88.0.2 there). Each node's pods are in a /24 of its own (10.244.1.0/24
# here, 10.244.2.0/24 on b) that the fabric routes to the other over that link.
set -euo pipefail
cache=${1:?usage: node.sh CACHE SCRIPT [ARGS...]}
shift
(($# > 0)) || { echo "usage: node.sh CACHE SCRIPT [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
bin=$cache/bin
k8s=/run/k8s
logs=$k8s/logs
pki=$k8s/pki
mkdir -p "$logs" "$pki"
export PATH=$bin:$here:$PATH KUBECONFIG=$k8s/admin.kubeconfig
export K8S_NODE=roce-node K8S_NODE_IP=172.31.0.10 K8S_LOGS=$logs K8S_CACHE=$cache
pod_cidr=10.244.0.0/24
nodes=("$K8S_NODE")
if [[ ${K8S_NODES:-1} == 2 ]]; then
	[[ $FABRIC_HOST == a && $FABRIC_LAYOUT == flat ]] ||
		{ echo "node: K8S_NODES=2 needs host a of a flat fabric (tests/k8s/run.sh boots it)" >&2; exit 2; }
	# shellcheck source=tests/fabric/lib.sh
	source "$FABRIC_LIB"
	export K8S_NODE_IP=10.88.0.1 K8S_NODE_B=roce-node-b K8S_NODE_B_IP=10.88.0.2
	pod_cidr=10.244.1.0/24
	nodes+=("$K8S_NODE_B")
elif [[ ${K8S_NODES:-1} != 1 ]]; then
	echo "node: K8S_NODES must be 1 or 2, not '$K8S_NODES'" >&2
	exit 2
fi
# shellcheck source=tests/k8s/lib.sh
source "$here/lib.sh"

t0=$SECONDS
step() { echo "node: [$((SECONDS - t0))s] $*" >&2; }

# On any failure before SCRIPT runs: what the components said last.
# shellcheck disable=SC2317 # called by the ERR trap; shellcheck misreads it as unreachable
bringup_failed() {
	echo "node: the cluster did not come up; last lines of each log:" >&2
	for f in "$logs"/*.log; do
		echo "--- $(basename "$f")" >&2
		tail -n 400 "$f" | grep -v 'configmap_cafile_content\|cacher.go' | tail -n 25 | cut -c1-600 >&2 || true
	done
	kubectl get nodes,pods -A -o wide >&2 2>/dev/null || true
	# A pod that keeps restarting: its last run's own words and why kubelet restarted it.
	local ns pod
	kubectl get pods -A --no-headers 2>/dev/null | awk '$5 > 0 { print $1, $2 }' |
		while read -r ns pod; do
			echo "--- $ns/$pod: previous run's log, last state" >&2
			# kubelet's own copy: the API cannot always serve a container that already left.
			tail -n 40 /var/log/pods/"${ns}_${pod}"_*/*/*.log 2>&1 | cut -c1-600 >&2 || true
			kubectl -n "$ns" get pod "$pod" \
				-o jsonpath='{range .status.containerStatuses[*]}{.name}: {.lastState}{"\n"}{end}' >&2 || true
		done
	if ((${#nodes[@]} == 2)); then
		echo "--- node $K8S_NODE_B (host b): worker.sh, then each log's last lines" >&2
		cat "$logs/worker-b.log" >&2 2>/dev/null || true
		# shellcheck disable=SC2016 # expanded on b
		on b bash -c 'for f in /run/k8s/logs/*.log; do echo "--- b: ${f##*/}"; tail -n 15 "$f" | cut -c1-600; done' >&2 || true
	fi
}
trap bringup_failed ERR
# wait_for silences what it runs; progress reports go to fd 3 (daemonsets_ready).
exec 3>&2

# --- the node's host side -------------------------------------------------------------------
node_host "$K8S_NODE" "$K8S_NODE_IP" "$pod_cidr"
# The kubernetes Service's ClusterIP on lo: host-network pods reach the API server there.
ip addr add 10.96.0.1/32 dev lo

# --- PKI: one CA (lib.sh's pki_init, cert and kubeconfig) ------------------------------------
step "certificates"
pki_init "$pki"
cert "$pki" apiserver /CN=kube-apiserver \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$K8S_NODE,IP:127.0.0.1,IP:10.96.0.1,IP:$K8S_NODE_IP"
cert "$pki" admin "/O=system:masters/CN=kubernetes-admin"
cert "$pki" node "/O=system:nodes/CN=system:node:$K8S_NODE" "DNS:$K8S_NODE,IP:$K8S_NODE_IP"
cert "$pki" controller-manager /CN=system:kube-controller-manager
cert "$pki" scheduler /CN=system:kube-scheduler
node_kubeconfig() { kubeconfig "$k8s/$1.kubeconfig" "https://$K8S_NODE_IP:443" "$pki" "$2"; } # NAME USER
node_kubeconfig admin admin
node_kubeconfig node node
if ((${#nodes[@]} == 2)); then
	# Node b's identity and kubeconfig, handed over in the fabric's shared folder; b starts
	# now so that its images are pulled while the API server here comes up.
	cert "$pki" node-b "/O=system:nodes/CN=system:node:$K8S_NODE_B" "DNS:$K8S_NODE_B,IP:$K8S_NODE_B_IP"
	mkdir -p "$FABRIC_SHARE/k8s"
	cp "$pki/ca.crt" "$pki/node-b.crt" "$pki/node-b.key" "$FABRIC_SHARE/k8s/"
	sed "s#$pki/#$FABRIC_SHARE/k8s/#g" "$k8s/node.kubeconfig" |
		sed "s#/node\.\(crt\|key\)#/node-b.\1#g" >"$FABRIC_SHARE/k8s/node-b.kubeconfig"
	on b bash "$here/worker.sh" "$cache" "$K8S_NODE_B" "$K8S_NODE_B_IP" 10.244.2.0/24 "$K8S_NODE_IP" \
		"$FABRIC_SHARE/k8s" >"$logs/worker-b.log" 2>&1 &
	worker_b=$!
fi
node_kubeconfig controller-manager controller-manager
node_kubeconfig scheduler scheduler

step "etcd, kube-apiserver, containerd, the registry, kubelet"
# --- control plane, first: under TCG the API server takes minutes to start ---------------
daemon etcd --data-dir /var/lib/etcd --listen-client-urls http://127.0.0.1:2379 \
	--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
	--unsafe-no-fsync --log-level warn
apiserver --restart "$pki" http://127.0.0.1:2379 443 "$K8S_NODE_IP"
# --- containerd and the images; kubelet ------------------------------------------------------
node_containerd
node_kubelet "$K8S_NODE" "$K8S_NODE_IP" "$k8s/node.kubeconfig" "$pki/ca.crt"
wait_for 900 "the API server to be ready" kubectl get --raw /readyz
step "kube-controller-manager, kube-scheduler"
daemon kube-controller-manager --kubeconfig "$k8s/controller-manager.kubeconfig" \
	--authentication-kubeconfig "$k8s/controller-manager.kubeconfig" \
	--authorization-kubeconfig "$k8s/controller-manager.kubeconfig" \
	--service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
	--use-service-account-credentials --leader-elect=false --profiling=false \
	--controllers '*,-node-ipam-controller,-cloud-node-lifecycle-controller' --v=1
daemon kube-scheduler --kubeconfig "$k8s/scheduler.kubeconfig" \
	--authentication-kubeconfig "$k8s/scheduler.kubeconfig" \
	--authorization-kubeconfig "$k8s/scheduler.kubeconfig" --leader-elect=false --profiling=false --v=1

if ((${#nodes[@]} == 2)); then
	wait "$worker_b" || { echo "node: worker.sh failed on host b:" >&2; cat "$logs/worker-b.log" >&2; false; }
fi
for n in "${nodes[@]}"; do
	wait_for 300 "node $n to register" kubectl get node "$n"
	# What Node Feature Discovery labels a node with a Mellanox/NVIDIA PCI function (vendor
	# 15b3): the installer's node selector. What the GPU Operator's feature discovery labels a
	# GPU node with: the node selector of the examples' nv-ipam pools (examples/a100-ippool.yaml),
	# so the node gets a block of them.
	kubectl label node "$n" feature.node.kubernetes.io/pci-15b3.present=true nvidia.com/gpu.present=true >/dev/null
done
wait "$K8S_PULLS" || { cat "$logs/pull.log" >&2; false; }
node_railpf

# --- Multus, nv-ipam and roce-ipvlan, as users install them ---------------------------------
step "Multus ($(multus_mode)), nv-ipam, the SR-IOV network device plugin, roce-ipvlan's installer DaemonSet"
install_multus
install_nv_ipam
install_sriovdp
kubectl apply -k "$here/manifests/installer" >/dev/null
for n in "${nodes[@]}"; do wait_for 300 "node $n to be Ready" node_ready "$n"; done
cluster_ready "${nodes[@]}"

step "cluster of ${#nodes[@]} node(s) ready; running $*"
trap - ERR

set +e
"$@"
rc=$?
set -e
if ((rc != 0)) && [[ -n ${K8S_DUMP_ON_FAILURE:-1} ]]; then
	echo "node: '$*' exited $rc; cluster state:" >&2
	kubectl get pods -A -o wide >&2 2>/dev/null || true
	kubectl get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -n 25 >&2 || true
	tail -n 20 "$logs/kubelet.log" >&2 || true
fi
exit "$rc"
