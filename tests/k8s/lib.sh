# shellcheck shell=bash
# Helpers for code running on the Kubernetes test node (sourced by tests/k8s/node.sh, and by
# the scripts it runs: `source "$K8S_LIB"`). On the host only tests/k8s/crd-test.sh uses them
# (daemon, wait_for and the control plane's below, for an API server alone); nothing else here
# runs on the host.
#
#   daemon [--restart] NAME ARGS...
#                                start bin/NAME in the background, its log in $K8S_LOGS/NAME.log
#                                (with --restart, started again whenever it exits)
#   pki_init DIR, cert DIR NAME SUBJECT [SANS], kubeconfig FILE SERVER DIR USER,
#   apiserver [--restart] DIR ETCD_URL PORT ADDRESS [ARGS...]
#                                the control plane's certificates, kubeconfigs and API server
#                                (node.sh; crd-test.sh): below
#   node_host, node_containerd, node_kubelet, node_railpf
#                                a node's own side, on the first node (node.sh) and on the
#                                second (worker.sh): below
#   wait_for SECS WHAT CMD...    retry CMD (quietly) once a second until it succeeds or SECS pass
#   node_ready                   the node's Ready condition is True
#   cluster_ready NODE...        wait until the DaemonSets, nv-ipam and the nodes' devices are
#                                ready (before SCRIPT, and after a test that disturbed them)
#   install_multus               Multus from the module's own daemonset manifest (thin; thick
#                                on two nodes)
#   install_nv_ipam              nv-ipam's controller and node DaemonSet from its deploy/ tree
#   install_sriovdp              the SR-IOV network device plugin's DaemonSet and its ConfigMap
#   netstatus POD [NS]           the pod's k8s.v1.cni.cncf.io/network-status annotation (JSON)
#   in_pod POD [-n NS] CMD...    CMD in the pod's container, as kubectl exec runs it (a pod
#                                on this node entered directly: below)
#   wait_pod_ready POD [SECS]    wait for the pod's Ready condition
#   wait_pod_gone POD [SECS]     wait until the pod no longer exists
#   check / fail / finish        a small test reporter: "ok ..." / "FAIL ..." lines and the
#                                closing "N passed, N failed" line; finish exits non-zero on any
#                                failure
K8S_LIB=${BASH_SOURCE[0]}
export K8S_LIB

daemon() { # daemon [--restart] NAME ARGS...
	local restart=0 name
	[[ $1 == --restart ]] && { restart=1; shift; }
	name=$1
	shift
	if ((restart)); then
		# Restarted when it exits, as a kubelet restarts a static pod's container: kube-apiserver
		# exits when a start-up hook misses its deadline on a slow machine (a control plane on one
		# TCG CPU beside another VM: 'PostStartHook "start-service-ip-repair-controllers" failed').
		# shellcheck disable=SC2016 # expanded by that shell
		setsid bash -c 'while :; do "$@"; echo "daemon: $0 exited $?, restarting in 2 s"; sleep 2; done' \
			"$name" "$name" "$@" >>"$K8S_LOGS/$name.log" 2>&1 </dev/null &
	else
		setsid "$name" "$@" >>"$K8S_LOGS/$name.log" 2>&1 </dev/null &
	fi
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

# --- the control plane (node.sh; crd-test.sh, an API server alone on the host) --------------
# pki_init DIR: a CA in DIR (ca.key, ca.crt) and the service accounts' signing key pair (sa.key,
# sa.pub). ECDSA keys: fast under TCG.
pki_init() {
	openssl ecparam -name prime256v1 -genkey -noout -out "$1/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$1/ca.key" -subj /CN=roce-ipvlan-test-ca -days 30 -out "$1/ca.crt" 2>/dev/null
	openssl ecparam -name prime256v1 -genkey -noout -out "$1/sa.key" 2>/dev/null
	openssl ec -in "$1/sa.key" -pubout -out "$1/sa.pub" 2>/dev/null
}

# cert DIR NAME SUBJECT [SUBJECT_ALT_NAMES]: DIR/NAME.key and DIR/NAME.crt, signed by DIR's CA,
# for serving and for clients.
cert() {
	local pki=$1 ext
	openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$2.key" 2>/dev/null
	ext=$(mktemp)
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[[ -n ${4:-} ]] && echo "subjectAltName=$4"
	} >"$ext"
	openssl req -new -key "$pki/$2.key" -subj "$3" 2>/dev/null |
		openssl x509 -req -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
			-extfile "$ext" -out "$pki/$2.crt" 2>/dev/null
	rm -f "$ext"
}

# kubeconfig FILE SERVER DIR USER: FILE, a kubeconfig for SERVER (https://ADDRESS:PORT) as
# USER, with DIR's CA and DIR/USER's certificate.
kubeconfig() {
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: { server: "$2", certificate-authority: $3/ca.crt }
users:
  - name: $4
    user: { client-certificate: $3/$4.crt, client-key: $3/$4.key }
contexts:
  - name: test
    context: { cluster: test, user: $4 }
current-context: test
EOF
}

# apiserver [--restart] DIR ETCD_URL PORT ADDRESS [ARGS...]: kube-apiserver (a daemon) on PORT,
# advertising ADDRESS, with DIR's CA for clients, DIR/apiserver's certificate and DIR's service
# account keys, Node and RBAC authorization and the default admission plugins; ARGS added.
apiserver() {
	local restart=()
	[[ $1 == --restart ]] && { restart=(--restart); shift; }
	local pki=$1 etcd=$2 port=$3 address=$4
	shift 4
	daemon "${restart[@]}" kube-apiserver --etcd-servers "$etcd" --secure-port "$port" \
		--advertise-address "$address" --service-cluster-ip-range 10.96.0.0/24 \
		--client-ca-file "$pki/ca.crt" --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
		--kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
		--kubelet-preferred-address-types InternalIP \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$pki/sa.pub" \
		--service-account-signing-key-file "$pki/sa.key" \
		--requestheader-client-ca-file "$pki/ca.crt" --requestheader-allowed-names front-proxy-client \
		--requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
		--requestheader-extra-headers-prefix X-Remote-Extra- \
		--authorization-mode Node,RBAC --allow-privileged=true --enable-priority-and-fairness=false \
		--profiling=false --v=1 "$@"
}

# --- a node's own side (node.sh on the first node, worker.sh on the second) -----------------
K8S_DIR=/run/k8s

# node_host NAME IP POD_CIDR: the host as kubelet needs it. Its hostname; IP on a dummy NIC
# unless one of its NICs has it already (the cluster link of a two-node cluster), so the rails
# stay the rails; cgroup v2 with its controllers delegated; shared mounts; stores on a
# filesystem overlayfs can use as its upper layer (the root is itself an overlay); Debian's
# reference plugins in /opt/cni/bin (Multus and roce-ipvlan are installed there by their
# DaemonSets) and the cluster network, a bridge with host-local IPAM in POD_CIDR.
node_host() {
	local name=$1 ip=$2 cidr=$3 c controllers d
	hostname "$name"
	if ! ip -4 -o addr show | grep -q " inet $ip/"; then
		ip link add k8snode type dummy
		ip addr add "$ip/24" dev k8snode
		ip link set k8snode up
	fi
	mountpoint -q /sys/fs/cgroup || mount -t cgroup2 none /sys/fs/cgroup
	read -r -a controllers </sys/fs/cgroup/cgroup.controllers
	for c in "${controllers[@]}"; do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true; done
	mount --make-rshared /
	for d in /var/lib/containerd /var/lib/kubelet /var/log/pods /var/lib/etcd; do
		mkdir -p "$d" && mount -t tmpfs tmpfs "$d"
	done
	mount --make-rshared /var/lib/kubelet
	mkdir -p /opt/cni/bin /etc/cni/net.d /var/lib/cni "$K8S_DIR"
	ln -s /usr/lib/cni/* /opt/cni/bin/
	cat >/etc/cni/net.d/10-podnet.conflist <<EOF
{
  "cniVersion": "1.0.0",
  "name": "podnet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$cidr" }]], "routes": [{ "dst": "0.0.0.0/0" }] }
    }
  ]
}
EOF
}

# node_containerd: containerd (its runc shim running runc) and the node's image registry:
# registry "localhost" is tests/k8s/registry.py on 127.0.0.1:5000, serving what build.sh built,
# so pods pull localhost/... images as they would pull from any registry, whatever their policy.
# Pulls every image in the background (K8S_PULLS: that job's PID, for `wait`).
node_containerd() {
	local certs=$K8S_DIR/certs.d
	cat >"$K8S_DIR/containerd.toml" <<EOF
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
    config_path = "$certs"
[plugins.'io.containerd.cri.v1.runtime']
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "$K8S_CACHE/bin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/opt/cni/bin"]
    conf_dir = "/etc/cni/net.d"
EOF
	mkdir -p "$certs/localhost"
	cat >"$certs/localhost/hosts.toml" <<'TOML'
server = "http://127.0.0.1:5000"
[host."http://127.0.0.1:5000"]
  capabilities = ["pull", "resolve"]
TOML
	daemon registry.py "$K8S_CACHE/registry" 5000
	daemon containerd --config "$K8S_DIR/containerd.toml"
	wait_for 120 "containerd to answer" ctr version || return 1
	wait_for 60 "the image registry to answer" python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:5000/v2/")' || return 1
	# Now, while the API server starts (the pods would pull them later anyway).
	pull_images >"$K8S_LOGS/pull.log" 2>&1 &
	# shellcheck disable=SC2034 # the caller waits for it
	K8S_PULLS=$!
}
# multus_mode: the Multus this cluster runs, thin, or thick on two nodes (install_multus says why)
multus_mode() { if [[ ${K8S_NODES:-1} == 2 ]]; then echo thick; else echo thin; fi; }
pull_images() {
	local d r tag unused=multus-cni:v4.2.3-thin # the Multus this cluster does not run
	[[ $(multus_mode) == thin ]] && unused=multus-cni:v4.2.3-thick
	for d in "$K8S_CACHE"/registry/*/; do
		r=$(basename "$d")
		for tag in $(jq -r '.manifests[].annotations["org.opencontainers.image.ref.name"] // empty' "$d/index.json"); do
			[[ $tag == rollout ]] && continue # pulled when the rollout test rolls it out
			[[ $r:$tag == "$unused" ]] && continue
			ctr -n k8s.io images pull --hosts-dir "$K8S_DIR/certs.d" "localhost/$r:$tag" >/dev/null || return 1
		done
	done
}

# node_kubelet NAME IP KUBECONFIG CA: kubelet registering the node NAME with address IP. The
# pods' periodic resync is the default minute (syncFrequency; it was 10 s): a pod's changes wake
# the kubelet anyway (PLEG, the API), and each resync of each pod costs the TCG node CPU.
node_kubelet() {
	cat >"$K8S_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: false }
  x509: { clientCAFile: $4 }
authorization: { mode: AlwaysAllow }
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
failSwapOn: false
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: { memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%" }
nodeStatusUpdateFrequency: 10s
EOF
	daemon kubelet --config "$K8S_DIR/kubelet.yaml" --kubeconfig "$3" --hostname-override "$1" --node-ip "$2" --v=1
}

# node_railpf: every rail's RDMA devices as rdma/rdma_shared_device_a, as the RDMA shared device
# plugin offers them (tests/k8s/go/railpf): the real one cannot see Soft-RoCE (docs/testing.md).
# The rails by PCI address, nvidia.com/hostdev, come from the real SR-IOV network device plugin.
node_railpf() {
	wait_for 120 "kubelet's device-plugin socket" test -S /var/lib/kubelet/device-plugins/kubelet.sock || return 1
	modprobe rdma_ucm # /dev/infiniband/rdma_cm, for RDMA CM in the pods
	daemon railpf -netdevs 'rdma*' -shared rdma/rdma_shared_device_a
}

node_ready() { # node_ready [NODE]: the node's (default K8S_NODE's) Ready condition is True
	[[ $(kubectl get node "${1:-$K8S_NODE}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
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
	# The upstream DaemonSet (deployments/multus-daemonset.yml of the module build.sh built
	# Multus from; -thick.yml on two nodes, below), its image swapped for the one built here,
	# and its limits lifted: 100m of a TCG CPU starves thin_entrypoint for minutes, and the
	# binaries it copies into the node's /opt/cni/bin (tmpfs in the VM) are charged to its 50Mi
	# memory limit, which OOM-killed it into CrashLoopBackOff on a slow machine. Nothing else is
	# changed.
	#
	# Two nodes (K8S_NODES=2) run Multus thick. Thin Multus reads the pod from the API server on
	# every ADD, allowing each GET 250 ms and all of them 2.5 s (shortPollDuration and
	# shortPollTimeout in pkg/multus/multus.go). From the second node, whose one TCG CPU reaches
	# the API server over the cluster link, a GET took 0.34 to 3.5 s, and every ADD there failed
	# with "error waiting for pod: context deadline exceeded". The thick daemon answers from an
	# informer's cache of its own node's pods (newPodInformer in pkg/server/server.go).
	local dir mode manifest=multus-daemonset.yml
	mode=$(multus_mode)
	[[ $mode == thin ]] || manifest=multus-daemonset-$mode.yml
	dir=$(mktemp -d /run/k8s/multus.XXXXXX)
	cp "$K8S_CACHE/manifests/$manifest" "$dir/"
	cat >"$dir/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [$manifest]
images:
  - name: ghcr.io/k8snetworkplumbingwg/multus-cni
    newName: localhost/multus-cni
    newTag: v4.2.3-$mode
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
	# Thick: its init container (install_multus, which copies the shim into /opt/cni/bin) asks
	# for 10m of CPU: on a busy TCG node that share starved it, Init:0/1 for 13 and 15 min on
	# roce-node in two runs; it gets the share of a container that has work to do. And the
	# daemon looks each delegate up in its own /opt/cni/bin (the node's, mounted) before it runs
	# it chrooted into the node's root: the node's reference plugins there are links into
	# /usr/lib/cni (node_host), which it mounts too.
	[[ $mode == thick ]] && cat >>"$dir/kustomization.yaml" <<'EOF'
      - op: replace
        path: /spec/template/spec/initContainers/0/resources/requests/cpu
        value: 500m
      - op: add
        path: /spec/template/spec/volumes/-
        value: { name: usr-lib-cni, hostPath: { path: /usr/lib/cni } }
      - op: add
        path: /spec/template/spec/containers/0/volumeMounts/-
        value: { name: usr-lib-cni, mountPath: /usr/lib/cni, readOnly: true }
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

# cluster_ready NODE...: what node.sh waits for before SCRIPT runs, and what a test that
# disturbed the cluster waits for before the next test (a NoExecute taint evicts nv-ipam's and
# sriovdp's pods; their DaemonSets put them back once it is gone). Returns 1, having said what
# it gave up on, if any part is not there in time.
cluster_ready() {
	local n hostdevs
	wait_for 600 "Multus's, nv-ipam's, sriovdp's and roce-ipvlan's DaemonSets to be ready" daemonsets_ready || return 1
	# nv-ipam's controller gives nodes their blocks of each pool: a pool a test applies must
	# get one, so the controller is up (and has its leader lease).
	wait_for 300 "nv-ipam's controller to be available" nv_ipam_controller_ready || return 1
	# ipam-node copies the CNI in, then serves the CNI's calls on its socket.
	wait_for 120 "ipam-node's CNI in /opt/cni/bin and its socket" \
		test -x /opt/cni/bin/nv-ipam -a -S /var/lib/cni/nv-ipam/daemon.sock || return 1
	# railpf's shared resource, and sriovdp's one device per rail (none with the example's
	# selectors as they are: K8S_SRIOVDP_SELECTORS=example).
	hostdevs=$(find /sys/class/net -maxdepth 1 -name 'rdma*' | wc -l)
	[[ ${K8S_SRIOVDP_SELECTORS:-} == example ]] && hostdevs=0
	for n in "$@"; do
		wait_for 120 "node $n to offer the rails' devices ($hostdevs nvidia.com/hostdev)" bash -c \
			"kubectl get node $n -o json | jq -e '.status.allocatable |
				(.\"rdma/rdma_shared_device_a\" // \"0\" | tonumber > 0) and (.\"nvidia.com/hostdev\" // \"0\" | tonumber == $hostdevs)'" ||
			return 1
	done
	# 00-multus.conflist when the default network's file is a 1.0.0 conflist, else 00-multus.conf.
	wait_for 120 "Multus's configuration" compgen -G '/etc/cni/net.d/00-multus.conf*'
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

# in_pod POD [-n NS] CMD...: CMD in POD's container, in its namespaces, root, working
# directory and environment, with its exit status. A pod whose container runs on this node is
# entered directly (nsenter); any other goes through kubectl exec. Under QEMU TCG one kubectl exec
# costs the node seconds of CPU (kubectl, the API server, the kubelet, containerd, runc exec and
# runc init), and a test reads a pod's files a dozen times; what the pod sees is the same, since
# the kernel answers by the reader's namespaces (the GID tables by its network namespace). The
# path a user takes, kubectl exec, stays in the suite where it is the point (20-attach.sh).
in_pod() {
	local pod=$1 ns=default pid
	shift
	if [[ ${1:-} == -n ]]; then ns=$2; shift 2; fi
	if pid=$(pod_pid "$pod" "$ns"); then
		local -a envs
		mapfile -d '' envs <"/proc/$pid/environ" || return 1
		nsenter -t "$pid" -m -u -i -n -p -C -r -w -- /usr/bin/env -i "${envs[@]}" "$@"
	else
		kubectl exec -n "$ns" "$pod" -- "$@"
	fi
}

# pod_pid POD NS: the PID of POD's one running container on this node, read from containerd's
# task bundles (the CRI's annotations in each container's OCI config); fails when there is none or
# more than one (kubectl exec then picks the container).
pod_pid() {
	local dir pid pids=()
	for dir in $(jq -r --arg pod "$1" --arg ns "$2" '.annotations // {}
			| select(.["io.kubernetes.cri.container-type"] == "container"
				and .["io.kubernetes.cri.sandbox-name"] == $pod and .["io.kubernetes.cri.sandbox-namespace"] == $ns)
			| input_filename' /run/containerd/io.containerd.runtime.v2.task/k8s.io/*/config.json 2>/dev/null); do
		pid=$(cat "${dir%/config.json}/init.pid" 2>/dev/null) && [[ -d /proc/$pid/ns ]] && pids+=("$pid")
	done
	((${#pids[@]} == 1)) && echo "${pids[0]}"
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
