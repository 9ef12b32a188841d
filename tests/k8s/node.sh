#!/usr/bin/env bash
# Inside the test VM (tests/vm/guest.sh has loaded the modules and built the Soft-RoCE rails):
# bring up a one-node Kubernetes cluster, install Multus thin, nv-ipam and roce-ipvlan's
# installer DaemonSet as users do, wait until they are Ready, then run SCRIPT with kubectl on PATH and
# KUBECONFIG exported, and exit with its status. tests/k8s/run.sh starts this; see its header
# and docs/testing.md ("The Kubernetes node").
#
#   tests/k8s/node.sh CACHE SCRIPT [ARGS...]     (CACHE: what tests/k8s/build.sh printed)
#
# The whole cluster runs in the VM: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd (its runc shim running runc), kubelet. Nothing crosses the VM's
# boundary, so the VM needs no network to the host. The API server listens on 443 on all
# addresses and the `kubernetes` Service's ClusterIP (10.96.0.1) sits on lo: host-network pods
# (Multus, its kubeconfig) reach the API through the Service address without a kube-proxy.
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
}
trap bringup_failed ERR
# wait_for silences what it runs; progress reports go to fd 3 (daemonsets_ready).
exec 3>&2

# --- the node's host side -------------------------------------------------------------------
hostname "$K8S_NODE"
# The node's address on a dummy NIC (the rails stay the rails), the Service VIP on lo.
ip link add k8snode type dummy
ip addr add "$K8S_NODE_IP/24" dev k8snode
ip link set k8snode up
ip addr add 10.96.0.1/32 dev lo
# kubelet needs cgroup v2 with its controllers delegated, shared mounts, and stores on a
# filesystem overlayfs can use as its upper layer (the root is itself an overlay).
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
read -r -a controllers </sys/fs/cgroup/cgroup.controllers
for c in "${controllers[@]}"; do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true; done
mount --make-rshared /
for d in /var/lib/containerd /var/lib/kubelet /var/log/pods /var/lib/etcd; do
	mkdir -p "$d" && mount -t tmpfs tmpfs "$d"
done
mount --make-rshared /var/lib/kubelet
# The node's CNI: Debian's reference plugins in /opt/cni/bin (Multus and roce-ipvlan are
# installed there by their DaemonSets), the cluster network a bridge with host-local IPAM.
mkdir -p /opt/cni/bin /etc/cni/net.d /var/lib/cni
ln -s /usr/lib/cni/* /opt/cni/bin/
cat >/etc/cni/net.d/10-podnet.conflist <<'EOF'
{
  "cniVersion": "1.0.0",
  "name": "podnet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.244.0.0/24" }]], "routes": [{ "dst": "0.0.0.0/0" }] }
    }
  ]
}
EOF

# --- PKI: one CA, ECDSA keys (fast under TCG) ------------------------------------------------
step "certificates"
openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
openssl req -x509 -new -key "$pki/ca.key" -subj /CN=roce-ipvlan-test-ca -days 30 -out "$pki/ca.crt" 2>/dev/null
cert() { # cert NAME SUBJECT [SUBJECT_ALT_NAMES]
	openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$1.key" 2>/dev/null
	local ext
	ext=$(mktemp)
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[[ -n ${3:-} ]] && echo "subjectAltName=$3"
	} >"$ext"
	openssl req -new -key "$pki/$1.key" -subj "$2" 2>/dev/null |
		openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
			-extfile "$ext" -out "$pki/$1.crt" 2>/dev/null
	rm -f "$ext"
}
cert apiserver /CN=kube-apiserver \
	"DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$K8S_NODE,IP:127.0.0.1,IP:10.96.0.1,IP:$K8S_NODE_IP"
cert admin "/O=system:masters/CN=kubernetes-admin"
cert node "/O=system:nodes/CN=system:node:$K8S_NODE" "DNS:$K8S_NODE,IP:$K8S_NODE_IP"
cert controller-manager /CN=system:kube-controller-manager
cert scheduler /CN=system:kube-scheduler
openssl ecparam -name prime256v1 -genkey -noout -out "$pki/sa.key" 2>/dev/null
openssl ec -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
kubeconfig() { # kubeconfig NAME CERT
	cat >"$k8s/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: { server: "https://$K8S_NODE_IP:443", certificate-authority: $pki/ca.crt }
users:
  - name: $2
    user: { client-certificate: $pki/$2.crt, client-key: $pki/$2.key }
contexts:
  - name: test
    context: { cluster: test, user: $2 }
current-context: test
EOF
}
kubeconfig admin admin
kubeconfig node node
kubeconfig controller-manager controller-manager
kubeconfig scheduler scheduler

step "etcd, kube-apiserver, containerd, the registry, kubelet"
# --- control plane, first: under TCG the API server takes minutes to start ---------------
daemon etcd --data-dir /var/lib/etcd --listen-client-urls http://127.0.0.1:2379 \
	--advertise-client-urls http://127.0.0.1:2379 --listen-peer-urls http://127.0.0.1:2380 \
	--unsafe-no-fsync --log-level warn
daemon kube-apiserver --etcd-servers http://127.0.0.1:2379 --secure-port 443 \
	--advertise-address "$K8S_NODE_IP" --service-cluster-ip-range 10.96.0.0/24 \
	--client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
	--kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
	--kubelet-preferred-address-types InternalIP \
	--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
	--service-account-signing-key-file "$pki/sa.key" \
	--requestheader-client-ca-file "$pki/ca.crt" --requestheader-allowed-names front-proxy-client \
	--requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
	--requestheader-extra-headers-prefix X-Remote-Extra- \
	--authorization-mode Node,RBAC --allow-privileged=true --enable-priority-and-fairness=false \
	--profiling=false --v=1
# --- containerd and the images ---------------------------------------------------------------
cat >"$k8s/containerd.toml" <<EOF
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "localhost/pause:roce-ipvlan"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$k8s/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$bin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
EOF
# Registry "localhost" is tests/k8s/registry.py on 127.0.0.1:5000, serving what build.sh built:
# pods pull localhost/... images as they would pull from any registry, whatever their policy.
mkdir -p "$k8s/certs.d/localhost"
cat >"$k8s/certs.d/localhost/hosts.toml" <<'TOML'
server = "http://127.0.0.1:5000"
[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
TOML
daemon registry.py "$cache/registry" 5000
daemon containerd --config "$k8s/containerd.toml"
wait_for 120 "containerd to answer" ctr version
wait_for 60 "the image registry to answer" python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:5000/v2/")'
# Pull the images now, while the API server starts (the pods would pull them later anyway).
pull_images() {
	local d r tag
	for d in "$cache"/registry/*/; do
		r=$(basename "$d")
		for tag in $(jq -r '.manifests[].annotations["org.opencontainers.image.ref.name"] // empty' "$d/index.json"); do
			[[ $tag == rollout ]] && continue # pulled when the rollout test rolls it out
			ctr -n k8s.io images pull --hosts-dir "$k8s/certs.d" "localhost/$r:$tag" >/dev/null || return 1
		done
	done
}
pull_images >"$logs/pull.log" 2>&1 &
pulls=$!

# --- kubelet --------------------------------------------------------------------------------
cat >"$k8s/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: false }
  x509: { clientCAFile: $pki/ca.crt }
authorization: { mode: AlwaysAllow }
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: { memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%" }
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 10s
EOF
daemon kubelet --config "$k8s/kubelet.yaml" --kubeconfig "$k8s/node.kubeconfig" \
	--hostname-override "$K8S_NODE" --node-ip "$K8S_NODE_IP" --v=1
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

wait_for 300 "the node to register" kubectl get node "$K8S_NODE"
wait "$pulls" || { cat "$logs/pull.log" >&2; false; }
# What Node Feature Discovery labels a node with a Mellanox/NVIDIA PCI function (vendor 15b3):
# the installer's node selector.
kubectl label node "$K8S_NODE" feature.node.kubernetes.io/pci-15b3.present=true >/dev/null
# What the GPU Operator's feature discovery labels a GPU node with: the node selector of the
# examples' nv-ipam pools (examples/a100-ippool.yaml), so the node gets a block of them.
kubectl label node "$K8S_NODE" nvidia.com/gpu.present=true >/dev/null
# Every rail's RDMA devices as rdma/rdma_shared_device_a, as the RDMA shared device plugin
# offers them (tests/k8s/go/railpf): the real one cannot see Soft-RoCE (docs/testing.md). The
# rails by PCI address, nvidia.com/hostdev, come from the real SR-IOV network device plugin below.
wait_for 120 "kubelet's device-plugin socket" test -S /var/lib/kubelet/device-plugins/kubelet.sock
modprobe rdma_ucm # /dev/infiniband/rdma_cm, for RDMA CM in the pods
daemon railpf -netdevs 'rdma*' -shared rdma/rdma_shared_device_a

# --- Multus thin, nv-ipam and roce-ipvlan, as users install them ----------------------------
step "Multus thin, nv-ipam, the SR-IOV network device plugin, roce-ipvlan's installer DaemonSet"
install_multus
install_nv_ipam
install_sriovdp
kubectl apply -k "$here/manifests/installer" >/dev/null
wait_for 300 "the node to be Ready" node_ready
wait_for 600 "Multus's, nv-ipam's, sriovdp's and roce-ipvlan's DaemonSets to be ready" daemonsets_ready
# nv-ipam's controller gives nodes their blocks of each pool: a pool applied by SCRIPT must
# get one, so the controller is up (and has its leader lease) before SCRIPT runs.
wait_for 300 "nv-ipam's controller to be available" nv_ipam_controller_ready
# ipam-node copies the CNI in, then serves the CNI's calls on its socket.
wait_for 120 "ipam-node's CNI in /opt/cni/bin and its socket" \
	test -x /opt/cni/bin/nv-ipam -a -S /var/lib/cni/nv-ipam/daemon.sock
# railpf's shared resource, and sriovdp's one device per rail (none with the example's
# selectors as they are: K8S_SRIOVDP_SELECTORS=example).
hostdevs=$(find /sys/class/net -maxdepth 1 -name 'rdma*' | wc -l)
[[ ${K8S_SRIOVDP_SELECTORS:-} == example ]] && hostdevs=0
wait_for 120 "the node to offer the rails' devices ($hostdevs nvidia.com/hostdev)" bash -c \
	"kubectl get node $K8S_NODE -o json | jq -e '.status.allocatable |
		(.\"rdma/rdma_shared_device_a\" // \"0\" | tonumber > 0) and (.\"nvidia.com/hostdev\" // \"0\" | tonumber == $hostdevs)'"
# 00-multus.conflist when the default network's file is a 1.0.0 conflist, else 00-multus.conf.
wait_for 120 "Multus's configuration" compgen -G '/etc/cni/net.d/00-multus.conf*'

step "cluster ready; running $*"
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
