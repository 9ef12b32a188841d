# shellcheck shell=bash
# Helpers of the Kubernetes suite (sourced inside the node VM, after tests/k8s/lib.sh).
# shellcheck source=tests/k8s/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

fail() { echo "FAIL: $*" >&2; exit 1; }
note() { echo "  - $*"; }
assert_eq() { [[ $1 == "$2" ]] || fail "$3: expected '$2', found '$1'"; }
assert_match() { [[ $1 =~ $2 ]] || fail "$3: '$1' does not match /$2/"; }

TESTPOD_IMAGE=localhost/roce-ipvlan-testpod:latest
# Rails of the VM (tests/vm/run.sh): rdma0..rdma3 and ens1f0np0 carry rxe0..rxe4.
RAIL_NET=10.56

# nad NAME CONFIG_JSON [NAMESPACE]: a NetworkAttachmentDefinition with the config as given.
nad() {
	kubectl apply -f - >/dev/null <<YAML
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata: { name: $1, namespace: ${3:-default} }
spec:
  config: '$2'
YAML
}

# example_nad FILE NAME [IPAM_JSON [EDIT]]: the example's NAD as users apply it; with IPAM_JSON
# (not empty), its IPAM swapped for that (a test that needs a subnet or an IPAM of its own); with
# EDIT, that jq filter applied to its configuration (a setting a user would change on their
# cluster); nothing else changed. The examples' nv-ipam IPAM needs their pool: example_pool.
example_nad() {
	kubectl create --dry-run=client -o json -f "$ROCE_REPO/$1" |
		jq --arg name "$2" --arg ipam "${3:-}" \
			'(.items // [.])[] | select(.kind == "NetworkAttachmentDefinition" and .metadata.name == $name)
			 | if $ipam == "" then . else .spec.config |= (fromjson | .ipam = ($ipam | fromjson) | tojson) end
			 | .spec.config |= (fromjson | '"${4:-.}"' | tojson)' |
		kubectl apply -f - >/dev/null
}

# --- nv-ipam (installed by node.sh in $NV_IPAM_NS, the one namespace it reads pools from) ---
NV_IPAM_STORE=/var/lib/cni/nv-ipam/store # ipam-node's reservations on the node (its --store-file)

# example_pool: examples/a100-ippool.yaml applied as is; waits until the controller has given the
# node its block and prints it ("START END").
example_pool() {
	kubectl apply -f "$ROCE_REPO/examples/a100-ippool.yaml" >/dev/null
	wait_for 180 "the node's block of rdma-rail-pool" node_block rdma-rail-pool >/dev/null ||
		fail "no block of rdma-rail-pool for $K8S_NODE: $(kubectl -n "$NV_IPAM_NS" get ippool rdma-rail-pool -o jsonpath='{.status}')"
	node_block rdma-rail-pool
}

# node_block POOL: "START END" of the node's allocation in the IPPool's status.
node_block() {
	kubectl -n "$NV_IPAM_NS" get ippool "$1" -o json |
		jq -er --arg n "$K8S_NODE" 'first(.status.allocations[]? | select(.nodeName == $n)) | "\(.startIP) \(.endIP)"'
}

ip4_int() { local o1 o2 o3 o4; IFS=. read -r o1 o2 o3 o4 <<<"$1"; echo $(((o1 << 24) + (o2 << 16) + (o3 << 8) + o4)); }
in_block() { # IP START END
	local a
	a=$(ip4_int "$1")
	((a >= $(ip4_int "$2") && a <= $(ip4_int "$3")))
}

# nv_ipam_reserved [POD]: the addresses ipam-node holds on the node (POD's only, when given),
# one a line, sorted.
nv_ipam_reserved() {
	[[ -e $NV_IPAM_STORE ]] || return 0
	jq -r --arg pod "${1:-}" '.pools // {} | .[] | .entries // {} | .[]
		| select($pod == "" or .metadata.pod_name == $pod) | .ip_address' "$NV_IPAM_STORE" | sort
}
nv_ipam_count() { nv_ipam_reserved "$@" | grep -c . || true; }

# nv_ipam_pod POD BLOCK COUNT: POD's network-status gives COUNT addresses besides the cluster
# network's, each in BLOCK ("START END", the node's block) and each one ipam-node has reserved
# for POD, and no other.
nv_ipam_pod() {
	local pod=$1 block=$2 n=$3 ips ip
	ips=$(netstatus "$pod" | jq -r '.[] | select(.default != true) | .ips[]?' | sort)
	assert_eq "$(grep -c . <<<"$ips")" "$n" "addresses of $pod's attachments (${ips//$'\n'/ })"
	# shellcheck disable=SC2086 # BLOCK is two words
	for ip in $ips; do in_block "$ip" $block || fail "$pod's address $ip is not in the node's block $block"; done
	assert_eq "$(nv_ipam_reserved "$pod" | tr '\n' ' ')" "$(tr '\n' ' ' <<<"$ips")" \
		"what ipam-node holds for $pod ($NV_IPAM_STORE) against its network-status"
	note "$pod: ${ips//$'\n'/ } from the node's block $block"
}

pci_of() { # NETDEV: its PCI function (a virtio NIC's "device" is the virtio device below it)
	local d
	d=$(readlink -f "/sys/class/net/$1/device")
	[[ $(basename "$d") == virtio* ]] && d=$(dirname "$d")
	basename "$d"
}

# rail_nad NAME [EXTRA_JSON]: one NAD for all rails (cni-args pick the rail), host-local per rail
# in 10.56.<rail>.0/24 chosen by the pod's cni-args... host-local has one range per NAD, so each
# test NAD gets its own subnet: RAIL_SUBNET (default 10.56.0.0/16).
rail_nad() {
	local extra=${2:-'{}'}
	nad "$1" "$(jq -cn --arg name "$1" --arg subnet "${RAIL_SUBNET:-$RAIL_NET.0.0/16}" --argjson extra "$extra" \
		'{cniVersion: "1.0.0", name: $name, type: "roce-ipvlan", allowedRails: ["rdma*", "ens1f0np0"],
		  capabilities: {CNIDeviceInfoFile: true},
		  ipam: {type: "host-local", ranges: [[{subnet: $subnet}]]}} + $extra')"
}

# probe_ipam [HOLD_SECONDS [once | until FILE]]: install tests/k8s/suite/probe-ipam as
# /opt/cni/bin/probe-ipam (host-local that records each ADD and may hold it; its header) with an
# empty record, and print the EXTRA_JSON for rail_nad that uses it, with time limits that let
# ADD wait for it. cleanup_k8s removes it.
probe_ipam() {
	rm -rf /run/k8s-test
	mkdir -p /run/k8s-test
	: >/run/k8s-test/adds
	[[ -z ${1:-} ]] || echo "$1" >/run/k8s-test/hold
	[[ ${2:-} != once ]] || touch /run/k8s-test/hold-once
	[[ ${2:-} != until ]] || echo "$3" >/run/k8s-test/hold-until
	install -m 0755 "$(dirname "${BASH_SOURCE[0]}")/probe-ipam" /opt/cni/bin/probe-ipam
	jq -cn --arg subnet "${RAIL_SUBNET:-$RAIL_NET.0.0/16}" \
		'{ipam: {type: "probe-ipam", ranges: [[{subnet: $subnet}]]}, timeouts: {totalMs: 120000, ipamMs: 110000}}'
}
probe_ipam_remove() { rm -rf /opt/cni/bin/probe-ipam /opt/cni/bin/probe-nv-ipam /opt/cni/bin/roce-ipvlan-before-rollout /run/k8s-test; }

# networks_on_rails NAD RAIL...: the pod annotation attaching NAD once per rail (net1, net2, ...)
networks_on_rails() {
	local nad=$1 i=1 r out=()
	shift
	for r in "$@"; do
		out+=("$(jq -cn --arg n "$nad" --arg i "net$i" --arg r "$r" '{name: $n, interface: $i, "cni-args": {master: $r}}')")
		i=$((i + 1))
	done
	local IFS=,
	echo "[${out[*]}]"
}

# testpod NAME NETWORKS_ANNOTATION [NAMESPACE]: a pod on the test-pod image, attached as asked,
# with the devices TESTPOD_DEVICES names (default: every rail's RDMA devices, /dev/infiniband, as
# the examples' pods get them). testpod_yaml prints it without applying it.
testpod() { testpod_yaml "$@" | kubectl apply -f - >/dev/null; }
testpod_yaml() {
	cat <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: ${3:-default}
  annotations:
    k8s.v1.cni.cncf.io/networks: '$2'
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: main
      image: $TESTPOD_IMAGE
      imagePullPolicy: IfNotPresent
      command: ["sleep", "infinity"]
      resources:
        requests: { ${TESTPOD_DEVICES:-rdma/rdma_shared_device_a: 1} }
        limits: { ${TESTPOD_DEVICES:-rdma/rdma_shared_device_a: 1} }
      securityContext:
        capabilities: { add: ["IPC_LOCK"] }
YAML
}

gid_of_ipv4() { # the RoCE v2 GID of an IPv4 address, as sysfs prints it
	local o1 o2 o3 o4
	IFS=. read -r o1 o2 o3 o4 <<<"$1"
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$o1" "$o2" "$o3" "$o4"
}

rail_rdma_dev() { # the rxe device on a rail (the node's view)
	rdma link show | awk -v nd="$1" '$0 ~ (" netdev " nd "( |$)") {split($2, a, "/"); print a[1]; f=1} END {exit !f}'
}

# verify_pod_rail POD IFNAME RAIL: the child IFNAME in POD sits on RAIL, has the address
# network-status reports, and its ifalias's GID index holds that address's RoCE v2 GID, read
# inside the pod. Prints the address.
verify_pod_rail() {
	local pod=$1 ifn=$2 rail=$3 ns=${4:-default} status ip alias kv dev port idx
	status=$(netstatus "$pod" "$ns" | jq -c --arg i "$ifn" '.[] | select(.interface == $i)')
	[[ -n $status ]] || fail "network-status of $pod has no entry for $ifn: $(netstatus "$pod" "$ns")"
	ip=$(jq -r '.ips[0]' <<<"$status")
	[[ $ip =~ ^[0-9.]+$ ]] || fail "network-status of $pod/$ifn has no IPv4 address: $status"
	assert_eq "$(in_pod "$pod" -n "$ns" cat "/sys/class/net/$ifn/iflink")" "$(cat "/sys/class/net/$rail/ifindex")" \
		"$pod/$ifn's lower device (ifindex of $rail)"
	alias=$(in_pod "$pod" -n "$ns" cat "/sys/class/net/$ifn/ifalias")
	for kv in $alias; do
		case $kv in rdma_dev=*) dev=${kv#*=} ;; port=*) port=${kv#*=} ;; gid_index=*) idx=${kv#*=} ;; esac
	done
	assert_eq "${dev:-}" "$(rail_rdma_dev "$rail")" "$pod/$ifn's RDMA device (ifalias '$alias')"
	assert_eq "$(in_pod "$pod" -n "$ns" cat "/sys/class/infiniband/$dev/ports/$port/gids/$idx")" "$(gid_of_ipv4 "$ip")" \
		"GID $dev/$port/$idx read in $pod"
	assert_eq "$(in_pod "$pod" -n "$ns" cat "/sys/class/infiniband/$dev/ports/$port/gid_attrs/ndevs/$idx")" "$ifn" \
		"the netdev of GID $dev/$port/$idx in $pod"
	echo "$ip"
}

gid_of_ipv6() { # the RoCE v2 GID of an IPv6 address (any spelling), as sysfs prints it
	python3 -c 'import ipaddress, sys; print(ipaddress.IPv6Address(sys.argv[1]).exploded)' "$1"
}

rail_of_pci() { # PCI_ADDRESS: the rail (rdma0..rdma3) whose PCI function that is
	local r
	for r in rdma0 rdma1 rdma2 rdma3; do [[ $(pci_of "$r") == "$1" ]] && { echo "$r"; return 0; }; done
	fail "no rail has PCI address $1"
}

# --- Routed IPv6 rails (the B300 layout): a router per rail (tests/rail-router.sh) ---
# shellcheck source=tests/rail-router.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../rail-router.sh"
B300_PREFIX=2001:db8:100 # inside the b300 examples' "prefix" (2001:db8:100::/48)
rail_prefix() { echo "$B300_PREFIX:$(($1 + 1))::/64"; }
# rail_routers_start: rails 0-3 each get a router announcing rail_prefix N, as a rail router
# announces the node's own /64 on that rail.
rail_routers_start() {
	local n
	for n in 0 1 2 3; do rail_router_start "$n" "$(rail_prefix "$n")" || fail "rail $n's router did not start"; done
}
rail_routers_stop() { local n; for n in 0 1 2 3; do rail_router_stop "$n"; done; }

# What an attachment leaves on the node: host-local allocations, device-info files, children.
# The cluster network's allocations (podnet, tests/k8s/lib.sh) are not the plugin's: they
# change whenever a DaemonSet's pod is recreated, as after a test's taint evicted it.
host_local_allocations() {
	find /var/lib/cni/networks -mindepth 2 -type f -regex '.*/[0-9a-f.:]+' -not -path '/var/lib/cni/networks/podnet/*' \
		-printf '%P ' 2>/dev/null
}
host_local_count() { host_local_allocations | wc -w; }
# The CNI's device-info files (Multus's per-attachment cni/ directory; the device plugin's own,
# which sriovdp writes at Allocate under dp/ and keeps until it stops, are not the plugin's).
devinfo_files() { find /var/run/k8s.cni.cncf.io/devinfo/cni -type f -printf '%f ' 2>/dev/null; }
devinfo_count() { devinfo_files | wc -w; }
children_count() { # ipvlan children in any netns of the node
	local n=0 ns
	n=$(ip -d -o link show type ipvlan 2>/dev/null | wc -l)
	for ns in /run/netns/*; do
		[[ -e $ns ]] || continue
		# A sandbox's namespace may go between the glob and ip (pipefail): it holds none then.
		n=$((n + $(ip -n "$(basename "$ns")" -d -o link show type ipvlan 2>/dev/null | wc -l || true)))
	done
	echo "$n"
}
# leftovers: "ALLOCATIONS DEVINFO CHILDREN", to compare before a pod and after its deletion.
leftovers() { echo "$(host_local_count) $(devinfo_count) $(children_count)"; }
# counts CMD...: each CMD's output (a count), in order, on one line. A CMD with arguments is
# one word ("nv_ipam_count pod").
counts() {
	local c out=()
	# shellcheck disable=SC2086 # split on purpose: the command and its arguments
	for c; do out+=("$($c)"); done
	echo "${out[*]}"
}
# outputs WANT CMD...: CMD prints WANT (a predicate for wait_for).
outputs() { [[ $("${@:2}") == "$1" ]]; }
# settles_to SECS WHAT WANT CMD...: CMD's output becomes WANT within SECS, else the test fails
# with what it was and the host-local allocations and device-info files on the node. For what
# a pod's deletion must undo: the API object can be gone before the kubelet has torn the sandbox
# down (its CNI DEL), so a check right after `kubectl delete --wait` would race the teardown.
settles_to() {
	wait_for "$1" "$2" outputs "$3" "${@:4}" ||
		fail "$2: expected '$3', found '$("${@:4}")' after ${1}s" \
			"(host-local allocations: $(host_local_allocations)device-info files: $(devinfo_files))"
}

# pod_debug POD: on stderr, what tells a pod that never got far (no sandbox, no event) from one
# that did: its node, phase and conditions, its events, and what the scheduler, the kubelet and
# containerd logged about it.
pod_debug() {
	local logs=${K8S_LOGS:-/run/k8s/logs} uid
	{
		echo "--- $1: node, phase, conditions"
		kubectl get pod "$1" -o json | jq -c '{node: .spec.nodeName, phase: .status.phase,
			conditions: [.status.conditions[]? | {type, status, reason, lastTransitionTime}]}'
		echo "--- $1: events"
		kubectl get events --field-selector "involvedObject.name=$1" --no-headers | cut -c1-400 | tail -n 6
		uid=$(kubectl get pod "$1" -o jsonpath='{.metadata.uid}')
		echo "--- kube-scheduler.log (the last lines, and those naming $1)"
		tail -n 5 "$logs/kube-scheduler.log"
		grep -h "$1" "$logs/kube-scheduler.log" | tail -n 5
		echo "--- kubelet.log and containerd.log naming $1 or its uid $uid"
		grep -hE "$1|${uid:-$1}" "$logs/kubelet.log" "$logs/containerd.log" | tail -n 12
	} 2>&1 | cut -c1-500 >&2
}

cleanup_k8s() { # delete what a test made in default (pods first: their DEL needs the NADs)
	# Pods bound to a Node object without a kubelet (70-policy.sh) never finish a graceful delete.
	local ghost
	for ghost in $(kubectl get nodes -l roce-ipvlan.test/ghost -o name 2>/dev/null); do
		kubectl delete pods --all -n default --field-selector "spec.nodeName=${ghost#node/}" \
			--force --grace-period=0 >/dev/null 2>&1 || true
		kubectl delete "$ghost" >/dev/null 2>&1 || true
	done
	kubectl delete pods --all -n default --grace-period=1 --wait=true --timeout=120s >/dev/null 2>&1 || true
	kubectl delete net-attach-def --all -n default >/dev/null 2>&1 || true
	probe_ipam_remove # after the pods: their DELs call it
	rail_routers_stop
}
